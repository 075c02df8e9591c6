"""The user's own data (issue 28), as users point the framework at it: ``dataset=folder`` on a class-folder tree of
PNG and JPEG images of mixed sizes and modes written here, ``dataset=table`` on a CSV, a Parquet file and a
``save_to_disk`` folder written with ``datasets`` itself; their splits and hash recomputed by hand, labels mapped
as documented, every bad input named before compute, and finetuning, P(f) and the probe end to end (launch.py)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from plasticity.data import DataSpec, load_splits, official_splits, source, split_indices
from plasticity.data.images import EvalImages
from plasticity.data.sources import DataError, recorded_classes
from tests import forklaunch

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
CLASSES = ("zebra", "ant", "moth")  # written out of order: sorted, ant is 0, moth 1, zebra 2
MODES = ("RGB", "L", "RGBA", "P")
WORDS = "the a model reads every word of this short review and then says what it thinks about the film".split()


def write_tree(root: Path, per_class: int = 12, splits: tuple[str, ...] = ()) -> Path:
    """``root/[<split>/]<class>/<i>.{png,jpg}``: sizes 20..60 px, grey, RGBA and palette images among them
    (JPEG cannot hold RGBA or palette: those are PNG); each class a different mean colour."""
    rng = np.random.default_rng(0)
    for split in splits or ("",):
        for c, cls in enumerate(CLASSES):
            folder = root / split / cls
            folder.mkdir(parents=True)
            for i in range(per_class):
                h, w = rng.integers(20, 61, size=2)
                pixels = np.clip(rng.normal(60 + 70 * c, 20, (h, w, 3)), 0, 255).astype(np.uint8)
                mode = MODES[i % len(MODES)]
                png = i % 2 == 1 or mode in ("RGBA", "P")
                Image.fromarray(pixels).convert(mode).save(folder / f"{split}{i}.{'png' if png else 'jpg'}")
    return root


def split_hash(name: str, parts: list) -> str:
    """The split hash by hand: the name, then each split's indices, labels and file names (or texts)."""
    h = hashlib.sha256(f"{name}|None".encode())
    for part, idx in parts:
        h.update(np.asarray(idx, dtype="<i8").tobytes() + b"|" + np.asarray(part.labels, dtype="<i8").tobytes())
        h.update("\n".join(part.files).encode() if hasattr(part, "files") else "\0".join(part.texts).encode())
        h.update(b"#")
    return h.hexdigest()[:12]


# ----------------------------------------------------------------------------- folders


def test_a_class_folder_tree_is_split_by_the_protocol_and_hashed(tmp_path):
    root = write_tree(tmp_path / "pics")
    name = f"folder:{root}"
    splits = official_splits(name, tmp_path)
    assert source(name).class_names == ("ant", "moth", "zebra") and splits.num_classes == 3
    assert recorded_classes(name) == {"classes": {"ant": 0, "moth": 1, "zebra": 2}}
    assert recorded_classes("cifar10") == {}
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())  # class, then file name
    labels = np.array([("ant", "moth", "zebra").index(f.split("/")[0]) for f in files])
    trainval, test = split_indices(36)
    tr, va = split_indices(len(trainval))
    assert list(splits.test.files) == [files[i] for i in test] and np.array_equal(splits.test.labels, labels[test])
    assert list(splits.train.files) == [files[i] for i in trainval[tr]]
    assert splits.sizes() == {"train": 23, "val": 6, "test": 7}
    assert splits.split_hash == split_hash(name, [(splits.train, trainval[tr]), (splits.val, trainval[va]),
                                                  (splits.test, test)])
    assert splits.examples["test"][0] == f"folder:{root.resolve()}/all"  # one list per root, whatever the spelling


def test_a_folders_own_splits_are_kept(tmp_path):
    two = official_splits(f"folder:{write_tree(tmp_path / 'two', 5, ('train', 'test'))}", tmp_path)
    assert len(two.test) == 15 and all(f.startswith("test/") for f in two.test.files)  # test kept whole, in order
    assert two.sizes() == {"train": 12, "val": 3, "test": 15}  # val: 20 % of train
    assert {k: where.rsplit("/", 1)[1] for k, (where, _) in two.examples.items()} == \
           {"train": "train", "val": "train", "test": "test"}
    three = official_splits(f"folder:{write_tree(tmp_path / 'three', 4, ('train', 'val', 'test'))}", tmp_path)
    assert three.sizes() == {"train": 12, "val": 12, "test": 12} and all(f.startswith("val/") for f in three.val.files)
    assert three.examples["val"][0].endswith("/val") and np.array_equal(three.examples["val"][1], np.arange(12))


def test_images_of_any_size_and_mode_become_rgb_at_the_input_size(tmp_path):
    root = write_tree(tmp_path / "pics")
    splits = load_splits(DataSpec(f"folder:{root}", tmp_path, img_size=28))
    train = EvalImages(splits.train, 28)  # the eval transform the val and test splits decode through
    images = np.stack([part[i] for part in (train, splits.val.images, splits.test.images) for i in range(len(part))])
    labels = np.concatenate([splits.train.labels, splits.val.labels, splits.test.labels])
    assert images.shape == (36, 28, 28, 3) and images.dtype == np.uint8
    means = [images[labels == c].mean() for c in range(3)]  # ant 130, moth 200, zebra 60: as written
    assert means[2] < means[0] < means[1]


@pytest.mark.parametrize("make, says", [
    (lambda r: None, "does not exist"),
    (lambda r: (r / "only").mkdir(parents=True), "1 class folder(s) ['only']: a classifier needs 2"),
    (lambda r: (write_tree(r), (r / "empty").mkdir()), "the class folder(s) ['empty'] hold no image"),
    (lambda r: (write_tree(r), (r / "ant" / "notes.txt").write_text("x"), (r / "moth" / "fake.jpg").write_text("x")),
     "2 file(s) are not readable images (ant/notes.txt, moth/fake.jpg)"),
])
def test_a_bad_folder_is_named_before_compute(tmp_path, make, says):
    root = tmp_path / "pics"
    make(root)
    with pytest.raises(DataError, match="Fix:") as err:
        DataSpec(f"folder:{root}", tmp_path).check()
    assert says in str(err.value)
    assert not (tmp_path / "prepared").exists()


def test_unreadable_files_are_skipped_only_when_asked(tmp_path):
    root = write_tree(tmp_path / "pics")
    (root / "ant" / "notes.txt").write_text("x")
    splits = official_splits(f"folder:{root}?skip_unreadable=true", tmp_path)
    assert sum(map(len, (splits.train, splits.val, splits.test))) == 36
    assert not any(f.endswith(".txt") for f in splits.train.files + splits.val.files + splits.test.files)


def test_duplicates_between_the_users_train_and_test_are_warned_with_their_count(tmp_path, caplog):
    root = write_tree(tmp_path / "pics", 3, ("train", "test"))
    for i in range(2):
        (root / "test" / "ant" / f"copy{i}.jpg").write_bytes((root / "train" / "ant" / "train0.jpg").read_bytes())
    with caplog.at_level(logging.WARNING):
        official_splits(f"folder:{root}", tmp_path)
    assert "2 test images also in the training split" in caplog.text


# ----------------------------------------------------------------------------- tables


def texts(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [f"{i} " + " ".join(rng.choice(WORDS, size=12)) for i in range(n)]  # unique: each starts with its row


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, Path]:
    """The same 60 labelled texts as a CSV, a Parquet file and a save_to_disk folder, written by datasets."""
    import datasets

    folder = tmp_path_factory.mktemp("tables")
    table = datasets.Dataset.from_dict({"review": texts(60), "stars": ["pos", "neg", "mid"] * 20,
                                        "part": ["train"] * 40 + ["val"] * 8 + ["test"] * 12})
    table.to_csv(str(folder / "reviews.csv"), index=False)
    table.to_parquet(str(folder / "reviews.parquet"))
    table.save_to_disk(str(folder / "saved"))
    return {"csv": folder / "reviews.csv", "parquet": folder / "reviews.parquet", "disk": folder / "saved"}


@pytest.mark.parametrize("kind", ["csv", "parquet", "disk"])
def test_a_table_is_read_split_and_hashed(tables, kind):
    name = f"table:{tables[kind]}?text=review&label=stars"
    splits = official_splits(name, "unused")
    assert source(name).class_names == ("mid", "neg", "pos")  # string labels: sorted, label i the i-th
    labels = np.array([("mid", "neg", "pos").index(s) for s in ["pos", "neg", "mid"] * 20])
    trainval, test = split_indices(60)
    tr, va = split_indices(len(trainval))
    assert splits.test.texts == tuple(texts(60)[i] for i in test) and np.array_equal(splits.test.labels, labels[test])
    assert splits.split_hash == split_hash(name, [(splits.train, trainval[tr]), (splits.val, trainval[va]),
                                                  (splits.test, test)])
    own = official_splits(f"table:{tables[kind]}?text=review&label=stars&split=part", "unused")
    assert own.sizes() == {"train": 40, "val": 8, "test": 12} and own.test.texts == tuple(texts(60)[48:])


def test_integer_labels_map_to_their_sorted_order_and_corruptions_keep_the_examples(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"text": t, "label": [7, 3, 5][i % 3]}) + "\n" for i, t in enumerate(texts(30))))
    clean = official_splits(f"table:{path}", tmp_path)
    assert source(f"table:{path}").class_names == ("3", "5", "7")
    assert np.array_equal(clean.test.labels, np.array([[2, 0, 1][i % 3] for i in split_indices(30)[1]]))
    dropped = official_splits(f"table:{path}?corruption=word_drop", tmp_path, severity=5)
    assert dropped.examples["test"][0] == clean.examples["test"][0]  # the same examples, for P(f)'s disjoint pairs
    assert np.array_equal(dropped.test.labels, clean.test.labels)
    words = [len(t.split()) for t in dropped.test.texts]
    assert sum(words) < 0.7 * sum(len(t.split()) for t in clean.test.texts)  # severity 5: half the words dropped


@pytest.mark.parametrize("rows, options, says", [
    ({"review": ["a b"] * 4, "stars": ["x", "y"] * 2}, "?text=reviw&label=stars",
     "has no column 'reviw' (dataset.text_column); its columns: review, stars. Did you mean review?"),
    ({"text": ["a b"] * 4, "label": [0.5, 1.0] * 2}, "", "must hold integers or strings, one kind; it holds float"),
    ({"text": ["a b"] * 4, "label": [0, 1] * 2, "part": ["train", "tst"] * 2}, "?split=part",
     "the split column 'part' has the values ['tst']"),
    ({"text": ["a b", " ", "c", ""], "label": [0, 1] * 2}, "",
     "the text column 'text' has 2 empty row(s) (rows [1, 3])"),
])
def test_a_bad_table_is_named_before_compute(tmp_path, rows, options, says):
    import datasets

    datasets.Dataset.from_dict(rows).to_parquet(str(tmp_path / "t.parquet"))
    with pytest.raises(DataError, match="Fix:") as err:
        DataSpec(f"table:{tmp_path / 't.parquet'}{options}", tmp_path, tokenizer="minilm_l6", max_length=16).check()
    assert says in str(err.value)
    assert not (tmp_path / "prepared").exists()


def test_a_hub_name_offline_is_one_line(tmp_path):
    code = "from plasticity.data import source; source('table:hf:stanfordnlp/imdb').check('.')"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path)}  # no cache
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    error = out.stderr.strip().splitlines()[-1]
    assert error.startswith("plasticity.data.sources.DataError: table:hf:stanfordnlp/imdb: cannot read"), out.stderr
    assert "HF_HUB_OFFLINE" in error and "save_to_disk" in error


def test_datasets_is_imported_only_on_the_table_path(tmp_path):
    root = write_tree(tmp_path / "pics", 3)
    code = (f"import sys; from plasticity.data import official_splits; official_splits('folder:{root}', '.'); "
            f"import plasticity.recipes, plasticity.validate; print('datasets' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.stdout.strip() == "False", out.stderr[-2000:]


def test_the_schema_knows_the_new_options():
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from plasticity.recipes import validate

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["debug=text", "dataset=table", "dataset.path=x.csv",
                                           "dataset.corruption=typo", "dataset.split_column=3"])
    GlobalHydra.instance().clear()
    problems = "\n".join(validate(OmegaConf.create(OmegaConf.to_container(cfg))))
    assert "dataset.corruption" in problems and "typos" in problems


# ----------------------------------------------------------------------------- end to end


def launch(outputs: Path, *overrides: str, multirun: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "WANDB_MODE": "offline"}
    cmd = [sys.executable, str(ROOT / "launch.py"), *(["-m"] if multirun else []), *overrides,
           f"paths.output_dir={outputs}", f"paths.data_dir={outputs / 'data'}", "print_config=false"]
    return forklaunch.run(cmd, cwd=ROOT, env=env, timeout=600)


def records(outputs: Path, task: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((outputs / task).rglob("result.json"))]


@pytest.mark.slow
def test_a_folder_finetunes_measures_and_probes(tmp_path):
    root = write_tree(tmp_path / "pics")
    data = ["debug=tiny", "dataset=folder", f"dataset.root={root}"]
    for overrides in (["task=prepare"], [], ["task=plasticity", f"task.reference=folder:{root}", "task.n_pairs=3"],
                      ["task=linear_probe"], ["task=bounds", f"task.reference=folder:{root}", "task.n_pairs=3"],
                      ["component=auto", f"component.auto.reference=folder:{root}", "component.auto.n_pairs=3"]):
        done = launch(tmp_path / "out", *data, *overrides)
        assert done.returncode == 0, done.stderr[-3000:]
    (auto, fine), (probe,) = records(tmp_path / "out", "finetune"), records(tmp_path / "out", "linear_probe")
    assert all(r["status"] == "done" for r in (auto, fine, probe)) and fine["split_hash"] == probe["split_hash"]
    assert fine["classes"] == probe["classes"] == {c: i for i, c in enumerate(sorted(CLASSES))}  # by name
    assert auto["selected"] and (records(tmp_path / "out", "bounds")[0]["status"] == "done")
    measured = json.loads(next((tmp_path / "out" / "plasticity").rglob("plasticity.json")).read_text())
    assert f"disjoint examples of folder:{root}/all" in measured["pairs_from"]  # the reference shares the examples
    assert len(measured["ranking"]) == 5


@pytest.mark.slow
def test_tables_finetune_measure_and_probe(tables, tmp_path):
    paths = ",".join(str(p) for p in tables.values())
    data = ["debug=text", "dataset=table", f"dataset.path={paths}", "dataset.text_column=review",
            "dataset.label_column=stars", "dataset.split_column=part"]
    # P(f) of each table's word-dropped copy against the clean table: the same examples, paired disjointly.
    clean = "task.reference='table:${dataset.path}?text=review&label=stars&split=part'"
    for overrides in ([], ["task=plasticity", "task.n_pairs=4", "dataset.corruption=word_drop", "dataset.severity=1",
                           clean], ["task=linear_probe"]):
        done = launch(tmp_path / "out", *data, *overrides, multirun=True)
        assert done.returncode == 0, done.stderr[-3000:]
    fine, probe = records(tmp_path / "out", "finetune"), records(tmp_path / "out", "linear_probe")
    assert len(fine) == len(probe) == 3 and all(r["status"] == "done" for r in fine + probe)
    assert len({r["split_hash"] for r in fine}) == 3  # the name (the path) is part of the hash
    measured = [json.loads(p.read_text()) for p in (tmp_path / "out" / "plasticity").rglob("plasticity.json")]
    assert sorted(m["pairs_from"].split(" of ")[1].split("?")[0] for m in measured) == \
           sorted(f"table:{p}" for p in tables.values())

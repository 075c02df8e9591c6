"""Runs you can trust, end to end through launch.py: no finished work lost, one process per run,
every bad input caught before compute with every problem at once, and reports that survive bad files."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from tests import forklaunch

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
BUILT = "creating model"  # logged by plasticity.models.create_model: never printed by a rejected launch


def command(data_dir, *overrides, multirun=False, base=("debug=tiny",)):
    return [sys.executable, str(ROOT / "launch.py"), *(["-m"] if multirun else []), *base,
            f"paths.data_dir={data_dir}", *overrides]


def launch(cwd, data_dir, *overrides, multirun=False, base=("debug=tiny",), env=ENV):
    return forklaunch.run(command(data_dir, *overrides, multirun=multirun, base=base), cwd=cwd, env=env, timeout=600)


def run_dir(root, component="mha", lr=0.01, seed=0, optimizer="sgd"):
    return root / "outputs" / "finetune" / "fashion_mnist" / "vit_micro_patch7_28" / component / \
        f"{optimizer}_lr_{lr}" / f"seed_{seed}"


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes (the lock file excluded: it holds who ran last)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != ".lock"}


# ----------------------------------------------------------------------------------- no work lost


@pytest.fixture(scope="module")
def finished(tmp_path_factory, data_dir):
    """A done mha run (sgd, lr 0.01, seed 0) in its own launch folder."""
    root = tmp_path_factory.mktemp("finished")
    proc = launch(root, data_dir, "component=mha")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


def test_a_different_config_at_the_same_grid_point_touches_nothing(tmp_path, finished, data_dir):
    before = snapshot(finished)
    proc = launch(finished, data_dir, "component=mha", "task.max_steps=6")
    assert proc.returncode == 1
    out = proc.stdout + proc.stderr
    assert "task.max_steps: 4 -> 6" in out and "sweep.overwrite=true" in out and "left untouched" in out
    assert BUILT not in out
    assert snapshot(finished) == before  # record, metrics, checkpoints byte-identical


def test_another_optimizer_gets_its_own_directory(tmp_path, data_dir):
    first = launch(tmp_path, data_dir, "component=ln1", "optimizer.lr=0.03")
    assert first.returncode == 0, first.stderr[-3000:]
    sgd = json.loads((run_dir(tmp_path, "ln1", 0.03) / "result.json").read_text())
    second = launch(tmp_path, data_dir, "component=ln1", "optimizer=adamw", "optimizer.lr=0.03")
    assert second.returncode == 0, second.stderr[-3000:]
    adamw = json.loads((run_dir(tmp_path, "ln1", 0.03, optimizer="adamw") / "result.json").read_text())
    assert (sgd["optimizer"], adamw["optimizer"]) == ("sgd", "adamw")
    assert json.loads((run_dir(tmp_path, "ln1", 0.03) / "result.json").read_text()) == sgd  # untouched


def test_overwrite_moves_the_old_run_aside_and_reports_ignore_it(tmp_path, data_dir):
    assert launch(tmp_path, data_dir, "component=ln2").returncode == 0
    old = json.loads((run_dir(tmp_path, "ln2") / "result.json").read_text())
    proc = launch(tmp_path, data_dir, "component=ln2", "task.max_steps=6", "sweep.overwrite=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    new = json.loads((run_dir(tmp_path, "ln2") / "result.json").read_text())
    assert new["steps"] == 6 and old["steps"] == 4
    archived = list(run_dir(tmp_path, "ln2").parent.glob(".seed_0.replaced-*"))
    assert len(archived) == 1 and json.loads((archived[0] / "result.json").read_text()) == old
    assert (archived[0] / "checkpoints" / "best.ckpt").is_file()
    report = launch(tmp_path, data_dir, "task=report", "sweep_dir=outputs/finetune", base=())
    assert report.returncode == 0, report.stderr[-3000:]
    runs = (tmp_path / "outputs" / "finetune" / "report" / "runs.csv").read_text()
    assert runs.count("\n") == 2 and "replaced" not in runs  # header + the new run only


def test_a_rejected_launch_writes_nothing_anywhere(tmp_path, finished, data_dir):
    before = snapshot(finished)
    proc = launch(finished, data_dir, "component=mha", "task.max_steps=0")
    assert proc.returncode == 1 and "task.max_steps=0 must be a positive integer" in proc.stdout + proc.stderr
    weights = tmp_path / "garbage.safetensors"
    weights.write_bytes(os.urandom(256))
    proc = launch(finished, data_dir, "component=mha", "model.pretrained=true", f"model.weights_file={weights}")
    assert proc.returncode == 1 and str(weights) in proc.stdout + proc.stderr
    proc = launch(finished, data_dir, "component=fc2", "task.max_steps=0")  # a new grid point: no folder left
    assert proc.returncode == 1
    assert snapshot(finished) == before
    assert not run_dir(finished, "fc2").parent.parent.exists()


def test_two_identical_launches_at_once_one_trains_the_other_reports_running(tmp_path, data_dir):
    args = ["component=fc1", "task.max_steps=300", "task.val_every=150"]
    procs = [subprocess.Popen(command(data_dir, *args), cwd=tmp_path, env=ENV, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    trained = [o for o in outs if "\ndone " in o]
    waited = [o for o in outs if "running " in o and "in progress elsewhere" in o]
    assert len(trained) == 1 and len(waited) == 1, outs
    other = procs[outs.index(trained[0])].pid
    assert f"pid {other}" in waited[0] and BUILT not in waited[0]
    target = run_dir(tmp_path, "fc1")
    header, *lines = (target / "metrics.csv").read_text().splitlines()
    rows = [dict(zip(header.split(","), line.split(","))) for line in lines]
    assert [int(r["step"]) for r in rows if r.get("train/loss")] == list(range(300))  # every step exactly once
    assert not list(target.glob("metrics.part*.csv"))  # the second launch did not touch the run


def test_a_multirun_with_one_bad_job_runs_none(tmp_path, data_dir):
    proc = launch(tmp_path, data_dir, "component=ln1", "optimizer.lr=0.03,-1", multirun=True)
    assert proc.returncode == 1
    out = proc.stdout + proc.stderr
    assert "1 of 2 jobs have 1 problem" in out and "optimizer.lr=-1 must be a finite positive number" in out
    assert "job 1 (optimizer.lr=-1)" in out  # a job is named by the overrides that vary
    assert BUILT not in out and not (tmp_path / "outputs").exists()


def test_the_dry_run_reports_status_data_and_weights_and_creates_nothing(tmp_path, finished, data_dir):
    before = snapshot(finished)
    proc = launch(finished, data_dir, "component=mha,ln1", "sweep.dry_run=true", multirun=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "done (skip)" in proc.stdout and "to run" in proc.stdout and "random init" in proc.stdout
    assert "dry run: 2 jobs, 1 to run" in proc.stdout
    assert snapshot(finished) == before and not run_dir(finished, "ln1").exists()


# ----------------------------------------------------------------------------------- bad inputs


def micro_weights(path: Path, **kwargs) -> Path:
    from plasticity.models import create_model

    net = create_model("vit_micro_patch7_28", 10, **kwargs)
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(path))
    return path


BAD = [
    ("lr_inf", ["optimizer.lr=inf"], ["optimizer.lr=inf must be a finite positive number"]),
    ("lr_bool", ["optimizer.lr=true"], ["optimizer.lr=True must be a finite positive number"]),
    ("seed_text", ["seed=abc"], ["seed='abc' must be a non-negative integer"]),
    ("classes_bool", ["dataset.num_classes=true"], ["dataset.num_classes=True must be a positive integer or null"]),
    ("trainer_key", ["trainer.max_steps=abc"], ["trainer.max_steps is set by the task", "Fix: task.max_steps"]),
    ("trainer_plus", ["+trainer.max_steps=3"], ["trainer.max_steps=3 is set by the task", "Fix: task.max_steps"]),
    ("typo_group", ["optimzer.lr=1"], ["optimzer.lr is not a config key; the closest is optimizer.lr"]),
    ("typo_key", ["optimizer.lrr=1"], ["optimizer.lrr is not a config key; the closest is optimizer.lr"]),
    ("typo_plus", ["+optimzer.lr=1"], ["optimzer=", "did you mean optimizer?"]),
    ("gpu", ["trainer=gpu"], ["trainer.accelerator='gpu' is refused by lightning's Trainer", "Fix: trainer=cpu"]),
    ("mean", ["dataset.mean=[0.5]"], ["dataset.mean=[0.5] must be a list of 3 values, each a finite number"]),
    ("crop", ["dataset.crop_scale=[1.0,0.1]"], ["dataset.crop_scale=[1.0, 0.1] must be [low, high]"]),
    ("callbacks", ["experiment=quickstart_pretrain", "callbacks=none"],
     ["callbacks.plasticity has options but no _target_", "Fix: callbacks=plasticity"]),
    ("weights_dir", ["model.pretrained=true", "model.weights_file={tmp}"], ["is a directory"]),
    ("launcher_type", ["hydra/launcher=slurm", "hydra.launcher.timeout_min=abc"],  # a launcher's own typed option
     ["error: hydra.launcher.timeout_min='abc': Value 'abc' of type 'str' could not be converted to Integer. "
      "Fix: hydra.launcher.timeout_min=<int>.\n"]),
]


@pytest.mark.parametrize("name, overrides, messages", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_caught_before_compute(tmp_path, data_dir, name, overrides, messages):
    overrides = [o.replace("{tmp}", str(tmp_path)) for o in overrides]
    # trainer=gpu on a machine without a GPU: on one with CUDA, its GPUs hidden from the launch.
    env = {**ENV, "CUDA_VISIBLE_DEVICES": ""} if name == "gpu" and torch.cuda.is_available() else ENV
    proc = launch(tmp_path, data_dir, *overrides, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    for message in messages:
        assert message in out, out[-3000:]
    assert BUILT not in out and "Traceback" not in out
    assert [p.name for p in tmp_path.iterdir()] == []  # nothing written


@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
def test_a_garbage_weights_file_is_named_before_compute(tmp_path, data_dir, suffix):
    weights = tmp_path / f"w{suffix}"
    weights.write_bytes(b"\x00garbage" * 64)
    proc = launch(tmp_path, data_dir, "model.pretrained=true", f"model.weights_file={weights}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and f"model.weights_file='{weights}'" in out and "Fix:" in out
    assert BUILT not in out and "Traceback" not in out and not (tmp_path / "outputs").exists()


def test_weights_of_another_architecture_are_named_before_compute(tmp_path, data_dir):
    weights = micro_weights(tmp_path / "narrow.safetensors", embed_dim=32, depth=2)
    proc = launch(tmp_path, data_dir, "model.pretrained=true", f"model.weights_file={weights}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and f"model.weights_file='{weights}'" in out
    assert "[32]" in out and "[64]" in out and "model.name" in out
    assert BUILT not in out and "Traceback" not in out and not (tmp_path / "outputs").exists()


def test_every_problem_of_a_config_is_reported_at_once(tmp_path, data_dir):
    proc = launch(tmp_path, data_dir, "optimizer.lr=inf", "seed=abc", "dataset.mean=[0.5]", "task.max_steps=0")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "4 problems" in out
    for message in ("optimizer.lr=inf", "seed='abc'", "dataset.mean=[0.5]", "task.max_steps=0"):
        assert message in out


@pytest.mark.parametrize("sweep_dir, message", [
    ("README.md", "is a file, not a directory"),
    ("missing", "does not exist"),
    ("empty", "has no result.json"),
])
def test_report_on_a_bad_sweep_dir_is_an_error_before_anything_is_written(tmp_path, sweep_dir, message):
    (tmp_path / "README.md").write_text("not a sweep\n")
    (tmp_path / "empty").mkdir()
    before = sorted(p.name for p in tmp_path.rglob("*"))
    proc = launch(tmp_path, tmp_path, "task=report", f"sweep_dir={sweep_dir}", base=())
    assert proc.returncode == 1 and message in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_report_lists_bad_records_by_path_and_writes_the_rest(tmp_path, finished, data_dir):
    sweep = tmp_path / "sweep"
    good = run_dir(finished, "mha")
    target = sweep / "finetune" / "fashion_mnist" / "m" / "mha" / "sgd_lr_0.01" / "seed_0"
    target.mkdir(parents=True)
    (target / "result.json").write_bytes((good / "result.json").read_bytes())
    truncated = sweep / "finetune" / "fashion_mnist" / "m" / "ln1" / "sgd_lr_0.01" / "seed_0"
    truncated.mkdir(parents=True)
    (truncated / "result.json").write_text((good / "result.json").read_text()[:40])
    text_lr = sweep / "finetune" / "fashion_mnist" / "m" / "ln1" / "sgd_lr_abc" / "seed_0"
    text_lr.mkdir(parents=True)
    (text_lr / "result.json").write_text(json.dumps({"task": "finetune", "dataset": "fashion_mnist", "model": "m",
                                                     "component": "ln1", "lr": "abc", "seed": 0, "status": "failed"}))
    proc = launch(tmp_path, tmp_path, "task=report", f"sweep_dir={sweep}", base=())
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = (sweep / "report" / "report.md").read_text()
    assert str(truncated / "result.json") in report and str(text_lr / "result.json") in report
    assert (sweep / "report" / "table6.csv").is_file()


def test_more_pairs_than_distinct_pairs_warns_records_and_narrows_nothing(tmp_path, data_dir):
    """Reference: 100 test images; downstream: the 20 test images of the corrupted split, Fashion-MNIST's own test
    images: pairs come from disjoint examples (the reference's even indices, the downstream set's odd ones).
    Sequential pairs repeat after lcm of the two counts, fewer than 150: the run warns, records the count, and
    computes the 95% CI over the distinct pairs."""
    import math

    from scipy import stats

    from plasticity.data import DataSpec, load_splits

    proc = launch(tmp_path, data_dir, "task=plasticity", "dataset=fashion_mnist_c/contrast",
                  "task.reference=fashion_mnist", "task.n_pairs=150", "task.batch_size=50", base=("debug=analysis",))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    ref, down = (load_splits(DataSpec(name, data_dir)).examples["test"][1] for name in ("fashion_mnist",
                                                                                          "fashion_mnist_c/contrast"))
    n = math.lcm(int((ref % 2 == 0).sum()), int((down % 2 == 1).sum()))
    assert 0 < n < 150 and f"task.n_pairs=150 but the test sets give only {n} distinct sequential pairs" in out
    run = next((tmp_path / "outputs" / "plasticity").rglob("plasticity.json")).parent
    assert json.loads((run / "plasticity.json").read_text())["distinct_pairs"] == n
    header, *lines = (run / "plasticity.csv").read_text().splitlines()
    row = dict(zip(header.split(","), lines[0].split(",")))
    assert int(row["distinct_pairs"]) == n and int(row["n_pairs"]) == 150
    half = stats.t.ppf(0.975, n - 1) * float(row["std"]) / n ** 0.5
    assert float(row["ci95_high"]) - float(row["mean"]) == pytest.approx(half, rel=1e-6)

"""launch.py end to end: single runs, multiruns, records, skipping, bad input, failures, divergence."""

import csv
import json
import os
import subprocess
import time
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests import forklaunch

ROOT = Path(__file__).resolve().parents[1]
TINY = ["debug=tiny"]  # conf/debug/tiny.yaml: 2-block micro ViT, 4 steps of 16 images, CPU


ANALYSIS = ["debug=analysis"]


def launch(tmp_path, data_dir, *overrides, multirun=False, base=TINY):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    # The default paths (relative to the launch directory) are part of what is tested.
    cmd = [sys.executable, str(ROOT / "launch.py"), *(["-m"] if multirun else []), *base,
           f"paths.data_dir={data_dir}", *overrides]
    return forklaunch.run(cmd, cwd=tmp_path, env=env, timeout=600)


def run_dir(tmp_path, component="mha", lr=0.01, seed=0, task="finetune", dataset="fashion_mnist", optimizer="sgd"):
    return (tmp_path / "outputs" / task / dataset / "vit_micro_patch7_28" / component / f"{optimizer}_lr_{lr}"
            / f"seed_{seed}")


def result(path):
    return json.loads((path / "result.json").read_text())


def test_single_run_writes_the_record_contract(tmp_path, data_dir):
    started = time.perf_counter()
    proc = launch(tmp_path, data_dir, "component=ln2", "seed=0")
    elapsed = time.perf_counter() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = result(run_dir(tmp_path, "ln2"))
    assert rec["status"] == "done"
    assert {k: rec[k] for k in ("task", "dataset", "model", "component", "lr", "seed")} == {
        "task": "finetune", "dataset": "fashion_mnist", "model": "vit_micro_patch7_28",
        "component": "ln2", "lr": 0.01, "seed": 0}
    assert rec["optimizer"] == "sgd" and rec["resumed"] is False
    # one line per finished run: status, best val acc, test acc, best step, wall time
    line = next(x for x in proc.stdout.splitlines() if x.startswith("done "))
    assert f"best val {100 * rec['best_val_acc']:.2f}%" in line and f"test {100 * rec['test_acc']:.2f}%" in line
    assert f"best step {rec['best_step']}" in line and "wall " in line
    for notice in ("GPU available", "TPU available", "srun", "LOCAL_RANK"):  # known-harmless notices are silent
        assert notice not in proc.stdout + proc.stderr
    assert 0.0 <= rec["best_val_acc"] <= 1.0 and 0.0 <= rec["test_acc"] <= 1.0
    assert rec["best_step"] in (2, 4) and rec["steps"] == 4
    assert rec["trainable_params"] == 2 * 2 * 64  # ln2 of two blocks: gamma and beta
    assert rec["wall_s"] > 0 and len(rec["split_hash"]) == 12
    assert rec["wall_s"] < elapsed  # the job's wall time is part of the launch the test timed
    header = (run_dir(tmp_path, "ln2") / "metrics.csv").read_text().splitlines()[0].split(",")
    for key in ("train/loss", "lr", "grad_norm/ln2", "grad_norm/head", "grad_norm/ln2/block_1",
                "val/loss", "val/acc", "test/acc"):
        assert key in header


def test_a_run_without_kept_checkpoints_deletes_them_after_its_record_and_is_skipped(tmp_path, data_dir):
    proc = launch(tmp_path, data_dir, "component=ln2", "task.keep_checkpoints=false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = run_dir(tmp_path, "ln2")
    rec = result(path)
    assert rec["status"] == "done" and rec["best_checkpoint"] is None and 0.0 <= rec["test_acc"] <= 1.0
    assert not (path / "checkpoints").exists() and (path / "metrics.csv").is_file()
    again = launch(tmp_path, data_dir, "component=ln2")  # the key keeps or drops weights, not the run: finished
    assert again.returncode == 0, again.stderr[-3000:]
    assert result(path) == rec and "Trainer.fit" not in again.stderr + again.stdout


@pytest.mark.slow
def test_multirun_grid_then_relaunch_skips_everything(tmp_path, data_dir):
    proc = launch(tmp_path, data_dir, "component=ln1,fc1", "optimizer.lr=0.01,0.1", multirun=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = {(c, lr): result(run_dir(tmp_path, c, lr)) for c in ("ln1", "fc1") for lr in (0.01, 0.1)}
    assert all(r["status"] == "done" for r in records.values())
    assert records[("fc1", 0.1)]["trainable_params"] == 2 * (64 * 256 + 256)
    assert "done 4 (skipped 0)" in proc.stdout
    mtimes = {k: (run_dir(tmp_path, *k) / "result.json").stat().st_mtime_ns for k in records}
    again = launch(tmp_path, data_dir, "component=ln1,fc1", "optimizer.lr=0.01,0.1", multirun=True)
    assert again.returncode == 0
    assert "done 4 (skipped 4)" in again.stdout
    assert "Trainer.fit" not in again.stderr + again.stdout
    assert mtimes == {k: (run_dir(tmp_path, *k) / "result.json").stat().st_mtime_ns for k in records}
    report = launch(tmp_path, data_dir, "task=report", "sweep_dir=outputs/finetune", base=[])
    assert report.returncode == 0, report.stderr[-3000:]
    with open(tmp_path / "outputs" / "finetune" / "report" / "table6.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["dataset", "group", "strategy", "label", "params", "lr", "mean", "std", "n_seeds",
                             "n_datasets"]
    chosen = {row["group"]: row for row in rows if row["dataset"] == "fashion_mnist"}
    for group in ("ln1", "fc1"):  # the lr with the better validation accuracy, its test accuracy in %
        best = max((records[(group, lr)] for lr in (0.01, 0.1)), key=lambda r: r["best_val_acc"])
        assert float(chosen[group]["lr"]) == best["lr"]
        assert float(chosen[group]["mean"]) == pytest.approx(100 * best["test_acc"])
        assert int(float(chosen[group]["params"])) == best["trainable_params"] and chosen[group]["strategy"] == "group"


def test_wandb_multirun_gives_one_offline_run_per_job(tmp_path, data_dir):
    proc = launch(tmp_path, data_dir, "logger=wandb", "component=ln1,mha", multirun=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = {c: list((run_dir(tmp_path, c) / "wandb").glob("offline-run-*")) for c in ("ln1", "mha")}
    assert all(len(found) == 1 for found in runs.values())
    assert runs["ln1"][0].name.split("-")[-1] != runs["mha"][0].name.split("-")[-1]
    assert (run_dir(tmp_path, "ln1") / "metrics.csv").is_file()  # CSV is kept beside W&B


@pytest.mark.slow
def test_failed_job_is_recorded_and_the_sweep_goes_on(tmp_path, data_dir):
    # The mha run fails at run time (tests/faults.py). The failure is recorded, the other job of
    # the sweep still runs, and the sweep exits 1 naming the failed run.
    broken = run_dir(tmp_path, "mha")
    proc = launch(tmp_path, data_dir, "component=ln1,mha", "+callbacks.fault._target_=tests.faults.Fail",
                  "+callbacks.fault.component=${component.name}", "+callbacks.fault.fail_for=mha", multirun=True)
    assert proc.returncode == 1, proc.stderr[-3000:]
    good, bad = result(run_dir(tmp_path, "ln1")), result(broken)
    assert good["status"] == "done"
    assert bad["status"] == "failed" and "injected failure" in bad["error"] and (broken / "error.log").is_file()
    assert "failed" in proc.stdout and str(broken) in proc.stdout


def test_diverging_run_is_recorded_as_diverged(tmp_path, data_dir):
    proc = launch(tmp_path, data_dir, "component=all", "optimizer.lr=1e38", "task.warmup_steps=0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = result(run_dir(tmp_path, "all", 1e38))
    assert rec["status"] == "diverged"
    assert "nan" in rec["error"].lower() or "inf" in rec["error"].lower()


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["optimizer.lr=0"], "optimizer.lr=0 must be a finite positive number"),
        (["optimizer.lr=fast"], "optimizer.lr='fast' must be a finite positive number"),
        (["task.max_steps=0"], "task.max_steps=0 must be a positive integer"),
        (["task.batch_size=20", "task.micro_batch_size=8"], "not divisible by task.micro_batch_size=8"),
        (["model.weights_file=/nonexistent/w.safetensors"], "model.weights_file='/nonexistent/w.safetensors' does not exist"),
        (["model.name=vit_mcro_patch7_28"], "Close matches: vit_micro_patch7_28"),
        (["dataset.name=fashion"], "dataset='fashion' is not a dataset. Did you mean fashion_mnist? Choices:"),
        (["component.name=attention"], "Choices: ln1, mha, ln2, fc1, fc2, emb, all, head"),
    ],
)
def test_bad_input_fails_before_compute_with_its_fix(tmp_path, data_dir, overrides, message):
    """What was already caught stays caught, now with nothing written at all."""
    proc = launch(tmp_path, data_dir, *overrides)
    assert proc.returncode == 1
    assert message in proc.stdout + proc.stderr
    assert "creating model" not in proc.stdout + proc.stderr
    assert not (tmp_path / "outputs").exists()


def test_unknown_config_group_option_lists_choices(tmp_path, data_dir):
    proc = launch(tmp_path, data_dir, "component=attention")
    assert proc.returncode == 1
    assert "Could not find 'component/attention'" in proc.stderr and "mha" in proc.stderr


def test_missing_data_names_path_and_fix(tmp_path):
    proc = launch(tmp_path, tmp_path / "nodata", "component=ln1")
    assert proc.returncode == 1
    out = proc.stdout + proc.stderr
    assert str(tmp_path / "nodata" / "FashionMNIST" / "raw") in out and "make data" in out


@pytest.mark.slow
def test_pretrain_exports_weights_that_finetuning_loads(tmp_path, data_dir):
    proc = launch(tmp_path, data_dir, "task=pretrain", "optimizer.lr=0.001")
    assert proc.returncode == 0, proc.stderr[-3000:]
    pre = run_dir(tmp_path, "all", 0.001, task="pretrain", optimizer="adamw")
    assert result(pre)["status"] == "done"
    weights = pre / "weights.safetensors"
    state = load_file(weights)
    ft = launch(tmp_path, data_dir, "component=ln1", "model.pretrained=true", f"model.weights_file={weights}",
                "optimizer.lr=0.01")
    assert ft.returncode == 0, ft.stderr[-3000:]
    best = torch.load(run_dir(tmp_path, "ln1") / "checkpoints" / "best.ckpt", weights_only=False)
    assert "net.blocks.0.attn.qkv.weight" not in best["state_dict"]  # frozen: not checkpointed
    from plasticity.models import create_model

    net = create_model("vit_micro_patch7_28", 10, weights_file=str(weights), depth=2)
    assert torch.equal(net.blocks[1].mlp.fc2.weight, state["blocks.1.mlp.fc2.weight"])


@pytest.mark.slow
def test_plasticity_and_bounds_tasks_write_their_files(tmp_path, data_dir):
    common = ["dataset=fashion_mnist_c/contrast", "task.reference=fashion_mnist", "task.n_pairs=30",
              "task.batch_size=8"]
    proc = launch(tmp_path, data_dir, "task=plasticity", "task.save_rates=true", *common, base=ANALYSIS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "outputs" / "plasticity" / "fashion_mnist_c" / "contrast" / "vit_micro_patch7_28"
    run = out / "embedding_sequential_ref_fashion_mnist" / "pairs_30" / "batch_8" / "seed_0"
    lines = (run / "plasticity.csv").read_text().splitlines()
    assert lines[0].startswith("group,block,depth_pct,mean,std,ci95_low,ci95_high,n_pairs,distinct_pairs,mode")
    assert len(lines) == 1 + 5 * 2  # 5 groups x 2 blocks
    summary = json.loads((run / "plasticity.json").read_text())
    assert sorted(r["group"] for r in summary["ranking"]) == ["fc1", "fc2", "ln1", "ln2", "mha"]
    rates = __import__("numpy").load(run / "rates.npy")
    assert rates.shape == (10, 30)
    first = lines[1].split(",")
    assert float(first[3]) == pytest.approx(float(rates[0].mean()), rel=1e-5)
    assert (run / "plasticity_depth.png").stat().st_size > 0 and (run / "plasticity_distribution.png").is_file()
    assert result(run)["status"] == "done" and "component" not in result(run)
    same = launch(tmp_path, data_dir, "task=plasticity", "dataset=fashion_mnist", "task.reference=fashion_mnist",
                  "task.n_pairs=8", "task.batch_size=8", base=ANALYSIS)
    # a set against itself: pairs of two different images (reference even indices, downstream odd), never one twice
    assert same.returncode == 0, same.stderr[-3000:]
    itself = json.loads(next((tmp_path / "outputs" / "plasticity" / "fashion_mnist").rglob("plasticity.json")).read_text())
    assert itself["pairs_from"].startswith("disjoint examples of fashion_mnist/test")
    proc = launch(tmp_path, data_dir, "task=bounds", *common, base=ANALYSIS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = (tmp_path / "outputs" / "bounds" / "fashion_mnist_c" / "contrast" / "vit_micro_patch7_28"
           / "ref_fashion_mnist" / "pairs_30" / "batch_8" / "seed_0")
    bounds = (run / "bounds.csv").read_text().splitlines()
    assert bounds[0] == "group,block,bound,value" and len(bounds) == 1 + 2 * 7
    assert (run / "bounds.png").is_file() and json.loads((run / "token_stats.json").read_text())["n"] == 17


def test_paper_grid_dry_listing_creates_nothing(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "launch.py"), "-m", "experiment=paper/finetune/cifar10",
                           "sweep.dry_run=true", "paths.data_dir=nodata"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "dry run: 84 jobs" in proc.stdout
    for c in ("ln1", "mha", "ln2", "fc1", "fc2", "all", "head"):
        for lr in (0.001, 0.003, 0.01, 0.03):
            for s in (0, 42, 3407):
                assert f"{c}/sgd_lr_{lr}/seed_{s}" in proc.stdout
    assert proc.stdout.count("MISSING") == 84 and "data missing 84" in proc.stdout  # every job: no data here
    assert proc.stdout.count("cifar10: missing") == 1  # the message, once
    assert proc.stdout.count(" hub ") == 84  # the weights: pretrained from the hub (no local file)
    assert list(tmp_path.iterdir()) == []  # a listing creates no directory and records nothing


@pytest.mark.slow
def test_local_submitit_launcher_runs_a_grid(tmp_path, data_dir):
    proc = launch(tmp_path, data_dir, "hydra/launcher=local", "component=ln1,mha", "seed=0,42", multirun=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [result(run_dir(tmp_path, c, seed=s)) for c in ("ln1", "mha") for s in (0, 42)]
    assert all(r["status"] == "done" for r in records)
    assert "done 4 (skipped 0)" in proc.stdout


def test_each_job_is_composed_validated_and_inspected_once(tmp_path, data_dir, monkeypatch):
    """In one process (the in-process launcher): a multirun composes each job's groups once (the jobs
    that differ only in values share it), validates and inspects each job once; a single run the same."""
    import runpy

    from hydra._internal.config_loader_impl import ConfigLoaderImpl  # what every composition goes through
    from hydra.core.global_hydra import GlobalHydra

    import plasticity.recipes
    import plasticity.runs.state

    counts = dict.fromkeys(("compose", "validate", "inspect"), 0)

    def counting(name, call):
        def counted(*args, **kwargs):
            counts[name] += 1
            return call(*args, **kwargs)
        return counted

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration",
                        counting("compose", ConfigLoaderImpl.load_configuration))
    monkeypatch.setattr(plasticity.recipes, "validate", counting("validate", plasticity.recipes.validate))
    monkeypatch.setattr(plasticity.runs.state, "inspect_run", counting("inspect", plasticity.runs.state.inspect_run))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # launch.py extends it: restored after
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")

    def launch_here(*args):
        monkeypatch.setattr(sys, "argv", [str(ROOT / "launch.py"), *args, *TINY, f"paths.data_dir={data_dir}"])
        try:
            runpy.run_path(str(ROOT / "launch.py"), run_name="__main__")
        finally:
            GlobalHydra.instance().clear()
        found = dict(counts)
        counts.update(dict.fromkeys(counts, 0))
        return found

    # Hydra composes the launch's config twice itself (the first to read hydra.mode); then the jobs: one
    # composition per group choice, 4 jobs each pair differing only by a value.
    multirun = launch_here("-m", "component=ln1,mha", "optimizer.lr=0.01,0.02")
    assert multirun == {"compose": 2 + 2, "validate": 4, "inspect": 4}, multirun
    assert all(result(run_dir(tmp_path, c, lr))["status"] == "done" for c in ("ln1", "mha") for lr in (0.01, 0.02))
    assert launch_here("component=fc1") == {"compose": 2, "validate": 1, "inspect": 1}
    assert result(run_dir(tmp_path, "fc1"))["status"] == "done"

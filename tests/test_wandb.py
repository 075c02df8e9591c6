"""What W&B stores, read back from its own offline run files (``run-<id>.wandb``).

Runs log offline (no server here); ``plasticity.tracking.runfile`` reads the files W&B wrote,
so the config, summary, history, group, job type and tags asserted below are what ``wandb sync``
would upload.
"""

import csv
import os
import subprocess
import sys
import time

import pytest

from plasticity import run_id
from plasticity.tracking import SUMMARY_KEYS
from plasticity.tracking.runfile import read_run, run_files
from plasticity.tracking.sync import offline_runs
from tests.test_compat import frame
from tests.test_launch import ROOT, TINY, launch, result, run_dir

WANDB = ["logger=wandb"]
PLASTICITY = ["callbacks=plasticity", "callbacks.plasticity.reference=fashion_mnist",
              "callbacks.plasticity.every_n_steps=2", "callbacks.plasticity.n_pairs=16"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, data_dir):
    """Two finetuning runs (ln1, mha) logged to W&B offline, with plasticity during training."""
    tmp = tmp_path_factory.mktemp("sweep")
    proc = launch(tmp, data_dir, *WANDB, *PLASTICITY, "component=ln1,mha", multirun=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp


def only_run(path):
    files = run_files(path)
    assert len(files) == 1, files
    return read_run(files[0])


def metrics_csv(path):
    with open(path / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


# --- finetuning runs ------------------------------------------------------------------------------

@pytest.mark.slow
def test_finetuning_run_config_summary_and_history(sweep):
    path = run_dir(sweep, "mha")
    rec, run = result(path), only_run(path)
    assert run.id == run_id(rec["run_dir"].split("outputs/", 1)[1])  # the id of the run path
    assert run.group == "fashion_mnist/vit_micro_patch7_28" and run.job_type == "finetune"
    assert run.tags == ["mha", "lr=0.01", "seed=0"] and run.exit_code == 0
    c = run.config  # the resolved config, nested: W&B filters and groups by any key
    assert (c["dataset"]["name"], c["model"]["name"], c["component"]["name"]) == (
        "fashion_mnist", "vit_micro_patch7_28", "mha")
    assert (c["optimizer"]["name"], c["optimizer"]["lr"], c["optimizer"]["momentum"], c["seed"]) == ("sgd", 0.01, 0.9, 0)
    assert c["task"]["max_steps"] == 4 and c["task"]["batch_size"] == 16
    assert {k: c["run"][k] for k in ("task", "dataset", "model", "component", "optimizer", "lr", "seed")} == {
        k: rec[k] for k in ("task", "dataset", "model", "component", "optimizer", "lr", "seed")}
    assert c["split_hash"] == rec["split_hash"] and c["params"] == rec["params"]
    for key in SUMMARY_KEYS:
        assert run.summary[key] == rec[key], key
    assert run.summary["config_hash"] == rec["config_hash"]
    assert run.summary["val/acc"]["max"] == pytest.approx(rec["best_val_acc"])
    keys = run.history_keys()
    assert {"train/loss", "lr", "grad_norm/mha", "grad_norm/mha/block_0", "grad_norm/mha/block_1", "grad_norm/head",
            "val/loss", "val/acc", "test/acc", "plasticity/mha", "plasticity/fc1/block_1"} <= keys
    rows = metrics_csv(path)
    assert run.column("train/loss") == pytest.approx([float(r["train/loss"]) for r in rows if r["train/loss"]])
    assert run.column("val/acc") == pytest.approx([float(r["val/acc"]) for r in rows if r["val/acc"]])
    for family in ("train/*", "val/*", "grad_norm/*", "plasticity/*"):
        assert run.metrics[family]["step_metric"] == "trainer/global_step", family
    assert "max" in run.metrics["val/acc"]["summary"]


@pytest.mark.slow
def test_every_run_of_a_sweep_is_its_own_wandb_run(sweep):
    runs = {c: only_run(run_dir(sweep, c)) for c in ("ln1", "mha")}
    assert runs["ln1"].id != runs["mha"].id
    assert runs["ln1"].config["component"]["name"] == "ln1" and runs["ln1"].summary["trainable_params"] == 256


@pytest.mark.slow
def test_resumed_run_continues_its_wandb_run(tmp_path, data_dir):
    args = [*WANDB, "component=fc1", "task.max_steps=40", "task.val_every=10", "task.batch_size=16",
            "task.micro_batch_size=16", "dataset.augment=false"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    cmd = [sys.executable, str(ROOT / "launch.py"), *TINY, f"paths.data_dir={data_dir}", *args]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    path = run_dir(tmp_path, "fc1")
    deadline = time.time() + 300
    while not (path / "checkpoints" / "last.ckpt").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    resumed = launch(tmp_path, data_dir, *args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    line = next(x for x in (resumed.stdout + resumed.stderr).splitlines() if "resuming an interrupted run" in x)
    start = int(line.split("from step ")[1].split()[0])
    files = run_files(path)
    assert len(files) == 2  # one offline folder per part, both with the run's id
    assert offline_runs(tmp_path) == [files[1].parent]  # SIGKILL: W&B wrote nothing of the killed part
    second = read_run(files[1])
    assert second.id == run_id("finetune/fashion_mnist/vit_micro_patch7_28/fc1/sgd_lr_0.01/seed_0")
    trained = [int(row["trainer/global_step"]) for row in second.history if "train/loss" in row]
    assert trained == list(range(start, 40))  # the history goes on from the checkpoint, never from 0
    assert second.summary["status"] == "done" and second.exit_code == 0
    assert second.summary["test_acc"] == result(path)["test_acc"] and result(path)["resumed"] is True


@pytest.mark.slow
def test_diverged_and_failed_runs_end_their_wandb_run_with_their_status(tmp_path, data_dir):
    # The mha run fails as training starts (tests/faults.py); the full one diverges.
    proc = launch(tmp_path, data_dir, *WANDB, "component=mha,all", "optimizer.lr=1e38", "task.warmup_steps=0",
                  "+callbacks.fault._target_=tests.faults.Fail", "+callbacks.fault.component=${component.name}",
                  "+callbacks.fault.fail_for=mha", multirun=True)
    assert proc.returncode == 1, proc.stderr[-3000:]  # the failed run fails the sweep
    failed = only_run(run_dir(tmp_path, "mha", 1e38))
    assert failed.summary["status"] == "failed" and "injected failure" in failed.summary["error"]
    assert failed.exit_code == 1 and failed.config["component"]["name"] == "mha"
    diverged = only_run(run_dir(tmp_path, "all", 1e38))
    assert diverged.summary["status"] == "diverged" and result(run_dir(tmp_path, "all", 1e38))["status"] == "diverged"
    assert diverged.exit_code == 0 and "wall_s" in diverged.summary


# --- analyses and the report ----------------------------------------------------------------------

def table_keys(run):
    return {k for row in run.history for k, v in row.items() if isinstance(v, dict) and v.get("_type") == "table-file"}


def image_keys(run):
    return {k for row in run.history for k, v in row.items()
            if isinstance(v, dict) and v.get("_type") in ("image-file", "images/separated")}


@pytest.mark.slow
def test_plasticity_task_logs_its_table_and_figures(tmp_path, data_dir):
    proc = launch(tmp_path, data_dir, *WANDB, "task=plasticity", "dataset=fashion_mnist_c/contrast",
                  "task.reference=fashion_mnist", "task.n_pairs=30", "task.batch_size=8", base=["debug=analysis"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = (tmp_path / "outputs" / "plasticity" / "fashion_mnist_c" / "contrast" / "vit_micro_patch7_28"
            / "embedding_sequential_ref_fashion_mnist" / "pairs_30" / "batch_8" / "seed_0")
    run = only_run(path)
    assert run.job_type == "plasticity" and run.summary["status"] == "done"
    assert table_keys(run) == {"plasticity"}
    assert image_keys(run) == {"figures/plasticity_distribution", "figures/plasticity_depth"}
    ranking = {r["group"]: r["mean"] for r in result(path)["ranking"]}
    assert {g: run.summary[f"plasticity/{g}"] for g in ranking} == pytest.approx(ranking)
    assert run.config["task"]["n_pairs"] == 30 and run.config["run"]["reference"] == "fashion_mnist"


@pytest.mark.slow
def test_bounds_task_logs_its_table_and_figure(tmp_path, data_dir):
    proc = launch(tmp_path, data_dir, *WANDB, "task=bounds", "dataset=fashion_mnist_c/contrast",
                  "task.reference=fashion_mnist", "task.n_pairs=30", "task.batch_size=8", base=["debug=analysis"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = only_run(next((tmp_path / "outputs" / "bounds").rglob("result.json")).parent)
    assert run.job_type == "bounds" and run.summary["status"] == "done" and run.exit_code == 0
    assert table_keys(run) == {"bounds"} and image_keys(run) == {"figures/bounds"}


@pytest.mark.slow
def test_report_is_one_wandb_run_with_tables_figures_and_runs_artifact(sweep):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    proc = subprocess.run([sys.executable, str(ROOT / "launch.py"), "task=report", "sweep_dir=outputs", *WANDB,
                           "print_config=false"], cwd=sweep, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = only_run(sweep / "outputs" / "report")
    assert run.job_type == "report" and run.group == only_run(run_dir(sweep, "mha")).group
    report = sweep / "outputs" / "report"
    written = {p.stem for p in report.glob("*.csv")} - {"runs"}  # no head run: no relative gain
    assert {"table6", "table1"} <= written and table_keys(run) == written
    assert image_keys(run) == {f"figures/{p.stem}" for p in report.glob("*.png")} >= {"figures/accuracy"}
    assert f"runs-{run.id}" in run.artifacts and run.summary["runs"] == 2 and run.summary["done"] == 2
    assert run.summary["status"] == "done" and run.exit_code == 0


# --- getting offline runs to W&B ------------------------------------------------------------------

@pytest.mark.slow
def test_sync_lists_every_offline_run_once(sweep):
    found = offline_runs(sweep / "outputs")
    assert {p.parents[1].parent.name for p in found} >= {"sgd_lr_0.01"}
    assert {p.parents[1] for p in found} >= {run_dir(sweep, "ln1"), run_dir(sweep, "mha")}
    env = {**os.environ, "WANDB_MODE": "offline"}
    proc = subprocess.run([sys.executable, "-m", "plasticity.tracking.sync", str(sweep / "outputs"), "--dry-run"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"{len(found)} offline W&B run folder(s) to sync" in proc.stdout
    for folder in found:  # wandb's own dry run names every run file
        assert str(next(folder.glob("run-*.wandb"))) in proc.stdout + proc.stderr
    marker = next(found[0].glob("run-*.wandb")).with_suffix(".wandb.synced")
    marker.write_text("")  # what wandb sync leaves after an upload
    try:
        assert offline_runs(sweep / "outputs") == found[1:]
    finally:
        marker.unlink()


def test_sync_without_credentials_fails_at_once(tmp_path):
    folder = tmp_path / "outputs" / "run" / "wandb" / "offline-run-20260101_000000-abc"
    folder.mkdir(parents=True)
    from wandb.proto import wandb_internal_pb2 as pb

    record = pb.Record(run=pb.RunRecord(run_id="abc", project="plasticity"))
    (folder / "run-abc.wandb").write_bytes(frame([record.SerializeToString()]))
    (tmp_path / "outputs" / ".run.replaced-1" / "wandb" / "offline-run-20250101_000000-abc").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k != "WANDB_API_KEY"} | {"HOME": str(tmp_path), "WANDB_MODE": "offline"}
    proc = subprocess.run([sys.executable, "-m", "plasticity.tracking.sync", str(tmp_path / "outputs")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "1 offline W&B run folder(s) to sync" in proc.stdout  # the replaced run is never synced
    assert "API key" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_osh_trigger_names_the_offline_run_for_the_login_node(tmp_path, data_dir):
    osh = tmp_path / "osh"
    proc = launch(tmp_path, data_dir, *WANDB, "logger.wandb.osh=true", f"logger.wandb.osh_dir={osh}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    commands = list(osh.glob("*.command"))
    assert len(commands) == 1  # one file per run, rewritten at each validation and at the end
    folder = next((run_dir(tmp_path, "mha") / "wandb").glob("offline-run-*"))
    assert commands[0].read_text() == str(folder.resolve())

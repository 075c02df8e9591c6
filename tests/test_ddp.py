"""One run across several processes (Lightning DDP, CPU, gloo): the same numbers as one process
with the same global batch, one writer, resumable, rejected before compute when the batch does
not divide.

Every DDP run is a subprocess of launch.py (Lightning's launcher re-runs the command as rank 1;
never inside the pytest process), with the launcher's variables removed and a free port.
"""

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

from tests import forklaunch

ROOT = Path(__file__).resolve().parents[1]
REL = 1e-5
LAUNCHER_VARS = ("LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT", "PL_GLOBAL_SEED", "PLASTICITY_RANK0_DECISION")
# 160 train images: 10 optimizer steps of 16 an epoch, so 30 steps cross two epoch boundaries; a
# validation and last.ckpt every 7 steps (inside epochs: 7, 14, 21, 28); plasticity measured every
# 10 steps on 16 fixed pairs.
COMMON = ["component=mha", "dataset.augment=false", "task.max_steps=30", "task.warmup_steps=3", "task.val_every=7",
          "task.batch_size=16", "task.eval_batch_size=16", "callbacks=plasticity",
          "callbacks.plasticity.reference=fashion_mnist", "callbacks.plasticity.every_n_steps=10",
          "callbacks.plasticity.n_pairs=16", "callbacks.plasticity.batch_size=8"]
ONE = ["task.micro_batch_size=16"]
TWO = ["task.micro_batch_size=8", "trainer.devices=2"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env() -> dict:
    base = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and not k.startswith("SLURM_")}
    return {**base, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline",
            "MASTER_PORT": str(free_port())}


def command(data_dir, *overrides, multirun=False):
    return [sys.executable, str(ROOT / "launch.py"), *(["-m"] if multirun else []), "debug=tiny",
            f"paths.data_dir={data_dir}", *overrides]


def launch(cwd, data_dir, *overrides, multirun=False):
    Path(cwd).mkdir(parents=True, exist_ok=True)
    return forklaunch.run(command(data_dir, *overrides, multirun=multirun), cwd=cwd, env=env(), timeout=600)


def run_dir(root, task="finetune", component="mha", optimizer="sgd", lr=0.01):
    return root / "outputs" / task / "fashion_mnist" / "vit_micro_patch7_28" / component / f"{optimizer}_lr_{lr}" / "seed_0"


def result(path):
    return json.loads((path / "result.json").read_text())


def metrics(path) -> list[dict]:
    with open(path / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def column(rows, key) -> dict[int, float]:
    """``step -> value`` of a metric (the rows where it was logged)."""
    return {int(r["step"]): float(r[key]) for r in rows if r.get(key)}


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def max_rel(a: dict[int, float], b: dict[int, float]) -> float:
    assert a.keys() == b.keys() and a, (sorted(a), sorted(b))
    return max(abs(a[k] - b[k]) / max(abs(a[k]), 1e-12) for k in a)


@pytest.fixture(scope="module")
def single(tmp_path_factory, data_dir):
    """The reference: one process, micro-batch 16."""
    root = tmp_path_factory.mktemp("single")
    proc = launch(root, data_dir, *COMMON, *ONE)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return run_dir(root)


@pytest.fixture(scope="module")
def ddp(tmp_path_factory, data_dir):
    """The same run on 2 processes of micro-batch 8 (the same global batch of 16)."""
    root = tmp_path_factory.mktemp("ddp")
    proc = launch(root, data_dir, *COMMON, *TWO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return run_dir(root), proc


# ----------------------------------------------------------------------------------- units (no launch)


def test_the_sharded_sampler_splits_the_global_order_disjointly_and_completely():
    from plasticity.data.datamodule import EpochBatchSampler

    n, micro, world = 50, 4, 3
    for epoch in (0, 1):
        ranks = [EpochBatchSampler(n, micro, seed=7, rank=r, world_size=world) for r in range(world)]
        one = EpochBatchSampler(n, micro * world, seed=7)
        for s in (*ranks, one):
            s.set_epoch(epoch)
        batches = [list(s) for s in ranks]
        assert [len(b) for b in batches] == [len(s) for s in ranks] == [n // (micro * world)] * world
        for step, whole in enumerate(one):  # each global micro-step: rank r holds the r-th slice
            assert [i for r in range(world) for i in batches[r][step]] == whole
        seen = [i for b in batches for batch in b for i in batch]
        assert len(seen) == len(set(seen)) == (n // (micro * world)) * micro * world  # disjoint
    first, again, other = (EpochBatchSampler(n, micro, 7, 1, world) for _ in range(3))
    other.set_epoch(1)
    assert list(first) == list(again) != list(other)  # a function of (seed, epoch) only


@pytest.mark.parametrize("n, batch, world", [(100, 16, 2), (101, 10, 2), (7, 4, 3), (20, 8, 1), (3, 1, 2)])
def test_eval_shards_count_every_example_once_in_step(n, batch, world):
    from plasticity.data.datamodule import eval_batches

    shards = [eval_batches(n, batch, r, world) for r in range(world)]
    flat = [i for shard in shards for b in shard for i in b]
    assert sorted(flat) == list(range(n)) and len(flat) == n  # complete, no padding, no repeat
    assert all(0 < len(b) <= batch for shard in shards for b in shard)
    counts = [len(s) for s in shards]
    assert max(counts) - min(counts) <= (1 if batch == 1 else 0)
    if world == 1:
        assert shards[0] == [list(range(s, min(s + batch, n))) for s in range(0, n, batch)]


def test_execution_keys_do_not_change_the_run_identity():
    from plasticity.runs.record import config_diff, config_hash, protocol

    old = OmegaConf.create({"trainer": {"devices": 1, "precision": "auto"}, "task": {"batch_size": 16}})
    new = OmegaConf.create({"trainer": {"devices": 2, "num_nodes": 2, "strategy": "ddp", "precision": "auto"},
                            "task": {"batch_size": 16}})
    assert config_diff(protocol(old), protocol(new)) == []
    assert config_hash(old) == config_hash(new)
    assert config_diff(protocol(old), protocol(OmegaConf.merge(new, {"task": {"batch_size": 32}})))


def test_rank_zero_decision_reaches_srun_tasks(tmp_path, monkeypatch):
    """Under srun every task starts at once: rank 0 writes its decision for this job attempt,
    the others wait for it (a decision of an earlier attempt is not theirs)."""
    from plasticity.runs import ranks

    for key in LAUNCHER_VARS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SLURM_NTASKS", "2")
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    monkeypatch.setenv("SLURM_PROCID", "0")
    assert ranks.is_rank_zero()
    ranks.announce(tmp_path, "run", "/ckpt/last.ckpt")
    monkeypatch.delenv(ranks.DECISION_ENV)  # another process: it shares the file, not the environment
    monkeypatch.setenv("SLURM_PROCID", "1")
    assert not ranks.is_rank_zero()
    assert ranks.await_decision(tmp_path, timeout_s=1)["resume"] == "/ckpt/last.ckpt"
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # requeued: last attempt's decision is stale
    with pytest.raises(RuntimeError, match="slurm:41:1"):
        ranks.await_decision(tmp_path, timeout_s=0.5)


def test_a_stop_leaves_no_decision_file_once_every_srun_task_read_it(tmp_path, monkeypatch):
    """A relaunch under srun that finds its run finished: rank 0 tells the other task to stop and, once
    that task (another process) acknowledged it, removes the decision file, leaving the run as it was."""
    from plasticity.runs import ranks

    for key in LAUNCHER_VARS:
        monkeypatch.delenv(key, raising=False)
    slurm = {"SLURM_NTASKS": "2", "SLURM_JOB_ID": "42"}
    for key, value in {**slurm, "SLURM_PROCID": "0"}.items():
        monkeypatch.setenv(key, value)
    code = "import sys; from plasticity.runs import ranks; print(ranks.await_decision(sys.argv[1], 60)['action'])"
    follower = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, text=True,
                                stdout=subprocess.PIPE, env={**env(), **slurm, "SLURM_PROCID": "1"})
    ranks.conclude(tmp_path, timeout_s=60)  # no "run" was announced: the job skipped or refused the run
    assert follower.communicate(timeout=60)[0].strip() == "stop"
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    ranks.conclude(tmp_path, timeout_s=0.5)  # no rank ever reads it: the file stays for a late one
    assert (tmp_path / ranks.DECISION_FILE).is_file()


# ----------------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_two_processes_compute_what_one_computes(single, ddp):
    path, proc = ddp
    one, two = metrics(single), metrics(path)
    keys = [k for k in one[0] if k.startswith(("train/loss", "grad_norm/"))]
    assert "grad_norm/mha/block_1" in keys
    worst = {k: max_rel(column(one, k), column(two, k)) for k in keys}
    print("max relative difference per metric:", json.dumps(worst))
    assert len(column(one, "train/loss")) == 30 and max(worst.values()) < REL, worst
    assert column(one, "val/acc") == column(two, "val/acc")  # every val example counted once
    assert max_rel(column(one, "val/loss"), column(two, "val/loss")) < REL
    a, b = result(single), result(path)
    assert (a["best_val_acc"], a["test_acc"], a["best_step"], a["steps"]) == \
        (b["best_val_acc"], b["test_acc"], b["best_step"], b["steps"])
    assert b["test_loss"] == pytest.approx(a["test_loss"], rel=REL)
    plasticity = [k for k in one[0] if k.startswith("plasticity/") and k != "plasticity/cost"]
    assert "plasticity/mha/block_0" in plasticity and {k: column(one, k).keys() for k in plasticity} == \
        {k: column(two, k).keys() for k in plasticity}
    measured = max(max_rel(column(one, k), column(two, k)) for k in plasticity)
    print(f"max relative difference: val/loss {max_rel(column(one, 'val/loss'), column(two, 'val/loss')):.2e}, "
          f"test_loss {abs(a['test_loss'] - b['test_loss']) / a['test_loss']:.2e}, plasticity/* {measured:.2e}")
    assert measured < 1e-4


@pytest.mark.slow
def test_only_rank_zero_writes(single, ddp):
    path, proc = ddp
    assert files(path) == files(single)  # one metrics.csv, one result.json, the same checkpoints
    assert (path / "checkpoints" / "last.ckpt").is_file() and (path / "checkpoints" / "best.ckpt").is_file()
    assert proc.stdout.count("\ndone ") + proc.stdout.startswith("done ") == 1
    rows = metrics(path)
    assert sorted(column(rows, "train/loss")) == list(range(30))  # each step logged once
    config = OmegaConf.load(path / "config.yaml")
    assert config.trainer.devices == 2 and result(path)["status"] == "done"


@pytest.mark.slow
def test_a_finished_ddp_run_is_skipped_with_any_process_count(ddp, data_dir):
    path, _ = ddp
    root = path.parents[6]
    mtime = (path / "result.json").stat().st_mtime_ns
    for overrides in (TWO, ["task.micro_batch_size=8", "trainer.devices=1"]):  # micro 8 x accumulation 2
        proc = launch(root, data_dir, *COMMON, *overrides)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "already done with this config" in proc.stdout + proc.stderr
        assert "creating model" not in proc.stdout + proc.stderr  # rank 0 decided before building or forking
    assert (path / "result.json").stat().st_mtime_ns == mtime


@pytest.mark.slow
def test_a_killed_ddp_run_resumes_to_the_uninterrupted_result(tmp_path, ddp, data_dir):
    whole, _ = ddp
    cut = run_dir(tmp_path)
    proc = subprocess.Popen(command(data_dir, *COMMON, *TWO), cwd=tmp_path, env=env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    last, deadline = cut / "checkpoints" / "last.ckpt", time.time() + 300
    while not last.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # rank 0 and the rank 1 it started
    proc.wait()
    assert last.exists() and not (cut / "result.json").exists()
    resumed = launch(tmp_path, data_dir, *COMMON, *TWO)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "resuming an interrupted run from step 7" in resumed.stdout + resumed.stderr  # inside the first epoch
    a, b = result(whole), result(cut)
    assert b["resumed"] is True
    for key in ("best_val_acc", "test_acc", "best_step", "steps"):
        assert a[key] == b[key], key
    assert b["test_loss"] == pytest.approx(a["test_loss"], rel=REL)
    wa = torch.load(whole / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    wb = torch.load(cut / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    assert wa.keys() == wb.keys() and all(torch.allclose(wa[k], wb[k], rtol=REL, atol=1e-7) for k in wa)
    assert sorted(column(metrics(cut), "train/loss")) == list(range(7, 30))  # the resumed part
    assert not (cut / ".ranks.json").exists()  # no srun tasks: the decision went through the environment


@pytest.mark.slow
def test_pretrain_under_ddp_exports_the_best_weights_once(tmp_path, data_dir):
    proc = launch(tmp_path, data_dir, "task=pretrain", "optimizer.lr=0.001", "dataset.augment=false",
                  "task.max_steps=6", "task.val_every=3", "task.batch_size=16", *TWO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    path = run_dir(tmp_path, "pretrain", "all", "adamw", 0.001)
    rec = result(path)
    assert rec["status"] == "done" and rec["steps"] == 6
    weights = load_file(path / "weights.safetensors")
    best = torch.load(path / rec["best_checkpoint"], weights_only=False)["state_dict"]
    assert all(torch.equal(weights[k], best[f"net.{k}"]) for k in weights)
    assert [p.name for p in path.glob("*.safetensors")] == ["weights.safetensors"]


@pytest.mark.parametrize("overrides, messages", [
    (["trainer.devices=2", "task.batch_size=24", "task.micro_batch_size=8"],
     ["task.batch_size=24 is not divisible by task.micro_batch_size=8 x 2 processes", "Fix: task.micro_batch_size=6"]),
    (["trainer.devices=2", "trainer.num_nodes=2", "task.batch_size=18", "task.micro_batch_size=2"],
     ["x 4 processes (trainer.devices x trainer.num_nodes) = 8", "a task.batch_size divisible by 8"]),
    (["trainer.devices=0", "trainer.strategy=fsdp"], ["trainer.devices=0 must be a positive number",
                                                       "trainer.strategy='fsdp'; choices: auto, ddp"]),
])
def test_a_batch_that_does_not_divide_is_rejected_before_compute(tmp_path, data_dir, overrides, messages):
    proc = launch(tmp_path, data_dir, *overrides)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    for message in messages:
        assert message in out, out[-3000:]
    assert "creating model" not in out and "Traceback" not in out
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_ddp_in_a_multirun_of_the_basic_launcher_is_rejected(tmp_path, data_dir):
    proc = launch(tmp_path, data_dir, "trainer.devices=2", "seed=0,1", multirun=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "would re-run the whole sweep" in out, out[-3000:]
    assert "hydra.launcher.tasks_per_node=2" in out and "creating model" not in out
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("launcher, messages", [
    (["hydra.launcher.tasks_per_node=1"], ["hydra.launcher.tasks_per_node=1 and hydra.launcher.nodes=1 differ",
                                           "Fix: hydra.launcher.tasks_per_node=2 hydra.launcher.nodes=1"]),
    (["hydra.launcher.tasks_per_node=2"], []),
])
def test_under_slurm_each_process_is_one_task(data_dir, launcher, messages):
    """A DDP job on SLURM runs one srun task per process (Lightning's SLURM environment reads the ranks)."""
    from hydra import compose, initialize_config_dir

    from plasticity.recipes import validate

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["debug=tiny", f"paths.data_dir={data_dir}", "hydra/launcher=slurm",
                                           "trainer.devices=2", "task.micro_batch_size=8", *launcher],
                      return_hydra_config=True)
    problems = validate(cfg, local=False)
    assert len(problems) == (1 if messages else 0), problems
    assert all(m in problems[0] for m in messages)

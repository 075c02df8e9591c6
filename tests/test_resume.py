"""Interrupted anywhere, resumed exactly: a run stopped by SIGKILL, SIGTERM or SIGINT (at a
checkpoint inside an epoch, at an epoch's end, during validation, during a checkpoint write), by a
full disk or by its folder vanishing, or left with a truncated or garbage ``last.ckpt``, is
relaunched and compared with the uninterrupted run: every record field, every metric row at its
step (each launch's rows before the next launch starts) and both checkpoints' weights (the last
one at the final step), bit for bit.

The end-to-end cases are real launches with a fault injected by :mod:`tests.faults`: forked from
one server (tests/forklaunch.py), and the uninterrupted run and the chain's last part in new
interpreters; a forked run is compared with a fresh one. The full disk is a real tmpfs (root only;
skipped with the reason elsewhere).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from plasticity.data.datamodule import EpochBatchSampler, ResumableLoader
from plasticity.module import rng_states, set_rng_states
from plasticity.report.collect import read_metrics
from plasticity.runs.checkpoints import CONFIG_HASH_KEY, metrics_files, move_metrics_to_part, prepare_resume
from plasticity.runs.state import inspect_run
from plasticity.runs.stop import storage_fault
from tests import forklaunch
from tests import fixtures
from tests.fixtures import metric_rows, record

ROOT = Path(__file__).resolve().parents[1]
# 160 train images / 16 = 10 optimizer steps an epoch (2 micro-batches each); a validation and a
# checkpoint every 5 steps: at step 5 (inside the first epoch), 10 (its end), 15 (inside the second)
# and 20 (the last: last.ckpt holds the final weights). With augmentation: its crops and flips come
# from the generators the checkpoint saves.
RUN = ["component=fc1", "optimizer.lr=0.1", "task.max_steps=20", "task.warmup_steps=2", "task.val_every=5",
       "task.batch_size=16", "task.micro_batch_size=8", "dataset.augment=true"]
COLUMNS = ["train/loss", "lr", "grad_norm/fc1", "grad_norm/head", "val/acc", "val/loss"]


def launch(cwd: Path, data_dir: Path, *overrides: str, output: Path | None = None,
           fresh: bool = False) -> subprocess.CompletedProcess:
    """``python launch.py`` on the run: forked (tests/forklaunch.py) or, ``fresh``, a new interpreter."""
    cwd.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    cmd = [sys.executable, str(ROOT / "launch.py"), "debug=tiny", f"paths.data_dir={data_dir}", *RUN, *overrides,
           *([f"paths.output_dir={output}"] if output else [])]
    return forklaunch.run(cmd, cwd=cwd, env=env, timeout=600, fresh=fresh)


def fault(signal: str, at: str, step: int) -> list[str]:
    return ["+callbacks.fault._target_=tests.faults.Kill", f"+callbacks.fault.signal={signal}",
            f"+callbacks.fault.at={at}", f"+callbacks.fault.step={step}"]


def run_dir(outputs: Path) -> Path:
    return outputs / "finetune" / "fashion_mnist" / "vit_micro_patch7_28" / "fc1" / "sgd_lr_0.1" / "seed_0"


def assert_same_run(whole: Path, resumed: Path, resumed_flag: bool = True) -> None:
    fixtures.assert_same_run(whole, resumed, COLUMNS, steps=20, resumed=resumed_flag)


def assert_rows_match(whole: Path, part: Path) -> dict[str, set[int]]:
    return fixtures.assert_rows_match(whole / "metrics.csv", part, COLUMNS)


@pytest.fixture(scope="module")
def whole(tmp_path_factory, data_dir) -> Path:
    """The uninterrupted run, in a new interpreter (the resumed runs it is compared with are forked)."""
    root = tmp_path_factory.mktemp("whole")
    proc = launch(root, data_dir, fresh=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir(root / "outputs")


# ------------------------------------------------------------------------ units: no launch


def test_a_resumed_sampler_yields_the_rest_of_the_epoch_then_the_next_ones():
    for rank, world in ((0, 1), (1, 2)):
        full = EpochBatchSampler(40, 4, seed=3, rank=rank, world_size=world)
        epochs = []
        for epoch in range(2):
            full.set_epoch(epoch)
            epochs.append(list(full))
        cut = EpochBatchSampler(40, 4, seed=3, rank=rank, world_size=world)
        cut.resume_at(0, 2)
        assert list(cut) == epochs[0][2:]  # the rest of epoch 0
        cut.set_epoch(1)
        assert list(cut) == epochs[1]  # the skip served one pass only
        end = EpochBatchSampler(40, 4, seed=3, rank=rank, world_size=world)
        end.resume_at(0, len(end))  # a checkpoint at the epoch's last batch resumes at the next epoch's first
        assert end.epoch == 1 and list(end) == epochs[1]


def test_the_train_loader_saves_the_batches_it_handed_out():
    data = torch.arange(40)

    def loader():
        sampler = EpochBatchSampler(40, 4, seed=1)
        return ResumableLoader(data, batch_size=None, sampler=sampler)

    whole = [b.tolist() for b in loader()]
    first = loader()
    taken = []
    for batch in first:
        taken.append(batch.tolist())
        if len(taken) == 3:
            break
    state = first.state_dict()
    assert state == {"epoch": 0, "consumed": 3, "batches": 10, "world_size": 1}
    second = loader()
    second.load_state_dict(state)
    assert taken + [b.tolist() for b in second] == whole
    assert second.state_dict()["consumed"] == 10
    other = ResumableLoader(data, batch_size=None, sampler=EpochBatchSampler(40, 8, seed=1))
    with pytest.raises(ValueError, match="10 batches an epoch on 1 processes; this run has 5"):
        other.load_state_dict(state)


def test_generator_states_survive_a_weights_only_checkpoint(tmp_path):
    import random

    torch.manual_seed(5)
    np.random.seed(5)
    random.seed(5)
    saved = rng_states()
    draws = (torch.rand(3), np.random.rand(3), random.random())
    torch.save({"rng": saved}, tmp_path / "c.ckpt")
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    set_rng_states(torch.load(tmp_path / "c.ckpt", weights_only=True)["rng"])  # what Lightning's test loads
    assert torch.equal(torch.rand(3), draws[0]) and np.array_equal(np.random.rand(3), draws[1])
    assert random.random() == draws[2]


def write_csv(path: Path, rows: list[tuple[int, float]], torn: str = "") -> None:
    path.write_text("step,train/loss\n" + "".join(f"{s},{v}\n" for s, v in rows) + torn)


def test_metric_parts_are_read_in_number_order_each_step_once(tmp_path):
    # Parts 0..11 (part10 and part11 sort before part2 as text); each part replays its last step.
    for k in range(12):
        write_csv(tmp_path / f"metrics.part{k}.csv", [(2 * k, float(k)), (2 * k + 1, float(k)), (2 * k + 2, 99.0)])
    write_csv(tmp_path / "metrics.csv", [(24, 12.0), (25, 12.0)])
    assert [p.name for p in metrics_files(tmp_path)][:3] == ["metrics.part0.csv", "metrics.part1.csv",
                                                             "metrics.part2.csv"]
    steps, values = read_metrics(tmp_path, ["train/loss"])[0]["train/loss"]
    assert steps.tolist() == list(range(26))
    assert values.tolist() == [float(s // 2) for s in range(26)]  # a replayed step: the later file's value


def test_a_row_cut_short_by_the_interruption_is_left_out_of_the_part(tmp_path):
    write_csv(tmp_path / "metrics.csv", [(0, 1.0), (1, 2.0)], torn="2,3.")
    assert "metrics.part0.csv" in move_metrics_to_part(tmp_path)
    assert (tmp_path / "metrics.part0.csv").read_text() == "step,train/loss\n0,1.0\n1,2.0\n"
    assert not (tmp_path / "metrics.csv").exists()
    write_csv(tmp_path / "metrics.csv", [(2, 3.0)])
    move_metrics_to_part(tmp_path)
    assert (tmp_path / "metrics.part1.csv").read_text() == "step,train/loss\n2,3.0\n"


def fake_checkpoint(path: Path, step: int, chash: str = "abc") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"global_step": step, "state_dict": {}, "loops": {}, "optimizer_states": [], CONFIG_HASH_KEY: chash},
               path)


def test_an_unusable_checkpoint_is_moved_aside_and_the_next_one_resumes(tmp_path, caplog):
    folder = tmp_path / "checkpoints"
    fake_checkpoint(folder / "best.ckpt", 5)
    fake_checkpoint(folder / "last.ckpt", 10)
    (folder / ".last.123.abcd.ckpt").write_bytes(b"half a chec")  # a write that was killed
    data = (folder / "last.ckpt").read_bytes()
    (folder / "last.ckpt").write_bytes(data[: len(data) // 2])  # truncated
    caplog.set_level("INFO")
    assert prepare_resume(tmp_path, 17, "abc") == str(folder / "best.ckpt")
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith("last.ckpt.unreadable-")) == ["best.ckpt"]
    (aside,) = folder.glob("last.ckpt.unreadable-*")
    assert aside.read_bytes() == data[: len(data) // 2]  # moved, never deleted
    assert "cannot resume from" in caplog.text and "not a readable checkpoint" in caplog.text
    assert "resuming an interrupted run from step 5" in caplog.text


@pytest.mark.parametrize("content, reason", [
    (b"garbage, not a zip", "not a readable checkpoint"),
    ("other config", "written by another config (config hash zzz, this run's abc)"),
    ("no loops", "not a Lightning training checkpoint"),
])
def test_with_no_usable_checkpoint_the_run_restarts_from_step_zero(tmp_path, caplog, content, reason):
    last = tmp_path / "checkpoints" / "last.ckpt"
    if content == "other config":
        fake_checkpoint(last, 10, chash="zzz")
    elif content == "no loops":
        last.parent.mkdir(parents=True)
        torch.save({"global_step": 10, "state_dict": {}}, last)
    else:
        last.parent.mkdir(parents=True)
        last.write_bytes(content)
    write_csv(tmp_path / "metrics.csv", [(0, 1.0)])
    assert prepare_resume(tmp_path, 17, "abc") is None
    assert reason in caplog.text and "restarts from step 0" in caplog.text
    assert len(list(last.parent.glob("last.ckpt.unreadable-*"))) == 1 and not last.exists()
    assert (tmp_path / "metrics.part0.csv").is_file()  # the earlier metrics are kept, not mixed in


def test_storage_faults_are_told_apart_from_other_errors(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    full = OSError(errno.ENOSPC, "No space left on device", str(run / "checkpoints" / "last.ckpt"))
    assert storage_fault(full, run) == f"no space left on the device writing {run / 'checkpoints' / 'last.ckpt'}"
    wrapped = RuntimeError("logger failed")
    wrapped.__cause__ = OSError(errno.EROFS, "Read-only file system", str(run / "metrics.csv"))
    assert storage_fault(wrapped, run) == f"the file system is read-only writing {run / 'metrics.csv'}"
    assert storage_fault(PermissionError(errno.EACCES, "denied", "/data/train.npy"), run) is None  # an input
    assert storage_fault(RuntimeError("file write failed"), run) is None  # the disk has room: not the disk
    assert storage_fault(ValueError("bad"), run) is None
    shutil.rmtree(run)
    assert storage_fault(ValueError("anything"), run) == f"the run folder {run} vanished while the run wrote to it"


def test_an_interrupted_record_resumes(tmp_path):
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"task": {"name": "finetune"}, "seed": 0})
    (tmp_path / "run.json").write_text("{}")
    OmegaConf.save(cfg, tmp_path / "config.yaml")
    (tmp_path / "result.json").write_text(json.dumps({"status": "interrupted", "step": 9}))
    state = inspect_run(tmp_path, cfg, ("task", "seed"))
    assert state.kind == "resume" and state.record["step"] == 9


# ------------------------------------------------------------------------ faults in real runs


@pytest.mark.slow
def test_a_forked_launch_equals_a_fresh_one(tmp_path, data_dir, whole):
    """The fork server cannot hide a run that depends on the interpreter (hash seed, set order,
    import-time state): the same config forked and in a new interpreter (``whole``) give the same
    record, rows and weights."""
    forked = launch(tmp_path, data_dir)
    assert forked.returncode == 0, forked.stderr[-3000:]
    run = run_dir(tmp_path / "outputs")
    assert metric_rows(run / "metrics.csv", COLUMNS) == metric_rows(whole / "metrics.csv", COLUMNS)
    assert_same_run(whole, run, resumed_flag=False)



# One run stopped four times in a row, each stop of another kind; each relaunch resumes from the
# newest complete checkpoint, last.ckpt: (fault, exit code, the step the next launch resumes from).
STOPS = [
    (("KILL", "checkpoint", 5), -9, 5),      # at a checkpoint inside the first epoch
    (("KILL", "write", 10), -9, 5),          # during the checkpoint write at the epoch's end: 5 stays the last
    (("TERM", "validation", 15), 143, 10),   # during a validation: its checkpoint never written; 10 (epoch end)
    (("INT", "checkpoint", 15), 130, 15),    # Ctrl-C inside the second epoch
]


@pytest.mark.slow
def test_a_run_stopped_again_and_again_resumes_to_the_uninterrupted_result(tmp_path, data_dir, whole):
    run, resumed_from, seen = run_dir(tmp_path / "outputs"), None, {c: set() for c in COLUMNS}
    for (signal, at, step), code, resumes_from in STOPS:
        cut = launch(tmp_path, data_dir, *fault(signal, at, step))
        out = cut.stdout + cut.stderr
        assert cut.returncode == code, out[-3000:]
        if resumed_from is not None:
            assert f"resuming an interrupted run from step {resumed_from} of 20 ({run / 'checkpoints' / 'last.ckpt'})" \
                in out
        if signal == "KILL":
            assert not (run / "result.json").exists()
        else:  # recorded: interrupted, where it got to and where it resumes
            stopped = record(run)
            assert stopped["status"] == "interrupted" and stopped["error"] == f"stopped by SIG{signal}"
            assert stopped["step"] == step and stopped["checkpoint_step"] == resumes_from
            assert "Traceback" not in out
        if at == "write":  # the killed write's temporary file; last.ckpt is still the step-5 checkpoint
            assert list((run / "checkpoints").glob(".last.*.ckpt")) or list((run / "checkpoints").glob(".best.*"))
        assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == resumes_from
        # This launch's rows, before the relaunch moves them to a part: each equals the uninterrupted run's.
        for column, steps in assert_rows_match(whole, run / "metrics.csv").items():
            seen[column] |= steps
        resumed_from = resumes_from
    resumed = launch(tmp_path, data_dir, fresh=True)  # the last part in a new interpreter
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    out = resumed.stdout + resumed.stderr
    assert f"resuming an interrupted run from step 15 of 20 ({run / 'checkpoints' / 'last.ckpt'})" in out
    assert "not resumable" not in out  # Lightning's warning: the loader is resumable now
    assert not list((run / "checkpoints").glob(".*"))  # the killed write's temporary file is gone
    for column, steps in assert_rows_match(whole, run / "metrics.csv").items():
        seen[column] |= steps
    every = {c: {s for s, _ in r} for c, r in metric_rows(whole / "metrics.csv", COLUMNS).items()}
    assert seen == every  # every step checked in some part
    assert [p.name for p in metrics_files(run)] == [f"metrics.part{k}.csv" for k in range(4)] + ["metrics.csv"]
    assert_same_run(whole, run)


@pytest.mark.slow
def test_with_no_readable_checkpoint_the_run_restarts_and_ends_the_same(tmp_path, data_dir, whole):
    cut = launch(tmp_path, data_dir, *fault("KILL", "checkpoint", 15))
    assert cut.returncode == -9
    run = run_dir(tmp_path / "outputs")
    last = run / "checkpoints" / "last.ckpt"
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 3])  # a copy that died half-way
    (run / "checkpoints" / "best.ckpt").write_bytes(b"\0" * 100)
    assert_rows_match(whole, run / "metrics.csv")
    resumed = launch(tmp_path, data_dir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    out = resumed.stdout + resumed.stderr
    assert "cannot resume from" in out and "no readable checkpoint left" in out and "restarts from step 0" in out
    (aside,) = (run / "checkpoints").glob("last.ckpt.unreadable-*")
    assert aside.read_bytes() == data[: len(data) // 3]  # moved, never deleted
    assert len(list((run / "checkpoints").glob("*.unreadable-*"))) == 2
    assert_rows_match(whole, run / "metrics.csv")  # the replayed steps: the same rows
    assert_same_run(whole, run, resumed_flag=False)


@pytest.fixture
def small_disk(tmp_path, mounting):
    """A 700 KiB tmpfs: room for the first checkpoints (about 300 KB each), not for the next write."""
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=700k", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.slow
def test_a_full_disk_stops_the_run_cleanly_and_a_relaunch_with_room_resumes(tmp_path, data_dir, whole, small_disk):
    output = small_disk / "outputs"
    cut = launch(tmp_path, data_dir, output=output)
    out = cut.stdout + cut.stderr
    assert cut.returncode == 1, out[-3000:]  # not done: a script sees it
    assert "Traceback" not in out
    run = run_dir(output)
    assert f"run stopped: no space left on the device writing {run}" in out
    stopped = record(run)  # the record fits where a checkpoint does not
    assert stopped["status"] == "interrupted" and stopped["error"].startswith("no space left on the device")
    assert stopped["checkpoint_step"] == 5 and not list((run / "checkpoints").glob(".*"))
    subprocess.run(["mount", "-o", "remount,size=8m", str(small_disk)], check=True)  # the user frees space
    resumed = launch(tmp_path, data_dir, output=output)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming an interrupted run from step 5 of 20" in resumed.stdout + resumed.stderr
    assert_same_run(whole, run)


@pytest.mark.slow
def test_a_folder_turned_read_only_stops_the_run_and_a_relaunch_resumes(tmp_path, data_dir, whole, mounting):
    run = run_dir(tmp_path / "outputs")
    try:
        cut = launch(tmp_path, data_dir, "+callbacks.fault._target_=tests.faults.ReadOnly", "+callbacks.fault.step=7")
        out = cut.stdout + cut.stderr
        assert cut.returncode == 1 and "Traceback" not in out, out[-3000:]
        assert f"run stopped: the file system is read-only writing {run}" in out
        assert "could not record the run" in out and not (run / "result.json").exists()  # nowhere to record
    finally:
        subprocess.run(["umount", "-l", str(run)], check=False)  # writable again
    resumed = launch(tmp_path, data_dir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming an interrupted run from step 5 of 20" in resumed.stdout + resumed.stderr
    assert_same_run(whole, run)


@pytest.mark.slow
def test_a_run_folder_that_vanishes_stops_with_one_line(tmp_path, data_dir):
    cut = launch(tmp_path, data_dir, "+callbacks.fault._target_=tests.faults.Vanish", "+callbacks.fault.step=6")
    out = cut.stdout + cut.stderr
    run = run_dir(tmp_path / "outputs")
    assert f"the run folder {run} vanished while the run wrote to it" in out
    assert "could not record the run" in out and "Traceback" not in out


def test_the_report_lists_interrupted_runs_apart_from_failures(tmp_path):
    from plasticity.report.markdown import not_done_md

    runs = [(tmp_path / "a", {"status": "done"}),
            (tmp_path / "b", {"status": "interrupted", "step": 9, "error": "stopped by SIGTERM"}),
            (tmp_path / "c", {"status": "failed", "error": "RuntimeError: boom"})]
    text = not_done_md(runs)
    head, tail = text.split("Failed or diverged:")
    assert f"| interrupted | {tmp_path / 'b'} | 9 | stopped by SIGTERM |" in head and "failed" not in head
    assert f"| failed | {tmp_path / 'c'} | RuntimeError: boom |" in tail and "interrupted" not in tail
    assert not_done_md(runs[:1]) == "None.\n"


def test_jpeg_crops_do_not_depend_on_workers_or_on_a_resume(tmp_path):
    """The JPEG path crops in loader workers: each image's crop comes from its own (seed, epoch)
    seed, so 0 or 2 workers and a loader resumed after 2 batches give the same tensors."""
    from plasticity.data import DataSpec
    from plasticity.data.datamodule import DataModule
    from tests.fixtures import write_flowers102

    write_flowers102(tmp_path, n=48, num_classes=4)
    spec = DataSpec("flowers102", str(tmp_path), img_size=32)

    def batches(workers: int, resume: dict | None = None, stop: int | None = None):
        dm = DataModule(spec, micro_batch_size=4, num_workers=workers, seed=7)
        loader = dm.train_dataloader()
        if resume:
            loader.load_state_dict(resume)
        out = []
        for images, labels in loader:
            out.append(torch.cat([images.flatten(), labels]))
            if stop is not None and len(out) == stop:
                return out, loader.state_dict()
        return out, loader.state_dict()

    whole, _ = batches(0)
    assert len(whole) >= 3 and len({b.sum().item() for b in whole}) == len(whole)
    assert all(torch.equal(a, b) for a, b in zip(whole, batches(2)[0], strict=True))
    head, state = batches(2, stop=2)
    tail, _ = batches(0, resume=state)
    assert all(torch.equal(a, b) for a, b in zip(whole, head + tail, strict=True))


def test_a_moved_run_folder_keeps_its_checkpoints_state(tmp_path):
    from plasticity.runs.checkpoints import best_and_last

    old, new = tmp_path / "old" / "run", tmp_path / "new" / "run"
    best, _ = best_and_last(old)
    best.best_model_score, best.best_model_path = torch.tensor(0.75), str(old / "checkpoints" / "best.ckpt")
    best.best_k_models, best.kth_best_model_path = {best.best_model_path: best.best_model_score}, best.best_model_path
    state = best.state_dict()
    moved, _ = best_and_last(new)
    moved.load_state_dict(state)  # Lightning's own keeps only best_model_path when dirpath changed
    assert moved.best_model_score == torch.tensor(0.75) and moved.dirpath == str(new / "checkpoints")
    assert moved.best_model_path == moved.kth_best_model_path == str(new / "checkpoints" / "best.ckpt")
    assert moved.best_k_models == {str(new / "checkpoints" / "best.ckpt"): torch.tensor(0.75)}


@pytest.mark.slow
def test_a_run_folder_moved_between_launches_resumes_to_the_uninterrupted_result(tmp_path, data_dir, whole):
    cut = launch(tmp_path, data_dir, *fault("KILL", "checkpoint", 15), output=tmp_path / "first")
    assert cut.returncode == -9
    (tmp_path / "first").rename(tmp_path / "moved")  # the outputs renamed: the checkpoints name the old folder
    resumed = launch(tmp_path, data_dir, output=tmp_path / "moved")
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, out[-3000:]
    run = run_dir(tmp_path / "moved")
    assert f"resuming an interrupted run from step 15 of 20 ({run / 'checkpoints' / 'last.ckpt'})" in out
    assert "dirpath has changed" not in out
    assert_same_run(whole, run)

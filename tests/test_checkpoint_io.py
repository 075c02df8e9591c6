"""Checkpoints off the step path and metrics that keep their rows: the background writer's copy,
order, failures and teardown; a run killed while its checkpoint's temporary file holds part of the
bytes resumes from the previous complete one and ends as the uninterrupted run; ``metrics.csv`` keeps
its rows when a new column's rewrite fails.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from plasticity.runs.checkpoint_io import BackgroundCheckpointIO
from plasticity.runs.checkpoints import checkpoint_step
from tests.fixtures import record
from tests.test_resume import assert_same_run, fault, launch, run_dir

ROOT = Path(__file__).resolve().parents[1]


def test_a_background_write_saves_the_weights_of_its_step_in_order(tmp_path):
    io = BackgroundCheckpointIO(tmp_path)
    weight = torch.zeros(1000)
    for step in range(1, 4):
        io.save_checkpoint({"global_step": step, "state_dict": {"w": weight}}, tmp_path / "last.ckpt")
        weight.add_(1.0)  # the optimizer's next step, in place, while the write may still run
    io.teardown()  # waits for the writes
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)
    assert saved["global_step"] == 3 and torch.equal(saved["state_dict"]["w"], torch.full((1000,), 2.0))
    assert checkpoint_step(tmp_path / "last.ckpt") == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]  # no temporary file left


def test_a_failed_background_write_is_raised_once_and_stops_the_later_writes(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    io = BackgroundCheckpointIO(run)
    io.save_checkpoint({"global_step": 5}, run / "best.ckpt")
    io.wait()
    shutil.rmtree(run)  # a user's rm -r: the next write fails in the background
    io.save_checkpoint({"global_step": 10}, tmp_path / "best.ckpt")
    io.save_checkpoint({"global_step": 10}, tmp_path / "last.ckpt")  # queued behind the failing one
    with pytest.raises(FileNotFoundError, match="the run folder vanished"):
        io.wait()  # what the next save or the teardown does first
    io.save_checkpoint({"global_step": 15}, tmp_path / "last.ckpt")  # raised once: the run is on its way out
    io.teardown()  # (Lightning's teardown runs again on the way out of the error)
    assert not (tmp_path / "last.ckpt").exists()  # no checkpoint of another validation than best's


def test_teardown_raises_a_failure_of_the_last_write(tmp_path):
    io = BackgroundCheckpointIO(tmp_path / "gone")
    io.save_checkpoint({"global_step": 1}, tmp_path / "last.ckpt")
    with pytest.raises(FileNotFoundError, match="the run folder vanished"):
        io.teardown()


METRICS_WRITE = """
import os, resource, signal, sys
from plasticity.tracking.logger import CSVLogger

logger = CSVLogger(sys.argv[1], name="", version="")
for step in range(50):
    logger.log_metrics({"train/loss": 1.0 + step}, step=step)
logger.save()
size = os.path.getsize(logger.experiment.metrics_file_path)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 16, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
logger.log_metrics({"val/acc": 0.5}, step=50)  # a new column: every row gets a cell, the file grows
try:
    logger.save()
except OSError as err:
    print("write failed:", err.strerror)
"""


def test_a_new_column_whose_rewrite_fails_loses_no_earlier_row(tmp_path):
    """A real failing write (the file size limit, as a full disk, without root): Lightning's writer
    reopens metrics.csv for writing and leaves it cut; the project's leaves the old file whole."""
    done = subprocess.run([sys.executable, "-c", METRICS_WRITE, str(tmp_path)], capture_output=True, text=True,
                          cwd=ROOT, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "write failed: File too large" in done.stdout
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    assert lines == ["step,train/loss", *(f"{s},{1.0 + s}" for s in range(50))]
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.csv"]  # the temporary file removed


def test_rows_are_appended_and_a_new_column_keeps_every_row(tmp_path):
    from plasticity.tracking.logger import CSVLogger

    logger = CSVLogger(tmp_path, name="", version="")
    logger.log_metrics({"train/loss": 2.0}, step=0)
    logger.save()
    inode = (tmp_path / "metrics.csv").stat().st_ino
    logger.log_metrics({"train/loss": 1.5}, step=1)
    logger.save()
    assert (tmp_path / "metrics.csv").stat().st_ino == inode  # appended: the same file
    logger.log_metrics({"val/acc": 0.25}, step=2)
    logger.save()
    assert (tmp_path / "metrics.csv").read_text().splitlines() == ["step,train/loss,val/acc", "0,2.0,", "1,1.5,",
                                                                   "2,,0.25"]


@pytest.fixture(scope="module")
def whole(tmp_path_factory, data_dir) -> Path:
    """The uninterrupted run (tests/test_resume.py's: a checkpoint every 5 steps)."""
    root = tmp_path_factory.mktemp("whole")
    proc = launch(root, data_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir(root / "outputs")


@pytest.mark.slow
def test_a_kill_with_half_a_checkpoint_on_disk_resumes_from_the_previous_one(tmp_path, data_dir, whole):
    cut = launch(tmp_path, data_dir, *fault("KILL", "write", 10))
    assert cut.returncode == -9, (cut.stdout + cut.stderr)[-3000:]
    run = run_dir(tmp_path / "outputs")
    folder = run / "checkpoints"
    (half,) = folder.glob(".*.ckpt")  # the temporary file of the killed write: part of the bytes
    whole_size = (folder / "last.ckpt").stat().st_size
    assert 1024 <= half.stat().st_size < whole_size, (half.stat().st_size, whole_size)
    assert checkpoint_step(folder / "last.ckpt") == 5 and not (run / "result.json").exists()
    resumed = launch(tmp_path, data_dir)
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, out[-3000:]
    assert "resuming an interrupted run from step 5 of " in out, out[-3000:]
    assert not list(folder.glob(".*"))  # the half-written file is gone, never read
    assert_same_run(whole, run)

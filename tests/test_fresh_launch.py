"""A forked launch (tests/forklaunch.py) ends as a new interpreter does: Ctrl-C before the run (no
handler of the launch's yet) gives CPython's exit, death by SIGINT (-2), in both. (A forked and a
fresh training run compared field by field, row by row and weight by weight: tests/test_resume.py.)"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
from hydra.experimental.callback import Callback

from tests import forklaunch

ROOT = Path(__file__).resolve().parents[1]


class InterruptAtStart(Callback):
    """A Hydra callback: Ctrl-C at the job's start, before the launch's signal handlers are set."""

    def on_job_start(self, config, **kwargs) -> None:
        os.kill(os.getpid(), signal.SIGINT)


@pytest.mark.parametrize("fresh", [False, True], ids=["forked", "fresh"])
def test_ctrl_c_before_the_run_ends_the_launch_as_cpython_does(tmp_path, data_dir, fresh):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, forklaunch.LAUNCH, "debug=tiny", f"paths.data_dir={data_dir}",
           f"paths.output_dir={tmp_path}", "print_config=false",
           "+hydra.callbacks.interrupt._target_=tests.test_fresh_launch.InterruptAtStart"]
    done = forklaunch.run(cmd, cwd=tmp_path, env=env, timeout=300, fresh=fresh)
    assert done.returncode == -signal.SIGINT, done.stderr[-3000:]
    assert done.stderr.rstrip().endswith("KeyboardInterrupt")  # the traceback, as CPython prints it

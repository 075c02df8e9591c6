"""Which process of a distributed (DDP) run this is, and rank 0's decision for the others.

One run may use several processes (``trainer.devices`` x ``trainer.num_nodes``). They reach
:func:`plasticity.job.run_job` in two ways:

- **Lightning's launcher** (a plain ``python launch.py trainer.devices=2 ...``): rank 0 runs alone
  until ``trainer.fit``, then starts ranks 1.. as new ``launch.py`` processes with ``LOCAL_RANK``
  set (and ``NODE_RANK`` on other nodes). By then rank 0 has decided and exported its decision in
  the environment the children inherit (:data:`DECISION_ENV`).
- **srun** (``hydra/launcher=slurm`` with ``tasks_per_node`` > 1): every task runs the job at once,
  ``SLURM_PROCID`` being its rank. Rank 0 writes its decision to ``<run_dir>/.ranks.json`` under the
  job attempt's token (job id and requeue count); the others wait for it and acknowledge it
  (``.ranks.<rank>.ack``). Rank 0 removes both when its job ends, after every rank acknowledged a
  ``stop`` (a relaunch that finds the run finished), so a finished run keeps neither.

Only rank 0 validates, takes the run's lock, inspects the run directory and writes records; the
other ranks do what it decided: run (resuming from the same checkpoint) or stop.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from plasticity.runs.io import read_json, write_json_atomic

__all__ = ["DECISION_ENV", "DECISION_FILE", "announce", "await_decision", "global_rank", "is_rank_zero", "conclude",
           "num_nodes", "slurm_tasks"]

log = logging.getLogger(__name__)

DECISION_ENV = "PLASTICITY_RANK0_DECISION"
DECISION_FILE = ".ranks.json"
ACK_FILE = ".ranks.{rank}.ack"
"""A rank's acknowledgement of the decision file (holding the launch's token)."""
_announced: dict[str, Any] = {}
"""This process's last decision (its Lightning-started ranks read the copy in the environment)."""
WAIT_S = 1800.0
"""How long a non-zero rank waits for rank 0's decision (rank 0 may first wait for a data check)."""


def slurm_tasks() -> int:
    """Tasks of the SLURM job step this process runs in (1 outside SLURM)."""
    return _env_int("SLURM_NTASKS", 1)


def num_nodes(cfg: Any) -> int:
    """``trainer.num_nodes`` of a job config (1 for a task without a trainer, or an invalid value)."""
    value = (cfg.get("trainer") or {}).get("num_nodes", 1)
    return value if isinstance(value, int) and value > 0 else 1


def _env_int(name: str, default: int = 0) -> int:
    try:
        return int(os.environ.get(name, str(default)))
    except ValueError:
        return default


def global_rank() -> int:
    """This process's rank before Lightning sets it: ``RANK`` (torchrun), ``SLURM_PROCID`` (an srun
    task of a multi-task job), else non-zero when ``LOCAL_RANK`` or ``NODE_RANK`` is (Lightning's
    launcher); a process outside any launcher is rank 0."""
    if "RANK" in os.environ:
        return _env_int("RANK")
    if slurm_tasks() > 1 and "SLURM_PROCID" in os.environ:
        return _env_int("SLURM_PROCID")
    return max(_env_int("LOCAL_RANK"), 0) + max(_env_int("NODE_RANK"), 0)


def is_rank_zero() -> bool:
    """True in the process that owns the run directory (the only one in a single-process run)."""
    return global_rank() == 0


def _token() -> str | None:
    """The launch attempt both ranks agree on without talking: the SLURM job and its requeue count,
    else the rendezvous address (a launch by hand on several nodes)."""
    if slurm_tasks() > 1 and os.environ.get("SLURM_JOB_ID"):
        return f"slurm:{os.environ['SLURM_JOB_ID']}:{os.environ.get('SLURM_RESTART_COUNT', '0')}"
    if os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT"):
        return f"env:{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    return None


def announce(run_dir: str | Path, action: str, resume: str | None = None, num_nodes: int = 1) -> None:
    """Rank 0: tells the other ranks to ``run`` (from ``resume``, a checkpoint, or from scratch) or
    to ``stop``.

    Exported in the environment (processes Lightning starts later inherit it) and, for ranks
    started beside it (srun tasks, or processes started by hand on other nodes: ``num_nodes`` > 1),
    written to ``<run_dir>/.ranks.json``. A single-process run writes no file.
    """
    decision = {"action": action, "resume": resume, "run_dir": str(run_dir)}
    _announced.update(decision)
    os.environ[DECISION_ENV] = json.dumps(decision)  # for the ranks Lightning starts from this process (only)
    token = _token() if slurm_tasks() > 1 or num_nodes > 1 else None  # ranks in other processes: the file
    if token is not None and Path(run_dir).is_dir():
        write_json_atomic(Path(run_dir) / DECISION_FILE, {**decision, "token": token})


def conclude(run_dir: str | Path, num_nodes: int = 1, timeout_s: float = WAIT_S) -> None:
    """Rank 0, when its job ends: leaves no decision file behind.

    After a run every rank took part in (it announced ``run``), the file is removed at once.
    Otherwise ranks may still be waiting: they are told to ``stop``, and the file is removed once
    each of them acknowledged it (within ``timeout_s``; a rank that never came finds it still there).
    """
    # What this process announced last (the recipe announces "run" just before Trainer.fit).
    if _announced.get("run_dir") != str(run_dir) or _announced.get("action") != "run":
        announce(run_dir, "stop", num_nodes=num_nodes)
        # Who reads the file: the other srun tasks, else the first process of each other node (the ranks
        # Lightning starts there inherit its environment).
        followers = slurm_tasks() - 1 if slurm_tasks() > 1 else num_nodes - 1
        if not _acknowledged(run_dir, followers, timeout_s):
            log.warning("%s: ranks of launch %s did not read rank 0's decision within %.0f s; %s is left for them",
                        run_dir, _token(), timeout_s, DECISION_FILE)
            return
    Path(run_dir, DECISION_FILE).unlink(missing_ok=True)
    for ack in Path(run_dir).glob(ACK_FILE.format(rank="*")):
        ack.unlink(missing_ok=True)


def _acknowledged(run_dir: str | Path, followers: int, timeout_s: float) -> bool:
    """Waits until ``followers`` ranks acknowledged this launch's decision file (True; also when
    there is no file to read: no token, or no run directory); False after ``timeout_s``."""
    token = _token()
    if token is None or followers < 1 or not Path(run_dir, DECISION_FILE).is_file():
        return True
    deadline = time.monotonic() + timeout_s
    acks = lambda: Path(run_dir).glob(ACK_FILE.format(rank="*"))  # noqa: E731
    while sum((read_json(p) or {}).get("token") == token for p in acks()) < followers:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def await_decision(run_dir: str | Path, timeout_s: float = WAIT_S) -> dict[str, Any]:
    """A non-zero rank: rank 0's decision (``{"action": "run" | "stop", "resume": path | None}``).

    Raises:
        RuntimeError: no decision came within ``timeout_s``, or this process cannot know which
            launch it belongs to; the message says how to launch the ranks.
    """
    inherited = os.environ.get(DECISION_ENV)
    if inherited:
        decision = json.loads(inherited)
        if decision.get("run_dir") == str(run_dir):  # not a decision for an earlier job of the same process
            return decision
    token = _token()
    if token is None:
        raise RuntimeError(f"rank {global_rank()} of {run_dir} started without rank 0's decision: launch every rank "
                           f"through Lightning (python launch.py trainer.devices=N) or srun "
                           f"(hydra/launcher=slurm hydra.launcher.tasks_per_node=N).")
    path, deadline = Path(run_dir) / DECISION_FILE, time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = read_json(path)
        if found and found.get("token") == token:  # a file of an earlier attempt (before a requeue) is not it
            # rank 0 removes the file once every rank has read it (conclude)
            write_json_atomic(Path(run_dir) / ACK_FILE.format(rank=global_rank()), {"token": token})
            return found
        time.sleep(0.2)
    raise RuntimeError(f"rank {global_rank()}: rank 0 wrote no decision for launch {token} to {path} within "
                       f"{timeout_s:.0f} s. Fix: check rank 0's log (launch.log in {run_dir}).")

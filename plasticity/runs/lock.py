"""One process per run directory: an advisory ``flock`` on ``<run_dir>/.lock`` held for the run's life.

The OS releases the lock when the process ends, however it ends (exit, exception, SIGKILL,
SLURM preemption), so a killed or requeued job is never blocked by a stale lock. The lock file
records who holds it (host, pid, SLURM job, start time) so a second launch can say where the
run is in progress. ``flock`` works across the nodes of a shared NFSv4 or Lustre file system
mounted with locking enabled (the default for both).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

__all__ = ["LOCK_FILE", "RunLock", "lock_holder"]

LOCK_FILE = ".lock"


def _read(fd: int) -> dict:
    os.lseek(fd, 0, os.SEEK_SET)
    try:
        return json.loads(os.read(fd, 4096).decode() or "{}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}


class RunLock:
    """Non-blocking exclusive lock of a run directory.

    Example:
        >>> lock = RunLock(run_dir)  # doctest: +SKIP
        >>> if not lock.acquire():
        ...     print("running elsewhere:", lock.holder)

    Attributes:
        holder: After a failed :meth:`acquire`, who holds the lock (``host``, ``pid``, ``since``,
            ``slurm_job``); may be empty if it is being written.
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self.holder: dict = {}
        self._fd: int | None = None

    def acquire(self) -> bool:
        """Takes the lock; False (and :attr:`holder` set) when another process holds it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # no O_TRUNC: the holder's info stays readable
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.holder = _read(fd)
            os.close(fd)
            return False
        os.ftruncate(fd, 0)  # ours now: the previous holder's info goes
        job = os.environ.get("SLURM_JOB_ID")
        holder = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.strftime("%Y-%m-%d %H:%M:%S"),
                  **({"slurm_job": job} if job else {})}
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def lock_holder(run_dir: str | Path) -> dict | None:
    """Who holds the run directory's lock, or None when nobody does (creates nothing)."""
    try:
        fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDONLY)  # read only: asking creates nothing
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a shared lock is refused only while someone holds it
    except BlockingIOError:
        return _read(fd) or {"host": "?", "pid": "?"}
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)  # at once: a launch about to take the lock must not find it held
        return None
    finally:
        os.close(fd)

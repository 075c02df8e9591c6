"""Runs that stop before their end without failing: a signal (``SIGTERM``, ``SIGINT``, SLURM's
preemption or time-limit signal) or storage that gives out (no space left, a read-only or vanished
output folder). Both are recorded as ``status: interrupted`` with the step reached, where the disk
allows, and a relaunch of the same config resumes them from their last complete checkpoint.
"""

from __future__ import annotations

import errno
import shutil
import signal
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

__all__ = ["INTERRUPTED", "Interrupted", "recording_signals", "storage_fault"]

INTERRUPTED = "interrupted"
"""The status of a run stopped by a signal or by its storage: resumable, neither finished nor failed."""
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""Signals that stop a run at once (raised as :class:`Interrupted` where the process is)."""
CHAINED_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)
"""Signals another handler owns (submitit requeues the job on SLURM's ``--signal``): noted, then
handed to that handler, which requeues and exits."""
STORAGE_ERRNOS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
                  errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied"}


class Interrupted(BaseException):
    """A stop signal reached the run (a BaseException, like KeyboardInterrupt: no ``except
    Exception`` on the way up may swallow it)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)

    @property
    def exit_code(self) -> int:
        """The shell's code for a process ended by this signal (143 for SIGTERM, 130 for SIGINT)."""
        return 128 + self.signum


@contextmanager
def recording_signals() -> Iterator[list[int]]:
    """Within the block, :data:`STOP_SIGNALS` raise :class:`Interrupted` (once: after a stop they are only
    noted) and :data:`CHAINED_SIGNALS` are noted before their own handler runs; yields the list of signals
    received.

    Only in the main thread (signal handlers can be set nowhere else); the previous handlers come back at the end.
    """
    import threading

    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    stopping: list[int] = []  # once the run stops, a later signal (SLURM's SIGTERM after a requeue) is noted, not
    # raised in the middle of recording the first one

    def stop(signum: int, frame: Any) -> None:
        received.append(signum)
        if not stopping:
            stopping.append(signum)
            raise Interrupted(signum)

    def note_then_hand_over(signum: int, frame: Any) -> None:
        received.append(signum)
        try:
            previous[signum](signum, frame)  # the handler set before this block (submitit's)
        except SystemExit:  # submitit requeued the job and exits: the run stops
            stopping.append(signum)
            raise

    previous = {s: signal.getsignal(s) for s in (*STOP_SIGNALS, *CHAINED_SIGNALS)}
    for s in STOP_SIGNALS:
        signal.signal(s, stop)
    for s in CHAINED_SIGNALS:
        if callable(previous[s]):  # only a handler someone set (submitit's); the default would kill the process
            signal.signal(s, note_then_hand_over)
    try:
        yield received
    finally:
        for s, handler in previous.items():
            if handler is not None:
                signal.signal(s, handler)


def storage_fault(err: BaseException, run_dir: str | Path) -> str | None:
    """One line naming the path and the cause when ``err`` (or what caused it) is the storage giving
    out: no space, quota, read-only, the run folder gone; None for any other error.

    torch's checkpoint writer reports a full disk as a RuntimeError without an errno ("file write
    failed"): it counts when the run folder's file system is in fact full.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return f"the run folder {run_dir} vanished while the run wrote to it"
    for cause in _chain(err):
        if isinstance(cause, OSError) and cause.errno in STORAGE_ERRNOS:
            where = cause.filename or run_dir
            if cause.errno == errno.EACCES and run_dir.resolve() not in Path(where).resolve().parents:
                continue  # a file the run reads (data, weights) is the user's to fix, not the run folder's storage
            return f"{STORAGE_ERRNOS[cause.errno]} writing {where}"
        if (isinstance(cause, RuntimeError) and "write failed" in str(cause)
                and shutil.disk_usage(run_dir).free < 1 << 20):  # under 1 MiB: no checkpoint fits
            return f"{STORAGE_ERRNOS[errno.ENOSPC]} writing {run_dir}"
    return None


def _chain(err: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__

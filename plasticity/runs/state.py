"""What a launch finds in a run directory, and what it may do there.

:func:`inspect_run` reads (never writes) a run directory and classifies it against the config
about to run: new, finished with the same config (skip), finished with another config (a
conflict: never modified), interrupted (resume when the config is the same), failed (re-run),
or running in another process (skip). :func:`archive_run` moves a finished run aside when the
user asks for ``sweep.overwrite=true``: nothing finished is ever deleted.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from plasticity.runs.checkpoints import CHECKPOINT_DIR, METRICS_FILE, METRICS_PARTS
from plasticity.runs.io import read_json
from plasticity.runs.lock import LOCK_FILE, lock_holder
from plasticity.runs.stop import INTERRUPTED
from plasticity.runs.record import (CONFIG_FILE, ERROR_FILE, FINISHED, RESULT_FILE, STARTED_FILE, config_diff,
                                   digest, protocol)

__all__ = ["RunState", "archive_run", "clear_stale", "confirm", "conflict_message", "inspect_run", "stamp"]

STALE = (CHECKPOINT_DIR, METRICS_FILE, ERROR_FILE, RESULT_FILE)
"""What a failed run leaves that a re-run with another config must not reuse."""


@dataclass
class RunState:
    """A run directory as a launch finds it.

    Attributes:
        kind: ``new`` | ``finished`` (done or diverged with the same config: skip it) | ``conflict``
            (finished or interrupted, another config) | ``resume`` (interrupted, same config) |
            ``failed`` | ``running``.
        record: The existing ``result.json``, if any.
        diff: ``(key, old, new)`` of the protocol keys that differ (conflicts and failed runs).
        holder: Who runs it (``running`` only).
    """

    kind: str
    record: dict | None = None
    diff: list[tuple[str, Any, Any]] = field(default_factory=list)
    holder: dict | None = None
    stamp: tuple = ()


def stamp(run_dir: Path) -> tuple:
    """The ``(mtime, size)`` of each file an inspection reads (None: absent): equal later, nothing changed."""
    found = []
    for name in (RESULT_FILE, STARTED_FILE, CONFIG_FILE):
        try:
            found.append(((st := (run_dir / name).stat()).st_mtime_ns, st.st_size))
        except OSError:
            found.append(None)
    return tuple(found)


def _diff(run_dir: Path, record: dict | None, new: dict, sections: tuple[str, ...]) -> list:
    path = run_dir / CONFIG_FILE
    if path.is_file():
        try:
            old = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        except Exception:  # an unreadable config is no evidence of a match
            return config_diff({"<config.yaml unreadable>": str(path)}, new)
        return config_diff(protocol(old, sections), new)
    # No config.yaml (a record written by hand or by an older version): the record's hash is all there is.
    old_hash, new_hash = (record or {}).get("config_hash"), digest(new)
    return [] if old_hash in (None, new_hash) else [("config_hash", old_hash, new_hash)]


def inspect_run(run_dir: str | Path, cfg: Any, sections: tuple[str, ...], locked: bool = False) -> RunState:
    """Classifies ``run_dir`` for the job config ``cfg`` (only ``sections`` define the run).

    Args:
        run_dir: The run directory.
        cfg: The job config about to run.
        sections: The config sections that define the run (the recipe's).
        locked: The caller holds the run's lock (so it is not ``running`` elsewhere).
    """
    seen = stamp(Path(run_dir))  # before reading: a file written meanwhile makes confirm() inspect again
    return replace(_classify(Path(run_dir), cfg, sections, locked), stamp=seen)


def confirm(planned: RunState | None, run_dir: Path, cfg: Any, sections: tuple[str, ...]) -> RunState:
    """Under the run's lock: the plan's inspection while the files it read are unchanged, else a new one."""
    if planned is not None and planned.kind != "running" and planned.stamp == stamp(run_dir):
        return planned
    return inspect_run(run_dir, cfg, sections, locked=True)


def _classify(run_dir: Path, cfg: Any, sections: tuple[str, ...], locked: bool) -> RunState:
    if not run_dir.is_dir():
        return RunState("new")
    holder = None if locked else lock_holder(run_dir)  # the caller's own lock would read as "running"
    if holder is not None:
        return RunState("running", read_json(run_dir / RESULT_FILE), holder=holder)
    record = read_json(run_dir / RESULT_FILE)
    # Neither a record nor the started marker: an empty folder (Hydra made it; the job was rejected or killed at once).
    if record is None and not (run_dir / STARTED_FILE).is_file():
        return RunState("new")
    diff = _diff(run_dir, record, protocol(cfg, sections), sections)
    if record is not None and record.get("status") in FINISHED:
        return RunState("conflict" if diff else "finished", record, diff)
    if record is None or record.get("status") == INTERRUPTED:
        # Started, never finished: killed (no record), or stopped by a signal or a full disk (recorded).
        return RunState("conflict" if diff else "resume", record, diff)
    return RunState("failed", record, diff)


def conflict_message(run_dir: Path, state: RunState, limit: int = 6) -> str:
    """The error for a launch that would touch a finished or interrupted run of another config."""
    finished = state.record is not None and state.record.get("status") in FINISHED
    acc = (state.record or {}).get("test_acc")
    acc = f", test acc {100 * acc:.2f}%" if isinstance(acc, (int, float)) else ""
    what = f"a finished run ({state.record.get('status')}{acc})" if finished else "an interrupted run (resumable)"
    shown = ", ".join(f"{k}: {_fmt(old)} -> {_fmt(new)}" for k, old, new in state.diff[:limit])
    more = f" (+{len(state.diff) - limit} more)" if len(state.diff) > limit else ""
    return (f"{run_dir} holds {what} made with a different config ({shown}{more}); it is left untouched. "
            f"Fix: sweep.overwrite=true to run anyway (the old run is moved to {run_dir.parent}/."
            f"{run_dir.name}.replaced-<time>/, nothing is deleted), or paths.output_dir=<another folder> to keep both.")


def _fmt(value: Any) -> str:
    return "(unset)" if value is None else repr(value)


def archive_run(run_dir: str | Path) -> Path:
    """Moves everything in ``run_dir`` (but the lock) to a hidden sibling ``.<name>.replaced-<time>``.

    Reports and sweeps skip hidden folders, so the archived run no longer counts, yet nothing is lost.
    """
    run_dir = Path(run_dir)
    target = run_dir.parent / f".{run_dir.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}"
    target.mkdir(parents=True, exist_ok=False)
    for entry in run_dir.iterdir():
        if entry.name != LOCK_FILE:  # this process holds it: the run directory stays owned while it is rebuilt
            shutil.move(str(entry), target / entry.name)
    return target


def clear_stale(run_dir: str | Path) -> None:
    """Removes what a failed run of another config left (never called on finished runs)."""
    run_dir = Path(run_dir)
    for path in [*(run_dir / name for name in STALE), *run_dir.glob(METRICS_PARTS)]:
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)

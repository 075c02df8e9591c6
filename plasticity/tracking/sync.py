"""Uploads every offline W&B run under a sweep directory: ``wandb sync`` underneath.

Runs log offline by default (compute nodes often have no internet). From a machine that has it::

    python -m plasticity.tracking.sync outputs/                # every offline run not yet synced
    python -m plasticity.tracking.sync outputs/ --dry-run      # list them, upload nothing
    python -m plasticity.tracking.sync outputs/ --entity my-team --project plasticity

A run resumed after a requeue has one ``offline-run-*`` folder per part, all with the run's id;
``wandb sync`` uploads the parts of one run in start order. Folders ``wandb sync`` already marked as
synced are skipped (``--all`` includes them), and so are folders whose run file holds nothing
(a process killed with SIGKILL before W&B wrote; its metrics stay in ``metrics.part<k>.csv``);
replaced runs (hidden ``.<dir>.replaced-*`` folders) are never synced. While jobs run,
``logger.wandb.osh=true`` with ``wandb-osh`` on a login node syncs them as they go (README "W&B").
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from plasticity.compat import RUN_FILE_HEADER
from plasticity.runs.record import visible_files

__all__ = ["main", "offline_runs", "sync_command"]


def offline_runs(sweep_dir: str | Path, include_synced: bool = False) -> list[Path]:
    """The ``offline-run-*`` folders under ``sweep_dir`` in start order (hidden folders skipped;
    folders whose run file ``wandb sync`` marked ``.synced`` skipped unless ``include_synced``)."""
    found = [path for path in visible_files(sweep_dir, "offline-run-*") if path.is_dir()
             and (include_synced or not any(path.glob("run-*.wandb.synced"))) and not _empty(path)]
    return sorted(found, key=lambda p: (p.name.split("-")[2], str(p)))  # offline-run-<start time>-<id>


def _empty(folder: Path) -> bool:
    """A run file with nothing past its header: the process was killed before W&B wrote a record."""
    return all(f.stat().st_size <= RUN_FILE_HEADER for f in folder.glob("run-*.wandb"))


def sync_command(paths: list[Path], entity: str | None = None, project: str | None = None,
                 dry_run: bool = False, include_synced: bool = False) -> list[str]:
    """The ``wandb sync`` command line for ``paths`` (the CLI of the running environment)."""
    cmd = [sys.executable, "-m", "wandb", "sync"]
    cmd += ["--entity", entity] if entity else []
    cmd += ["--project", project] if project else []
    cmd += ["--include-synced"] if include_synced else []
    cmd += ["--dry-run"] if dry_run else []
    return cmd + [str(p) for p in paths]


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m plasticity.tracking.sync <sweep_dir> [--dry-run] ...``."""
    parser = argparse.ArgumentParser(prog="python -m plasticity.tracking.sync", description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep_dir", help="a sweep directory (e.g. outputs/) holding run directories")
    parser.add_argument("--entity", help="W&B entity (team or user) to upload to")
    parser.add_argument("--project", help="W&B project (default: the one each run was logged with)")
    parser.add_argument("--dry-run", action="store_true", help="list what would be uploaded, upload nothing")
    parser.add_argument("--all", action="store_true", help="also runs already synced")
    args = parser.parse_args(argv)
    root = Path(args.sweep_dir)
    if not root.is_dir():
        print(f"error: sweep_dir={args.sweep_dir!r} is not a directory. Fix: pass the paths.output_dir of a "
              f"sweep, e.g. outputs/.", file=sys.stderr)
        return 2
    paths = offline_runs(root, include_synced=args.all)
    total = len(offline_runs(root, include_synced=True))
    print(f"{len(paths)} offline W&B run folder(s) to sync under {root} ({total - len(paths)} already synced)",
          flush=True)
    if not paths:
        return 0
    if not args.dry_run and os.environ.get("WANDB_MODE") in ("offline", "disabled"):
        print("note: WANDB_MODE is set to offline here; wandb sync ignores it and uploads.")
    cmd = sync_command(paths, args.entity, args.project, args.dry_run, args.all)
    env = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"}  # the child uploads, whatever the mode here
    return subprocess.run(cmd, env=env).returncode


if __name__ == "__main__":
    raise SystemExit(main())

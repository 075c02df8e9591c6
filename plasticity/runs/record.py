"""Run records: the ``result.json`` of each run directory, its config identity and conflicts.

A record holds at least ``task, dataset, model, ..., seed, status`` (``done`` | ``diverged`` |
``interrupted`` | ``failed``), the recipe's results, ``wall_s`` and ``config_hash``; ``error`` when
not done; an interrupted run also ``step`` (reached) and ``checkpoint_step`` (where it resumes).
Accuracies are fractions in [0, 1]. :func:`config_hash` covers exactly the config keys that
change what a run computes; :func:`config_diff` names them when two configs differ.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterator

from omegaconf import DictConfig, OmegaConf


__all__ = ["CONFIG_FILE", "ERROR_FILE", "FINISHED", "RESULT_FILE", "STARTED_FILE", "config_diff", "config_hash",
           "digest", "flatten", "optimizer_name", "protocol", "visible_files"]

RESULT_FILE = "result.json"
CONFIG_FILE = "config.yaml"
STARTED_FILE = "run.json"
ERROR_FILE = "error.log"
"""The traceback of a run that failed."""
FINISHED = ("done", "diverged")
"""Statuses of finished work: never modified or deleted by a later launch."""

NOT_PROTOCOL = ("hydra", "paths", "logger", "callbacks", "sweep", "print_config", "threads", "matmul_precision",
                "resume", "run_name", "sweep_dir")
"""Top-level config keys that do not change what a run computes: where it writes, how it reports."""
NOT_PROTOCOL_SUBKEYS = ("trainer.enable_progress_bar", "dataset.num_workers", "dataset.download", "task.always_run",
                        "task.export_merged", "task.keep_checkpoints", "trainer.devices", "trainer.num_nodes",
                        "trainer.strategy")
"""Keys inside protocol sections that do not change what a run computes. The execution keys
``trainer.devices``, ``trainer.num_nodes`` and ``trainer.strategy`` keep the global batch and the
batch order (DDP splits them), so a run is the same run whichever of them it used (finished runs
recorded before these keys existed included)."""


def optimizer_name(target: str) -> str:
    """The optimizer's name in run paths and records: ``torch.optim.SGD`` -> ``sgd``."""
    return str(target).rsplit(".", 1)[-1].lower()


def protocol(cfg: DictConfig | dict, sections: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The resolved config without the keys that do not change the computation, flattened to
    dotted keys (``{"optimizer.lr": 0.01, ...}``).

    Args:
        cfg: A job config (or its container).
        sections: The top-level sections that define the run (the recipe's); None: all but
            :data:`NOT_PROTOCOL`.
    """
    keys = [k for k in cfg.keys() if (sections is None or k in sections) and k not in NOT_PROTOCOL]
    # a DictConfig node resolved; a plain container's value as it is
    flat = flatten({k: OmegaConf.to_container(cfg[k], resolve=True) if isinstance(cfg[k], DictConfig) else cfg[k]
                    for k in keys})
    return {k: v for k, v in flat.items() if k not in NOT_PROTOCOL_SUBKEYS}


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts become dotted keys: ``{"params": {"mha": 3}}`` -> ``{"params.mha": 3}``."""
    if not isinstance(tree, dict):
        return {prefix[:-1]: tree}
    return {k: v for key, value in tree.items() for k, v in flatten(value, f"{prefix}{key}.").items()}


def digest(flat: dict[str, Any]) -> str:
    """Short hash of a :func:`protocol`."""
    return hashlib.sha1(json.dumps(flat, sort_keys=True, default=str).encode()).hexdigest()[:12]


def config_hash(cfg: DictConfig | dict, sections: tuple[str, ...] | None = None) -> str:
    """Short hash of everything in the resolved config that changes what a run computes."""
    return digest(protocol(cfg, sections))


def config_diff(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(key, old value, new value)`` for every protocol key that differs (missing: ``None``)."""
    return [(k, old.get(k), new.get(k)) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def visible_files(root: str | Path, pattern: str) -> Iterator[Path]:
    """Every file matching ``pattern`` under ``root``, unsorted, outside hidden folders: the
    ``.replaced-*`` archives, ``.sweeps`` journals and ``.submitit`` folders hold no current run."""
    root = Path(root)
    for path in root.rglob(pattern):
        if not any(part.startswith(".") for part in path.relative_to(root).parts[:-1]):
            yield path

"""Run records: one ``result.json`` per run directory, written atomically, read by sweeps and reports.

A record holds at least ``task, dataset, model, component, lr, seed, status`` (``done`` |
``diverged`` | ``failed``), ``best_val_acc, test_acc, best_step, steps, wall_s,
trainable_params`` and ``error`` when failed. Accuracies are fractions in [0, 1].
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from omegaconf import DictConfig, OmegaConf

RESULT_FILE = "result.json"
STATUSES = ("done", "diverged", "failed")
# Config keys that do not change what a run computes: where it writes, how it reports.
_NOT_PROTOCOL = ("hydra", "paths", "logger", "sweep", "print_config", "threads", "matmul_precision")


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yields a unique temporary path beside ``path`` (same suffix); renames it over ``path`` on
    success, removes it on failure. Readers never see a partial file.

    Example:
        >>> with atomic_path("out/rates.npy") as tmp:  # doctest: +SKIP
        ...     np.save(tmp, rates)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}{path.suffix}")
    try:
        yield tmp
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Writes JSON atomically (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        json.dump(obj, f, indent=2, default=str)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())


def write_csv_atomic(path: str | Path, rows: list[dict], columns: Iterable[str]) -> None:
    """Writes ``rows`` as CSV atomically with the given columns (None and NaN as empty cells)."""
    columns = list(columns)
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(row.get(k)) for k in columns})


def _cell(value: Any) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return value


def group_values(path: str | Path | None, column: str, keep=lambda row: True) -> dict[str, list[float]]:
    """Values of ``column`` per ``group`` from a per-(group, block) CSV such as ``plasticity.csv``
    or ``bounds.csv``, for the rows ``keep`` accepts; empty cells and a missing file give nothing."""
    by: dict[str, list[float]] = {}
    if path is not None and Path(path).is_file():
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                if row.get(column) not in (None, "") and keep(row):
                    by.setdefault(row["group"], []).append(float(row[column]))
    return by


def read_json(path: str | Path) -> dict | None:
    """The JSON object in ``path``, or ``None`` when the file is missing or unreadable."""
    try:
        return json.loads(Path(path).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def read_result(run_dir: str | Path) -> dict | None:
    """The run's record, or ``None`` when it has none (or an unreadable one)."""
    return read_json(Path(run_dir) / RESULT_FILE)


def config_hash(cfg: DictConfig) -> str:
    """Short hash of everything in the resolved config that changes what a run computes."""
    container = OmegaConf.to_container(cfg, resolve=True)
    for key in _NOT_PROTOCOL:
        container.pop(key, None)
    container.get("trainer", {}).pop("enable_progress_bar", None)
    blob = json.dumps(container, sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def identity(cfg: DictConfig) -> dict[str, Any]:
    """The fields that name a run: task, dataset, model, component, lr, seed.

    Analysis tasks (``task.analysis``) train nothing: they have no component or lr.
    """
    if cfg.task.name == "report":
        return {"task": "report"}
    names = {"task": cfg.task.name, "dataset": cfg.dataset.name, "model": cfg.model.name}
    if not cfg.task.get("analysis", False):
        lr = cfg.optimizer.lr  # kept as given when not a number: check() reports it
        names.update(component=cfg.component.name, lr=float(lr) if isinstance(lr, (int, float)) else lr)
    return {**names, "seed": int(cfg.seed)}


def find_results(root: str | Path) -> list[tuple[Path, dict]]:
    """Every (run directory, record) under ``root``, sorted by path."""
    found = []
    for path in sorted(Path(root).rglob(RESULT_FILE)):
        record = read_result(path.parent)
        if record is not None:
            found.append((path.parent, record))
    return found

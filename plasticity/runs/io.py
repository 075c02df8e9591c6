"""Atomic file writing: readers never see a partial JSON, CSV, array, weights file or figure.

Every file the framework writes goes through :func:`atomic_path` (a unique temporary file beside
the target, renamed over it on success), so an interrupted or killed process leaves either the
old file or the new one, never half of one.
"""

from __future__ import annotations

import csv
import json
import math
import os
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

__all__ = ["atomic_path", "blank", "read_csv", "read_json", "read_record", "write_csv_atomic", "write_json_atomic",
           "write_safetensors_atomic", "write_text_atomic"]


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
    """Writes JSON atomically and durably (:func:`write_text_atomic`)."""
    write_text_atomic(path, json.dumps(obj, indent=2, default=str) + "\n")


def write_text_atomic(path: str | Path, text: str) -> None:
    """Writes ``text`` atomically and durably (fsync before the rename)."""
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def write_safetensors_atomic(path: str | Path, tensors: dict, metadata: dict[str, str] | None = None) -> None:
    """Writes tensors as safetensors atomically: weights files, merged LoRA weights, the probe.

    Each tensor is detached and copied to the CPU first; ``contiguous`` because safetensors
    stores raw buffers and refuses strided views (a transposed weight).
    """
    from safetensors.torch import save_file

    with atomic_path(path) as tmp:
        save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(tmp), metadata=metadata)


def write_csv_atomic(path: str | Path, rows: list[dict], columns: Iterable[str]) -> None:
    """Writes ``rows`` as CSV atomically with the given columns (None and NaN as empty cells)."""
    columns = list(columns)
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({k: blank(row.get(k)) for k in columns} for row in rows)


def read_csv(path: str | Path) -> list[dict[str, str]]:
    """A CSV file's rows as strings (a file :func:`write_csv_atomic` wrote); ``[]`` when it is missing."""
    path = Path(path)
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def blank(value: Any) -> Any:
    """A table cell's value: None and NaN as ``""``, the rest as it is."""
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else value


def read_record(path: str | Path) -> tuple[dict | None, str | None]:
    """The JSON object in ``path`` and None, or None and why it cannot be read."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as err:
        return None, f"unreadable ({type(err).__name__}: {err})"
    if not text.strip():
        return None, "empty file (interrupted write?)"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        return None, f"truncated or invalid JSON ({err})"
    if not isinstance(value, dict):
        return None, f"not a JSON object but a {type(value).__name__}"
    return value, None


def read_json(path: str | Path) -> dict | None:
    """The JSON object in ``path``, or ``None`` when the file is missing or unreadable (:func:`read_record`)."""
    return read_record(path)[0]

"""What the framework prints: the resolved config as a tree and a table of run records."""

from __future__ import annotations

from typing import Iterable

from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table
from rich.tree import Tree

ORDER = ("task", "dataset", "model", "component", "optimizer", "trainer", "logger", "paths")
# (column title, record key, formatter)
COLUMNS = (
    ("task", "task", str),
    ("dataset", "dataset", str),
    ("model", "model", str),
    ("component", "component", str),
    ("lr", "lr", lambda v: f"{v:g}"),
    ("seed", "seed", str),
    ("status", "status", str),
    ("trainable params", "trainable_params", lambda v: f"{v:,}"),
    ("best val acc %", "best_val_acc", lambda v: f"{100 * v:.2f}"),
    ("test acc %", "test_acc", lambda v: f"{100 * v:.2f}"),
    ("wall s", "wall_s", lambda v: f"{v:.0f}"),
)
_NUMERIC = {"lr", "seed", "trainable_params", "best_val_acc", "test_acc", "wall_s"}


def console() -> Console:
    """A console that does not squash tables to 80 columns when output goes to a file or pipe."""
    con = Console()
    return con if con.is_terminal else Console(width=200)


def print_config_tree(cfg: DictConfig, con: Console | None = None) -> None:
    """Prints the resolved config as a rich tree, main groups first."""
    tree = Tree("config", guide_style="dim")
    keys = [k for k in ORDER if k in cfg] + [k for k in cfg if k not in ORDER]
    for key in keys:
        value = cfg[key]
        text = OmegaConf.to_yaml(value, resolve=True) if isinstance(value, DictConfig) else str(value)
        tree.add(f"[bold]{key}[/bold]").add(text.rstrip())
    (con or console()).print(tree)


def _cell(record: dict, key: str, fmt) -> str:
    value = record.get(key)
    if value is None:
        return "-"
    text = fmt(value)
    return text + " (skipped)" if key == "status" and record.get("skipped") else text


def results_table(records: Iterable[dict], title: str = "runs") -> Table:
    """One row per run record; columns whose value is the same in every row go to the title."""
    records = list(records)
    shared, varying = [], []
    for column in COLUMNS:
        values = {_cell(r, column[1], column[2]) for r in records}
        is_shared = len(records) > 1 and len(values) == 1 and column[1] in ("task", "dataset", "model", "lr", "seed")
        (shared if is_shared else varying).append((column, values))
    suffix = ", ".join(f"{c[0]} {next(iter(v))}" for c, v in shared)
    table = Table(title=f"{title}" + (f" ({suffix})" if suffix else ""))
    for (name, key, _), _ in varying:
        table.add_column(name, justify="right" if key in _NUMERIC else "left")
    for r in records:
        table.add_row(*(_cell(r, key, fmt) for (_, key, fmt), _ in varying))
    return table

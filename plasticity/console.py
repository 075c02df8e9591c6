"""What the framework prints: the resolved config as a tree and a table of run records."""

from __future__ import annotations

from typing import Iterable

from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table
from rich.tree import Tree

ORDER = ("task", "dataset", "model", "component", "optimizer", "trainer", "logger", "paths")


def print_config_tree(cfg: DictConfig, console: Console | None = None) -> None:
    """Prints the resolved config as a rich tree, main groups first."""
    tree = Tree("config", guide_style="dim")
    keys = [k for k in ORDER if k in cfg] + [k for k in cfg if k not in ORDER]
    for key in keys:
        value = cfg[key]
        text = OmegaConf.to_yaml(value, resolve=True) if isinstance(value, DictConfig) else str(value)
        tree.add(f"[bold]{key}[/bold]").add(text.rstrip())
    (console or Console()).print(tree)


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def results_table(records: Iterable[dict], title: str = "runs") -> Table:
    """A table with one row per run record: what trained, its status and accuracies (in %)."""
    table = Table(title=title)
    for column in ("task", "dataset", "component", "lr", "seed", "status", "trainable params",
                   "best val acc %", "test acc %", "wall s"):
        table.add_column(column, justify="right" if column[0] in "lstbw" and column != "status" else "left")
    for r in records:
        params = r.get("trainable_params")
        table.add_row(
            str(r.get("task")), str(r.get("dataset")), str(r.get("component")), f"{r.get('lr'):g}",
            str(r.get("seed")), r.get("status", "?") + (" (skipped)" if r.get("skipped") else ""),
            "-" if params is None else f"{params:,}", _pct(r.get("best_val_acc")),
            _pct(r.get("test_acc")), f"{r.get('wall_s', 0):.0f}",
        )
    return table

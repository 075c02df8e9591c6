"""What the framework prints: the config tree, problems, one line per finished run, sweep tables.

Light on purpose (rich and omegaconf only): the launch's callbacks import it in every launch.
"""

from __future__ import annotations

from typing import Iterable

from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

ORDER = ("task", "dataset", "model", "component", "optimizer", "trainer", "logger", "paths")
_PERCENT = lambda v: f"{100 * v:.2f}"  # noqa: E731
# (column title, record key, formatter)
COLUMNS = (*((key, key, str) for key in ("task", "dataset", "model", "component")), ("lr", "lr", lambda v: f"{v:g}"),
           ("seed", "seed", str), ("status", "status", str), ("trainable params", "trainable_params", "{:,}".format),
           ("best val acc %", "best_val_acc", _PERCENT), ("test acc %", "test_acc", _PERCENT),
           ("wall s", "wall_s", "{:.0f}".format))
_NUMERIC = {"lr", "seed", "trainable_params", "best_val_acc", "test_acc", "wall_s"}
_SHAREABLE = ("task", "dataset", "model", "lr", "seed")  # a column with one value in every row goes to the title


def console() -> Console:
    """A console that does not squash tables to 80 columns when output goes to a file or pipe."""
    con = Console()
    return con if con.is_terminal else Console(width=200)


def print_config_tree(cfg: DictConfig, sections: tuple[str, ...] | None = None, con: Console | None = None,
                      title: str = "config") -> None:
    """Prints the resolved config as a rich tree, main groups first.

    Args:
        cfg: The job config.
        sections: Only these top-level keys (the recipe's; None: all but ``hydra``).
        con: Where to print.
        title: The tree's root label.
    """
    tree = Tree(title, guide_style="dim")
    keep = [k for k in cfg if k != "hydra" and (sections is None or k in sections)]
    for key in sorted(keep, key=lambda k: ORDER.index(k) if k in ORDER else len(ORDER)):  # main groups first
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
    cells = {column: [_cell(r, column[1], column[2]) for r in records] for column in COLUMNS}
    shared = [c for c, values in cells.items() if len(records) > 1 and len(set(values)) == 1 and c[1] in _SHAREABLE]
    suffix = ", ".join(f"{column[0]} {cells[column][0]}" for column in shared)
    table = Table(title=f"{title}" + (f" ({suffix})" if suffix else ""))
    varying = [column for column in COLUMNS if column not in shared]
    for name, key, _ in varying:
        table.add_column(name, justify="right" if key in _NUMERIC else "left")
    for row in zip(*(cells[column] for column in varying)):
        table.add_row(*row)
    return table


def print_problems(problems: list[str], header: str = "", con: Console | None = None) -> None:
    """Prints every problem of a config (to stderr), then that nothing was run or written."""
    con = con or Console(stderr=True, width=None if Console(stderr=True).is_terminal else 200)
    count = f"{len(problems)} problem{'s' if len(problems) > 1 else ''}"
    con.print(f"[bold red]error[/bold red]: {header or 'the config has'} {count}; nothing was run or written:",
              highlight=False)
    for problem in problems:
        con.print(f"  - {problem}", highlight=False, soft_wrap=True, markup=False)


def run_line(record: dict) -> str:
    """One line for a finished run: status, best val acc, test acc, best step, wall time, directory."""
    status = record.get("status", "?")
    color = {"done": "green", "diverged": "yellow", "interrupted": "magenta", "failed": "red"}.get(status, "white")
    parts = [f"[bold {color}]{status}[/bold {color}]"]
    shown = (("best_val_acc", "best val {:.2%}"), ("test_acc", "test {:.2%}"), ("best_step", "best step {}"),
             ("wall_s", "wall {:.0f} s"))
    parts += [text.format(record[key]) for key, text in shown if isinstance(record.get(key), (int, float))]
    if status != "done" and record.get("error"):
        parts.append(str(record["error"]).splitlines()[0][:200])
    return parts[0] + "  " + escape("  ".join(parts[1:] + [str(record.get("run_dir", ""))]))


def job_overrides(overrides: list[str], varying: list[str] | None = None) -> str:
    """A sweep job's overrides as its lines show them: only the keys that vary across the sweep
    (``varying``; None: all)."""
    keep = [o for o in overrides if varying is None or o.split("=", 1)[0] in varying]
    return " ".join(keep) or "(no varying override)"

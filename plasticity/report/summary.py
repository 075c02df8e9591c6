"""``python -m plasticity.summary``: finetuning accuracy next to plasticity and its bounds, per group.

Reads what the runs under ``--outputs`` wrote for one dataset and model: the finetuning records
(per component, the run with the best validation accuracy), ``plasticity.json``/``.csv``
(mean P(f) over blocks) and ``bounds.csv`` (mean bound over blocks), and prints one table.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from rich.table import Table

from plasticity.components import COMPONENTS, GROUPS
from plasticity.console import console
from plasticity.results import find_results, group_values, read_json


def best_finetune(root: Path, dataset: str, model: str) -> dict[str, dict]:
    """Per component, the done finetuning record with the best validation accuracy."""
    best: dict[str, dict] = {}
    for _, r in find_results(root / "finetune" / dataset / model):
        if r.get("status") == "done" and r.get("best_val_acc", -1) > best.get(r["component"], {}).get("best_val_acc", -1):
            best[r["component"]] = r
    return best


BOUND_OF = {"ln1": "prop1", "ln2": "prop1", "mha": "prop3_rms", "fc1": "prop2", "fc2": "prop2"}
"""The bound shown for each group: its proposition (MHA: Prop. 3 at the RMS token radius)."""


def group_means(path: Path | None, column: str, keep=lambda row: True) -> dict[str, float]:
    """Mean of ``column`` over blocks per group, from a per-(group, block) CSV (empty if none)."""
    return {g: float(np.mean(v)) for g, v in group_values(path, column, keep).items()}


def latest(root: Path, name: str) -> Path | None:
    found = sorted(root.rglob(name), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def summary_table(root: Path, dataset: str, model: str) -> Table:
    runs = best_finetune(root, dataset, model)
    plasticity_csv = latest(root / "plasticity" / dataset / model, "plasticity.csv")
    bounds_csv = latest(root / "bounds" / dataset / model, "bounds.csv")
    plasticity = group_means(plasticity_csv, "mean")
    bounds = group_means(bounds_csv, "value", lambda row: row["bound"] == BOUND_OF.get(row["group"]))
    p_rank = {g: i + 1 for i, g in enumerate(sorted(plasticity, key=lambda g: -plasticity[g]))}
    acc = {c: r["test_acc"] for c, r in runs.items() if c in GROUPS}
    a_rank = {g: i + 1 for i, g in enumerate(sorted(acc, key=lambda g: -acc[g]))}
    table = Table(title=f"{dataset} / {model}: finetuning and plasticity per group")
    for column in ("component", "trainable params", "best val acc %", "test acc %", "acc rank",
                   "plasticity P(f)", "P rank", "upper bound"):
        table.add_column(column, justify="left" if column == "component" else "right")
    fmt = lambda v, f: "-" if v is None else f.format(v)  # noqa: E731
    for c in COMPONENTS:
        r = runs.get(c, {})
        if not r and c not in plasticity:
            continue
        table.add_row(c, fmt(r.get("trainable_params"), "{:,}"), fmt(r.get("best_val_acc") and 100 * r["best_val_acc"], "{:.2f}"),
                      fmt(r.get("test_acc") and 100 * r["test_acc"], "{:.2f}"), fmt(a_rank.get(c), "{}"),
                      fmt(plasticity.get(c), "{:.3f}"), fmt(p_rank.get(c), "{}"), fmt(bounds.get(c), "{:.3g}"))
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--outputs", default="outputs")
    parser.add_argument("--dataset", default="fashion_mnist_c/motion_blur")
    parser.add_argument("--model", default="vit_micro_patch7_28")
    args = parser.parse_args()
    con = console()
    con.print(summary_table(Path(args.outputs), args.dataset, args.model))
    ranking_file = latest(Path(args.outputs) / "plasticity" / args.dataset / args.model, "plasticity.json")
    if ranking_file:
        order = read_json(ranking_file)["ranking"]
        con.print("plasticity ranking: " + " > ".join(f"{r['group']} ({r['mean']:.3f})" for r in order))
    con.print(f"runs, metrics and figures: {Path(args.outputs).resolve()}")


if __name__ == "__main__":
    main()

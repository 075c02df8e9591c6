"""``python -m plasticity.report.summary``: the quickstart table, finetuning accuracy next to plasticity and its bound.

One table per target: every (dataset, model) with finetuning or linear-probe records under
``--outputs`` (or only ``--dataset`` / ``--model``). Per target, one row per component group (then
any other configuration of the sweep: combinations, LoRA, auto, the linear probe of ``task=linear_probe``):

- trainable params (of the first seed at the chosen lr), best val acc and test acc: the report's "best run" rule
  (:func:`plasticity.report.tables.best_per_component`, Table 6 with ``select=val``): the learning
  rate with the best *mean* validation accuracy over seeds (ties: the smallest), and the means over
  seeds at that rate. Not the single run with the best validation accuracy.
- acc rank: by that test accuracy, over the five groups.
- plasticity P(f) and P rank: mean over blocks from the newest ``plasticity.csv``.
- upper bound: mean over blocks of the group's bound (:data:`plasticity.components.BOUND_OF`)
  from the newest ``bounds.csv``.

After the table: the plasticity ranking of the newest ``plasticity.json`` and, from the newest
``plasticity_during_training.csv`` of a pretraining run of the model (``<outputs>/pretrain``), the
step at which the measured ranking first matches the paper's MHA > FC1 > FC2 > LN2 > LN1 (if any)
and the rank swaps left at the end (:mod:`plasticity.report.pretraining`).

Records are read through :func:`plasticity.report.collect.collect`: files that cannot be used are
listed after the table, never fatal.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

from rich.table import Table

from plasticity.components import BOUND_OF, COMPONENTS, GROUPS
from plasticity.report.collect import Problem, collect, group_values, read_during_training
from plasticity.report.pretraining import ranking_rows, sentence
from plasticity.report.tables import best_per_component, block_means, done_cells
from plasticity.runs.checkpoints import DURING_TRAINING
from plasticity.runs.io import read_json
from plasticity.runs.record import visible_files

RULE = ("lr chosen by the best mean validation accuracy over seeds (as the report's Table 6, select=val); "
        "accuracies are means over the seeds at that lr")
COLUMNS = ("component", "trainable params", "lr", "seeds", "best val acc %", "test acc %", "acc rank",
           "plasticity P(f)", "P rank", "upper bound")


def group_means(path: Path | None, column: str, keep: Callable[[dict], bool] = lambda row: True,
                problems: list[Problem] | None = None) -> dict[str, float]:
    """Mean of ``column`` over blocks per group, from a per-(group, block) CSV (empty if none)."""
    return block_means([group_values(path, column, keep, problems)])


def latest(root: Path, name: str, within: str | None = None) -> Path | None:
    """The newest file called ``name`` under ``root`` outside hidden folders (and, with ``within``,
    below a folder of that name, e.g. a model's), or None."""
    found = [p for p in visible_files(root, name) if within is None or within in p.relative_to(root).parts[:-1]]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def ranks(values: dict[str, float]) -> dict[str, int]:
    """1 for the largest value, 2 for the next, ..."""
    return {g: i + 1 for i, g in enumerate(sorted(values, key=lambda g: -values[g]))}


def targets(root: Path, dataset: str | None = None, model: str | None = None) -> list[tuple[str, str]]:
    """Every (dataset, model) with finetuning or linear-probe records under ``<root>/finetune`` (and the
    probes beside it), sorted, keeping only ``dataset`` and ``model`` when given."""
    sweep = collect(Path(root) / "finetune")
    found = {(r["dataset"], r["model"]) for _, r in sweep.finetune + sweep.probe}
    return sorted((d, m) for d, m in found if dataset in (None, d) and model in (None, m))


def _pct(value: float | None) -> float | None:
    return None if value is None else 100.0 * value


def summary_table(root: Path, dataset: str, model: str, problems: list[Problem] | None = None) -> Table:
    """The quickstart table of ``dataset``/``model`` under ``root`` (see the module docstring).

    Args:
        root: The outputs folder (``<root>/finetune``, ``<root>/plasticity``, ``<root>/bounds``).
        dataset: Dataset name as in the run paths.
        model: Model name as in the run paths.
        problems: Receives ``(path, reason)`` of every file that could not be used, when given.
    """
    problems = [] if problems is None else problems
    root = Path(root)
    sweep = collect(root / "finetune" / dataset / model)  # with the probes of <root>/linear_probe/<dataset>/<model>
    problems.extend(sweep.problems)
    runs = [(d, r) for d, r in sweep.finetune + sweep.probe if r["dataset"] == dataset]
    best = best_per_component(done_cells(runs), dataset, "val")  # per component, the report's best-run summary
    plasticity = group_means(latest(root / "plasticity" / dataset / model, "plasticity.csv"), "mean", problems=problems)
    bounds = group_means(latest(root / "bounds" / dataset / model, "bounds.csv"), "value",
                         lambda row: row["bound"] == BOUND_OF.get(row["group"]), problems)
    a_rank = ranks({c: b["test_acc"] for c, b in best.items() if c in GROUPS})
    p_rank = ranks(plasticity)
    table = Table(title=f"{dataset} / {model}: finetuning and plasticity per group", caption=RULE)
    for column in COLUMNS:
        table.add_column(column, justify="left" if column == "component" else "right")
    extra = [c for c in best if c not in COMPONENTS]  # combinations, LoRA, auto, the probe: after, in table order
    for c in [c for c in COMPONENTS if c in best or c in plasticity] + extra:
        b = best.get(c, {})
        params = b["records"][0].get("trainable_params") if b else None
        cells = ((params, "{:,}"), (b.get("lr"), "{:g}"), (b.get("n_seeds"), "{}"),
                 (_pct(b.get("best_val_acc")), "{:.2f}"), (_pct(b.get("test_acc")), "{:.2f}"), (a_rank.get(c), "{}"),
                 (plasticity.get(c), "{:.3f}"), (p_rank.get(c), "{}"), (bounds.get(c), "{:.3g}"))
        table.add_row(c, *("-" if value is None else spec.format(value) for value, spec in cells))
    return table


def ranking_line(root: Path, dataset: str, model: str) -> str | None:
    """The plasticity ranking of the newest ``plasticity.json``, or None when there is none usable."""
    path = latest(root / "plasticity" / dataset / model, "plasticity.json")
    order = (read_json(path) or {}).get("ranking") if path else None
    try:
        return "plasticity ranking: " + " > ".join(f"{r['group']} ({r['mean']:.3f})" for r in order)
    except (TypeError, KeyError, ValueError):
        return None


def pretraining_line(root: Path, model: str, problems: list[Problem] | None = None) -> str | None:
    """Where the paper's ranking first appears during the newest pretraining of ``model`` with
    plasticity measured (``<root>/pretrain/**/<model>/**/plasticity_during_training.csv``), and the
    swaps left at its end; None when there is no such file with a usable row."""
    path = latest(root / "pretrain", DURING_TRAINING, within=model)
    if path is None:
        return None
    rows = ranking_rows(read_during_training(path, problems))
    return f"plasticity through pretraining ({path.parent}): {sentence(rows)}" if rows else None


def main(argv: list[str] | None = None) -> None:
    """``python -m plasticity.report.summary --outputs outputs [--dataset D] [--model M]``: a table per target."""
    from plasticity.console import console

    parser = argparse.ArgumentParser(prog="python -m plasticity.report.summary", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--outputs", type=Path, default=Path("outputs"))
    parser.add_argument("--dataset", default=None, help="only this target (default: every one with records)")
    parser.add_argument("--model", default=None, help="only this model (default: every one with records)")
    args = parser.parse_args(argv)
    con, problems = console(), []
    found = targets(args.outputs, args.dataset, args.model)
    if not found:
        con.print(f"no finetuning or linear-probe records under {args.outputs / 'finetune'}", highlight=False)
    for dataset, model in found:
        skipped: list[Problem] = []  # the problems of the whole sweep: listed once, below
        con.print(summary_table(args.outputs, dataset, model, skipped))
        problems += [p for p in skipped if p not in problems]
        if line := ranking_line(args.outputs, dataset, model):
            con.print(line)
    for model in sorted({m for _, m in found}):
        if line := pretraining_line(args.outputs, model, problems):
            con.print(line)
    for path, reason in problems:
        con.print(f"[yellow]skipped {path}: {reason}[/yellow]")
    con.print(f"runs, metrics and figures: {args.outputs.resolve()}")


if __name__ == "__main__":
    main()

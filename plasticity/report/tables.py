"""``python -m plasticity.report <sweep_dir>``: the paper's Section 5.2 tables and figures from a sweep.

Reads every finetuning ``result.json`` under the sweep directory and writes into ``<sweep>/report/``:

- ``runs.csv``: every record, flattened, whatever its status.
- ``table6.csv`` / ``table6.md``: per dataset and group, the learning rate chosen by mean validation
  (``select="val"``) or test (``select="test"``, the paper's choice) accuracy over seeds, and the
  mean and sample std of the test accuracy (%) over seeds at that rate, plus an ``average`` row
  (Table 6).
- ``relative_gain.csv`` / ``.png``: improvement (%) over the linear probing (``head``) accuracy
  (Fig. 2, right).
- ``table1.csv``: mean decrease from MHA to each other group and its Wilcoxon signed-rank p-value
  over datasets (Table 1).
- ``accuracy.png`` (average accuracy with pooled standard error, Fig. 17), ``spread.png``
  (accuracy over learning rates and seeds, Figs. 4 left and 18), ``curves_<dataset>.png`` (``/`` in the name becomes ``-``)
  (gradient norm and validation loss at the chosen learning rate, Fig. 4 middle and right).
- ``plasticity_vs_accuracy.csv``: Spearman correlation between per-group plasticity and accuracy
  where plasticity analysis runs exist.
- ``report.md``: all of the above, plus every run that is not ``done`` and every missing run.

Only ``done`` runs enter the numbers; the others are listed, never silently dropped.
"""

from __future__ import annotations

import argparse
import csv
import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

import numpy as np
from matplotlib.figure import Figure
from scipy import stats

from plasticity.figures import COLORS, LABELS, save
from plasticity.results import atomic_path, find_results, group_values, write_csv_atomic

GROUP_ORDER = ("ln1", "mha", "ln2", "fc1", "fc2", "all", "head")
"""Column order of the tables: the five component groups, full finetuning, linear probing."""
PLASTIC_GROUPS = ("ln1", "mha", "ln2", "fc1", "fc2")
TABLE1_GROUPS = ("ln1", "ln2", "fc1", "fc2", "all")
BASELINE = "head"
AVERAGE = "average"
TABLE6_COLUMNS = ("dataset", "group", "lr", "mean", "std", "n_seeds")

Cells = dict[tuple[str, str, float], list[dict]]
"""Done records per (dataset, group, lr)."""


# ----------------------------------------------------------------------------------------- I/O


def flatten(record: dict, prefix: str = "") -> dict[str, Any]:
    """Nested dicts become dotted keys: ``{"params": {"mha": 3}}`` -> ``{"params.mha": 3}``."""
    flat: dict[str, Any] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def write_text(path: Path, text: str) -> None:
    """Writes ``text`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def read_metric(run_dir: Path, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of ``column`` in the run's ``metrics.csv`` (and earlier ``metrics.part*.csv``
    of resumed runs), skipping the rows where it was not logged. Empty when absent."""
    files = sorted(run_dir.glob("metrics.part*.csv")) + [run_dir / "metrics.csv"]
    steps, values = [], []
    for path in files:
        if not path.is_file():
            continue
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                value, step = row.get(column), row.get("step")
                if value not in (None, "") and step not in (None, ""):
                    steps.append(float(step))
                    values.append(float(value))
    return np.asarray(steps), np.asarray(values)


# ------------------------------------------------------------------------------------ records


def ordered_groups(groups: Iterable[str]) -> list[str]:
    """Groups in table order (known ones first, unknown ones after, alphabetically)."""
    groups = set(groups)
    return [g for g in GROUP_ORDER if g in groups] + sorted(groups - set(GROUP_ORDER))


def done_cells(runs: list[tuple[Path, dict]]) -> Cells:
    """Done finetuning records grouped per (dataset, group, lr), sorted by seed."""
    cells: Cells = defaultdict(list)
    for run_dir, r in runs:
        if r.get("status") == "done":
            cells[(r["dataset"], r["component"], float(r["lr"]))].append({**r, "run_dir": run_dir})
    for records in cells.values():
        records.sort(key=lambda r: r.get("seed", 0))
    return dict(cells)


def _mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample std (ddof=1; 0 for a single value)."""
    arr = np.asarray(values, dtype=float)
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else 0.0


def choose_lr(cells: Cells, dataset: str, group: str, select: str) -> float:
    """The learning rate with the best mean validation (``val``) or test (``test``) accuracy."""
    key = {"val": "best_val_acc", "test": "test_acc"}[select]
    lrs = sorted(lr for d, g, lr in cells if (d, g) == (dataset, group))
    score = {lr: np.mean([r[key] for r in cells[(dataset, group, lr)]]) for lr in lrs}
    return max(lrs, key=lambda lr: score[lr])  # ties: the smallest rate


def table6(cells: Cells, select: str = "val") -> list[dict]:
    """Per dataset and group: chosen lr, mean and std of the test accuracy (%) over seeds, and the
    test accuracies themselves (``accs``). Then one ``average`` row per group (mean of the means)."""
    rows = []
    order = {g: i for i, g in enumerate(ordered_groups(g for _, g, _ in cells))}
    for dataset, group in sorted({(d, g) for d, g, _ in cells}, key=lambda dg: (dg[0], order[dg[1]])):
        lr = choose_lr(cells, dataset, group, select)
        accs = [100.0 * r["test_acc"] for r in cells[(dataset, group, lr)]]
        mean, std = _mean_std(accs)
        rows.append({"dataset": dataset, "group": group, "lr": lr, "mean": mean, "std": std,
                     "n_seeds": len(accs), "accs": accs})
    for group in ordered_groups(r["group"] for r in rows):
        means = [r["mean"] for r in rows if r["group"] == group]
        rows.append({"dataset": AVERAGE, "group": group, "lr": None, "mean": float(np.mean(means)),
                     "std": float("nan"), "n_seeds": None, "accs": []})
    return rows


def means_by(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per-dataset table-6 means: ``{group: {dataset: mean}}`` (without the average rows)."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for r in rows:
        if r["dataset"] != AVERAGE:
            out[r["group"]][r["dataset"]] = r["mean"]
    return dict(out)


def relative_gain(rows: list[dict]) -> list[dict]:
    """100 * (acc_g - acc_head) / acc_head per dataset, and per group an ``average`` row over
    datasets. Empty without linear probing (``head``) runs."""
    means = means_by(rows)
    base = means.get(BASELINE)
    if not base:
        return []
    out = []
    for group in ordered_groups(g for g in means if g != BASELINE):
        gains = {d: 100.0 * (acc - base[d]) / base[d] for d, acc in means[group].items() if d in base}
        out += [{"dataset": d, "group": group, "gain_pct": v} for d, v in sorted(gains.items())]
        if gains:
            out.append({"dataset": AVERAGE, "group": group, "gain_pct": float(np.mean(list(gains.values())))})
    return out


def wilcoxon_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided Wilcoxon signed-rank p-value of paired samples; NaN when fewer than 2 pairs or
    all differences are zero."""
    if len(a) < 2 or np.all(a - b == 0):
        return float("nan")
    return float(stats.wilcoxon(a, b).pvalue)


def table1(rows: list[dict]) -> list[dict]:
    """Mean decrease (points) from MHA to each other group over the datasets both have, its
    Wilcoxon signed-rank p-value and whether p < 0.05 (Table 1). Empty without MHA runs."""
    means = means_by(rows)
    mha = means.get("mha")
    if not mha:
        return []
    out = []
    for group in (g for g in TABLE1_GROUPS if g in means):
        datasets = sorted(set(mha) & set(means[group]))
        a = np.array([mha[d] for d in datasets])
        b = np.array([means[group][d] for d in datasets])
        p = wilcoxon_p(a, b)
        out.append({"group": group, "mean_decrease": float(np.mean(a - b)), "p_value": p,
                    "significant": bool(p < 0.05), "n_datasets": len(datasets)})
    return out


def pooled_se(rows: list[dict], group: str) -> float:
    """Standard error of the average accuracy of ``group`` over datasets, pooled over seeds:
    sqrt(sum_d std_d^2 / n_d) / n_datasets (Fig. 17)."""
    per = [r for r in rows if r["group"] == group and r["dataset"] != AVERAGE]
    return float(np.sqrt(sum(r["std"] ** 2 / r["n_seeds"] for r in per)) / len(per))


def missing_runs(runs: list[tuple[Path, dict]]) -> list[dict]:
    """Every (dataset, group, lr) cell with fewer done seeds than the sweep has: the expected lrs of
    a dataset are those any of its groups ran, the expected seeds those any run used."""
    seeds = {r.get("seed") for _, r in runs}
    lrs = defaultdict(set)
    groups = defaultdict(set)
    done = defaultdict(set)
    for _, r in runs:
        lrs[r["dataset"]].add(float(r["lr"]))
        groups[r["dataset"]].add(r["component"])
        if r.get("status") == "done":
            done[(r["dataset"], r["component"], float(r["lr"]))].add(r.get("seed"))
    out = []
    for dataset in sorted(lrs):
        for group in ordered_groups(groups[dataset]):
            for lr in sorted(lrs[dataset]):
                have = done[(dataset, group, lr)]
                if have != seeds:
                    out.append({"dataset": dataset, "group": group, "lr": lr, "n_seeds": len(have),
                                "missing_seeds": sorted(seeds - have, key=str)})
    return out


def group_plasticity(runs: list[tuple[Path, dict]], dataset: str) -> dict[str, float]:
    """Mean plasticity over blocks per group from the dataset's analysis runs' ``plasticity.csv``."""
    values: dict[str, list[float]] = defaultdict(list)
    for run_dir, r in runs:
        if r.get("dataset") == dataset:
            for group, means in group_values(run_dir / "plasticity.csv", "mean").items():
                values[group] += means
    return {g: float(np.mean(v)) for g, v in values.items()}


def plasticity_vs_accuracy(rows: list[dict], analysis: list[tuple[Path, dict]]) -> list[dict]:
    """Per dataset with plasticity runs: Spearman rho (and p) between per-group plasticity and
    table-6 accuracy over the groups ln1..fc2 both have."""
    means = means_by(rows)
    out = []
    for dataset in sorted({r.get("dataset") for _, r in analysis}):
        plast = group_plasticity(analysis, dataset)
        groups = [g for g in PLASTIC_GROUPS if g in plast and dataset in means.get(g, {})]
        if len(groups) < 3:
            continue
        res = stats.spearmanr([plast[g] for g in groups], [means[g][dataset] for g in groups])
        out.append({"dataset": dataset, "spearman_rho": float(res.statistic), "p_value": float(res.pvalue),
                    "n_groups": len(groups)})
    return out


# ------------------------------------------------------------------------------------ figures


def plot_relative_gain(gains: list[dict], path: Path) -> None:
    """Bars of the average relative gain over linear probing per group (Fig. 2, right)."""
    avg = [g for g in gains if g["dataset"] == AVERAGE]
    fig = Figure(figsize=(4.5, 3))
    ax = fig.add_subplot()
    ax.bar([LABELS.get(g["group"], g["group"]) for g in avg], [g["gain_pct"] for g in avg],
           color=[COLORS.get(g["group"], "k") for g in avg])
    ax.set_ylabel("relative gain over linear probing (%)")
    ax.grid(True, axis="y", alpha=0.3)
    save(fig, path)


def plot_accuracy(rows: list[dict], path: Path) -> None:
    """Average test accuracy per group with the pooled standard error (Fig. 17)."""
    avg = [r for r in rows if r["dataset"] == AVERAGE]
    fig = Figure(figsize=(4.5, 3))
    ax = fig.add_subplot()
    ax.bar([LABELS.get(r["group"], r["group"]) for r in avg], [r["mean"] for r in avg],
           yerr=[pooled_se(rows, r["group"]) for r in avg], capsize=4,
           color=[COLORS.get(r["group"], "k") for r in avg])
    low = min(r["mean"] for r in avg)
    ax.set_ylim(max(0.0, low - 5.0), None)
    ax.set_ylabel("average top-1 test accuracy (%)")
    ax.tick_params(axis="x", rotation=30)
    ax.grid(True, axis="y", alpha=0.3)
    save(fig, path)


def plot_spread(cells: Cells, path: Path) -> None:
    """Box plot of the test accuracy over all learning rates and seeds per group, one panel per
    dataset (Figs. 4 left and 18)."""
    datasets = sorted({d for d, _, _ in cells})
    ncols = min(4, len(datasets))
    nrows = math.ceil(len(datasets) / ncols)
    fig = Figure(figsize=(3.2 * ncols, 2.8 * nrows))
    for i, dataset in enumerate(datasets):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        groups = ordered_groups(g for d, g, _ in cells if d == dataset)
        data = [[100.0 * r["test_acc"] for (d, g, _), rs in cells.items() if (d, g) == (dataset, group) for r in rs]
                for group in groups]
        ax.boxplot(data, tick_labels=[LABELS.get(g, g) for g in groups])
        ax.set_title(dataset, fontsize=9)
        ax.tick_params(axis="x", labelsize=7, rotation=45)
        ax.grid(True, axis="y", alpha=0.3)
    fig.supylabel("top-1 test accuracy (%)")
    fig.tight_layout()
    save(fig, path)


def plot_curves(cells: Cells, rows: list[dict], dataset: str, path: Path) -> bool:
    """Gradient norm and validation loss against step per group, at the chosen lr and the first
    seed (Fig. 4 middle and right). Runs without the metrics are skipped; False when none had any."""
    fig = Figure(figsize=(9, 3.2))
    ax_grad, ax_loss = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    drawn = False
    for row in (r for r in rows if r["dataset"] == dataset):
        group = row["group"]
        run_dir = Path(cells[(dataset, group, row["lr"])][0]["run_dir"])
        for ax, column in ((ax_grad, f"grad_norm/{group}"), (ax_loss, "val/loss")):
            steps, values = read_metric(run_dir, column)
            if steps.size:
                ax.plot(steps, values, color=COLORS.get(group), label=f"{LABELS.get(group, group)} (lr {row['lr']:g})")
                drawn = True
    if not drawn:
        return False
    ax_grad.set(xlabel="step", ylabel="gradient norm", yscale="log", title=f"{dataset}: gradient norm")
    ax_loss.set(xlabel="step", ylabel="validation loss", title=f"{dataset}: validation loss")
    for ax in (ax_grad, ax_loss):
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    save(fig, path)
    return True


# ----------------------------------------------------------------------------------- markdown


def md_table(header: list[str], body: list[list[str]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body]) + "\n"


def table6_md(rows: list[dict]) -> str:
    """Datasets as rows, groups as columns, cells "mean ± std" (average row: mean only)."""
    groups = ordered_groups(r["group"] for r in rows)
    cell = {(r["dataset"], r["group"]): r for r in rows}
    datasets = sorted({r["dataset"] for r in rows} - {AVERAGE}) + [AVERAGE]
    body = []
    for d in datasets:
        line = [d]
        for g in groups:
            r = cell.get((d, g))
            line.append("" if r is None else f"{r['mean']:.2f}" if d == AVERAGE else f"{r['mean']:.2f} ± {r['std']:.2f}")
        body.append(line)
    return md_table(["dataset"] + [LABELS.get(g, g) for g in groups], body)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def rows_md(rows: list[dict], columns: list[str]) -> str:
    """A markdown table of dict rows."""
    return md_table(columns, [[_fmt(r.get(c, "")) for c in columns] for r in rows])


def problems_md(runs: list[tuple[Path, dict]], missing: list[dict]) -> str:
    """The section listing runs that are not done and cells with missing seeds."""
    bad = [(d, r) for d, r in runs if r.get("status") != "done"]
    text = "## Runs not done\n\n"
    if bad:
        text += md_table(["status", "run_dir", "error"],
                         [[str(r.get("status")), str(d), str(r.get("error", "")).replace("|", "/").replace("\n", " ")]
                          for d, r in bad])
    else:
        text += "None.\n"
    text += "\n## Missing runs (cells with fewer done seeds than the sweep)\n\n"
    if missing:
        text += rows_md([{**m, "missing_seeds": ", ".join(map(str, m["missing_seeds"]))} for m in missing],
                        ["dataset", "group", "lr", "n_seeds", "missing_seeds"])
    else:
        text += "None.\n"
    return text


# --------------------------------------------------------------------------------------- main


def write_report(sweep_dir: str | Path, select: str = "val", out_dir: str | Path | None = None) -> Path:
    """Writes the Section 5.2 tables, figures and ``report.md`` for the finetuning runs under
    ``sweep_dir`` (see the module docstring).

    Args:
        sweep_dir: directory searched recursively for ``result.json`` files.
        select: ``"val"`` picks each (dataset, group)'s learning rate by mean validation accuracy
            over seeds; ``"test"`` by mean test accuracy (the paper's choice).
        out_dir: where to write; ``<sweep_dir>/report`` by default.

    Returns:
        The path of ``report.md``.
    """
    if select not in ("val", "test"):
        raise ValueError(f"select must be 'val' or 'test', not {select!r}")
    sweep_dir = Path(sweep_dir)
    out = Path(out_dir) if out_dir is not None else sweep_dir / "report"
    found = find_results(sweep_dir)
    runs = [(d, r) for d, r in found if r.get("task") == "finetune"]
    analysis = [(d, r) for d, r in found if r.get("task") == "plasticity"]
    flat = [{"run_dir": str(d), **flatten(r)} for d, r in runs]
    write_csv_atomic(out / "runs.csv", flat, _columns(flat))
    sections = [f"# Finetuning report: {sweep_dir}\n\n{len(runs)} finetuning runs "
                f"({sum(r.get('status') == 'done' for _, r in runs)} done); learning rate selected by "
                f"mean {'validation' if select == 'val' else 'test'} accuracy over seeds. "
                f"All runs: [runs.csv](runs.csv).\n"]
    models = sorted({str(r.get("model")) for _, r in runs})
    if len(models) > 1:
        sections.append(f"**Warning:** several models are pooled in these tables: {', '.join(models)}.\n")
    cells = done_cells(runs)
    if cells:
        sections += _write_results(cells, analysis, select, out)
    sections.append(problems_md(runs, missing_runs(runs)))
    write_text(out / "report.md", "\n".join(sections))
    return out / "report.md"


def _columns(flat: list[dict]) -> list[str]:
    """Column order of ``runs.csv``: identity first, then the rest in first-seen order."""
    first = ["run_dir", "task", "dataset", "model", "component", "lr", "seed", "status"]
    seen = dict.fromkeys(first)
    for row in flat:
        seen.update(dict.fromkeys(row))
    return list(seen)


def _write_results(cells: Cells, analysis: list[tuple[Path, dict]], select: str, out: Path) -> list[str]:
    """Writes the tables and figures of the done runs; returns their report sections."""
    rows = table6(cells, select)
    write_csv_atomic(out / "table6.csv", rows, TABLE6_COLUMNS)
    write_text(out / "table6.md", table6_md(rows))
    sections = ["## Table 6: top-1 test accuracy (%), mean ± std over seeds\n\n" + table6_md(rows)]
    chosen = [r for r in rows if r["dataset"] != AVERAGE]
    sections.append("Chosen learning rates:\n\n" + rows_md(chosen, ["dataset", "group", "lr", "n_seeds"]))
    gains = relative_gain(rows)
    if gains:
        write_csv_atomic(out / "relative_gain.csv", gains, ("dataset", "group", "gain_pct"))
        plot_relative_gain(gains, out / "relative_gain.png")
        avg = [g for g in gains if g["dataset"] == AVERAGE]
        sections.append("## Relative gain over linear probing (%)\n\n" + rows_md(avg, ["group", "gain_pct"])
                        + "\n![relative gain](relative_gain.png)\n")
    t1 = table1(rows)
    if t1:
        write_csv_atomic(out / "table1.csv", t1, ("group", "mean_decrease", "p_value", "significant"))
        sections.append("## Table 1: decrease from MHA (points), Wilcoxon signed-rank over datasets\n\n"
                        + rows_md(t1, ["group", "mean_decrease", "p_value", "significant", "n_datasets"]))
    plot_accuracy(rows, out / "accuracy.png")
    plot_spread(cells, out / "spread.png")
    sections.append("## Figures\n\n![average accuracy](accuracy.png)\n\n![spread over lr and seeds](spread.png)\n")
    for dataset in sorted({r["dataset"] for r in chosen}):
        name = f"curves_{dataset.replace('/', '-')}.png"  # fashion_mnist_c/snow -> one file, no folder
        if plot_curves(cells, rows, dataset, out / name):
            sections.append(f"![{dataset} curves]({name})\n")
    corr = plasticity_vs_accuracy(rows, analysis)
    if corr:
        write_csv_atomic(out / "plasticity_vs_accuracy.csv", corr, ("dataset", "spearman_rho", "p_value"))
        sections.append("## Plasticity vs accuracy (Spearman over ln1..fc2)\n\n"
                        + rows_md(corr, ["dataset", "spearman_rho", "p_value", "n_groups"]))
    return sections


def main(argv: list[str] | None = None) -> None:
    """``python -m plasticity.report <sweep_dir> [--select val|test] [--out DIR]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--select", choices=("val", "test"), default="val",
                        help="choose each learning rate by mean validation (default) or test accuracy")
    parser.add_argument("--out", type=Path, default=None, help="output directory (default <sweep_dir>/report)")
    args = parser.parse_args(argv)
    print(write_report(args.sweep_dir, args.select, args.out))


if __name__ == "__main__":
    main()


class Report:
    """Recipe of ``task=report``: the paper's tables and figures from a sweep's records.

    Args:
        cfg: The composed job config (``sweep_dir``, ``task.select``).
        run_dir: Where the report goes (``<sweep_dir>/report`` by default).
    """

    def __init__(self, cfg, run_dir: Path) -> None:
        self.cfg, self.run_dir = cfg, Path(run_dir)

    def run(self) -> dict:
        path = write_report(self.cfg.sweep_dir, self.cfg.task.select, out_dir=self.run_dir)
        print(f"report: {path}")
        return {"report": str(path), "sweep_dir": str(self.cfg.sweep_dir)}

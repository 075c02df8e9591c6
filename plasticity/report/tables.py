"""The paper's Section 5.2 tables and statistics as pure functions of run records (no file IO, no plots).

Owns the "best run" rule shared by the report and the quickstart summary
(:func:`best_per_component`): per dataset and component, the learning rate with the best mean
validation (``select="val"``) or test (``select="test"``, the paper's choice) accuracy over seeds,
ties to the smallest rate, and the mean over seeds at that rate. Also Table 6, the relative gain
over linear probing (Fig. 2), Table 1 (Wilcoxon over datasets), the pooled standard error
(Fig. 17), missing runs, and plasticity against accuracy. Only ``done`` records enter the numbers.
Accuracies in records are fractions; tables give percent.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

import numpy as np
from scipy import stats

from plasticity.components import BASELINES, GROUPS, TABLE_ORDER

AVERAGE = "average"
"""The ``dataset`` of a table's mean-over-datasets rows."""
FULL, LINEAR_PROBE = BASELINES
"""Full finetuning (``all``) and linear probing (``head``), the baselines."""
TABLE1_GROUPS = tuple(g for g in GROUPS if g != "mha") + (FULL,)
"""The groups Table 1 compares against MHA."""
TABLE6_COLUMNS = ("dataset", "group", "lr", "mean", "std", "n_seeds")
SELECT_KEYS = {"val": "best_val_acc", "test": "test_acc"}
"""``select`` -> the record field that picks the learning rate."""

Cells = dict[tuple[str, str, float], list[dict]]
"""Done records per (dataset, group, lr), each with its ``run_dir``."""


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


def ordered_groups(groups: Iterable[str]) -> list[str]:
    """Groups in table order (:data:`~plasticity.components.TABLE_ORDER` first, others after,
    alphabetically)."""
    groups = set(groups)
    return [g for g in TABLE_ORDER if g in groups] + sorted(groups - set(TABLE_ORDER))


def done_cells(runs: list[tuple[Path, dict]]) -> Cells:
    """Done finetuning records grouped per (dataset, group, lr), sorted by seed."""
    cells: Cells = defaultdict(list)
    for run_dir, r in runs:
        if r.get("status") == "done":
            cells[(r["dataset"], r["component"], float(r["lr"]))].append({**r, "run_dir": run_dir})
    for records in cells.values():
        records.sort(key=lambda r: r.get("seed", 0))
    return dict(cells)


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample std (ddof=1; 0 for a single value)."""
    arr = np.asarray(values, dtype=float)
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else 0.0


def choose_lr(cells: Cells, dataset: str, group: str, select: str) -> float:
    """The learning rate with the best mean validation (``val``) or test (``test``) accuracy over
    seeds; ties go to the smallest rate."""
    key = SELECT_KEYS[select]
    lrs = sorted(lr for d, g, lr in cells if (d, g) == (dataset, group))
    score = {lr: np.mean([r[key] for r in cells[(dataset, group, lr)]]) for lr in lrs}
    return max(lrs, key=lambda lr: score[lr])


def best_per_component(cells: Cells, dataset: str, select: str = "val") -> dict[str, dict]:
    """The "best run" rule of the report and the summary, per component of ``dataset``.

    Returns:
        Component (table order) -> ``lr`` (:func:`choose_lr`), ``records`` (the done seeds at that
        rate), ``n_seeds``, and ``best_val_acc`` / ``test_acc``: their means over those seeds
        (fractions).
    """
    best = {}
    for group in ordered_groups(g for d, g, _ in cells if d == dataset):
        lr = choose_lr(cells, dataset, group, select)
        records = cells[(dataset, group, lr)]
        best[group] = {"lr": lr, "records": records, "n_seeds": len(records),
                       **{k: float(np.mean([r[k] for r in records])) for k in SELECT_KEYS.values()}}
    return best


def table6(cells: Cells, select: str = "val") -> list[dict]:
    """Per dataset and group: chosen lr, mean and std of the test accuracy (%) over seeds, and the
    test accuracies themselves (``accs``). Then one ``average`` row per group (mean of the means)."""
    rows = []
    for dataset in sorted({d for d, _, _ in cells}):
        for group, best in best_per_component(cells, dataset, select).items():
            accs = [100.0 * r["test_acc"] for r in best["records"]]
            mean, std = mean_std(accs)
            rows.append({"dataset": dataset, "group": group, "lr": best["lr"], "mean": mean, "std": std,
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
    base = means.get(LINEAR_PROBE)
    if not base:
        return []
    out = []
    for group in ordered_groups(g for g in means if g != LINEAR_PROBE):
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
    lrs, groups, done = defaultdict(set), defaultdict(set), defaultdict(set)
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


def group_plasticity(per_run: Iterable[dict[str, list[float]]]) -> dict[str, float]:
    """Mean plasticity per group, pooled over the blocks of several analysis runs.

    Args:
        per_run: Per run, group -> its per-block means (``plasticity.csv``'s ``mean`` column, as
            :func:`plasticity.report.collect.group_values` reads it).
    """
    values: dict[str, list[float]] = defaultdict(list)
    for groups in per_run:
        for group, means in groups.items():
            values[group] += means
    return {g: float(np.mean(v)) for g, v in values.items() if v}


def plasticity_vs_accuracy(rows: list[dict], plasticity: dict[str, dict[str, float]]) -> list[dict]:
    """Per dataset with plasticity values: Spearman rho (and p) between per-group plasticity and
    table-6 accuracy over the groups ln1..fc2 both have (at least 3).

    Args:
        rows: :func:`table6` rows.
        plasticity: Dataset -> group -> mean plasticity (:func:`group_plasticity`).
    """
    means = means_by(rows)
    out = []
    for dataset, plast in sorted(plasticity.items()):
        groups = [g for g in GROUPS if g in plast and dataset in means.get(g, {})]
        if len(groups) < 3:
            continue
        res = stats.spearmanr([plast[g] for g in groups], [means[g][dataset] for g in groups])
        out.append({"dataset": dataset, "spearman_rho": float(res.statistic), "p_value": float(res.pvalue),
                    "n_groups": len(groups)})
    return out

"""The paper's Section 5.2 tables and statistics as pure functions of run records (no file IO, no plots).

Owns the "best run" rule shared by the report and the quickstart summary
(:func:`best_per_component`): per dataset and configuration, the learning rate with the best mean
validation (``select="val"``) or test (``select="test"``, the paper's choice) accuracy over seeds,
ties to the smallest rate, and the mean over seeds at that rate. Also Table 6, the relative gain
over linear probing (Fig. 2), Table 1 (Wilcoxon over datasets), the pooled standard error
(Fig. 17), missing runs, plasticity against accuracy, and the strategies beyond the paper
(accuracy against trainable parameters, the Pareto front). Only ``done`` records enter the numbers.
Accuracies in records are fractions; tables give percent.

A configuration is a record's ``component`` tag: a paper group (``ln1`` ... ``fc2``, ``emb``),
``all``, ``head``, a combination (``mha+fc1``, a block subset ``mha_b8-11`` or ``fc1_b2.5``),
an adapter (``mha_lora_r8``), ``auto``, or ``probe`` (the logistic-regression linear probe of
``task=linear_probe``, which has no learning rate: its cell's ``lr`` is None). Its kind is the
record's ``strategy`` (:func:`plasticity.components.strategy_of` its tag for records written before it).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable

import numpy as np
from scipy import stats

from plasticity.components import BASELINES, GROUPS, PROBE, TABLE_ORDER, is_probe, label, strategy_of

AVERAGE = "average"
"""The ``dataset`` of a table's mean-over-datasets rows."""
FULL, LINEAR_PROBE = BASELINES
"""Full finetuning (``all``) and linear probing (``head``), the baselines."""
TABLE1_GROUPS = tuple(g for g in GROUPS if g != "mha") + (FULL,)
"""The groups Table 1 compares against MHA."""
# PROBE: the ``component`` (and ``strategy``) of the paper's logistic-regression linear probe (``task=linear_probe``);
# its variants on other features are configurations of their own (:func:`plasticity.components.probe_tag`).
TABLE6_COLUMNS = ("dataset", "group", "strategy", "label", "params", "lr", "mean", "std", "n_seeds", "n_datasets")
SELECT_KEYS = {"val": "best_val_acc", "test": "test_acc"}
"""``select`` -> the record field that picks the learning rate."""
KINDS = ("group", "full", "head", "combination", "lora", "auto", PROBE)
"""Strategies in table order: the paper's groups (and ``emb``), full finetuning, SGD on the head, then
the configurations beyond the paper; an unknown strategy goes after ``auto``, the probe last."""
STRATEGIES_COLUMNS = ("dataset", "component", "strategy", "label", "trainable_params", "lr", "mean", "std",
                      "n_seeds", "pareto")

Cells = dict[tuple[str, str, float | None], list[dict]]
"""Done records per (dataset, configuration, lr), each with its ``run_dir``; lr is None for the probe."""


def linear_probe_baseline(groups: Iterable[str]) -> str | None:
    """The configuration that stands for "linear probing": the paper's logistic-regression probe
    (``probe``) when the sweep has it, else its first variant on other features, else SGD on the
    head (``head``), else None."""
    groups = set(groups)
    probes = sorted(g for g in groups if is_probe(g))
    return PROBE if PROBE in groups else probes[0] if probes else LINEAR_PROBE if LINEAR_PROBE in groups else None


def column_labels(groups: Iterable[str]) -> dict[str, str]:
    """:func:`plasticity.components.label` of each configuration, except that "linear probing" names the baseline
    (:func:`linear_probe_baseline`) and, beside the probe, the head is "SGD head"."""
    groups = list(groups)
    labels = {g: label(g) for g in groups}
    baseline = linear_probe_baseline(groups)
    if baseline is not None and is_probe(baseline):
        labels[baseline] = "linear probing"
        if LINEAR_PROBE in labels:
            labels[LINEAR_PROBE] = "SGD head"
    return labels


def _kind_rank(tag: str) -> int:
    kind = strategy_of(tag)
    return len(KINDS) + 1 if kind == PROBE else KINDS.index(kind) if kind in KINDS else len(KINDS)


def ordered_groups(groups: Iterable[str]) -> list[str]:
    """Configurations in table order: :data:`~plasticity.components.TABLE_ORDER` first, then by kind
    (other groups such as ``emb``, combinations, adapters, ``auto``, unknown kinds, the probe last),
    alphabetically within a kind."""
    groups = set(groups)
    return [g for g in TABLE_ORDER if g in groups] + sorted(groups - set(TABLE_ORDER), key=lambda g: (_kind_rank(g), g))


def lr_key(record: dict) -> float | None:
    """A record's learning rate as a cell key: a float, or None (the probe has none)."""
    return None if record.get("lr") is None else float(record["lr"])


def _lr_order(lr: float | None) -> tuple[bool, float]:
    return lr is not None, 0.0 if lr is None else lr


def done_cells(runs: list[tuple[Path, dict]]) -> Cells:
    """Done records grouped per (dataset, configuration, lr), sorted by seed (lr None: the probe)."""
    cells: Cells = defaultdict(list)
    for run_dir, r in runs:
        if r.get("status") == "done":
            cells[(r["dataset"], r["component"], lr_key(r))].append({**r, "run_dir": run_dir})
    return {cell: sorted(records, key=lambda r: r.get("seed", 0)) for cell, records in cells.items()}


def shared_seeds(cells: Cells) -> list[dict]:
    """Cells where several done records share a seed (pooled as if they were seeds: e.g. two linear
    probes on other features, or several models): dataset, group, lr and the repeated seeds."""
    out = []
    for (d, g, lr), records in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1], _lr_order(kv[0][2]))):
        repeated = sorted((s for s, n in Counter(r.get("seed") for r in records).items() if n > 1), key=str)
        if repeated:
            out.append({"dataset": d, "group": g, "lr": lr, "seeds": repeated})
    return out


def median_params(records: Iterable[dict]) -> int | float | None:
    """Median ``trainable_params`` of the records that have it (an int when whole), or None."""
    values = [n for n in (r.get("trainable_params") for r in records)
              if isinstance(n, (int, float)) and not isinstance(n, bool)]
    if not values:
        return None
    median = float(np.median(values))
    return int(median) if median.is_integer() else median


def choose_lr(cells: Cells, dataset: str, group: str, select: str) -> float:
    """The learning rate with the best mean validation (``val``) or test (``test``) accuracy over
    seeds; ties go to the smallest rate."""
    key = SELECT_KEYS[select]
    lrs = sorted((lr for d, g, lr in cells if (d, g) == (dataset, group)), key=_lr_order)
    if len(lrs) == 1:  # nothing to choose (the probe's single cell)
        return lrs[0]
    score = {lr: np.mean([r[key] for r in cells[(dataset, group, lr)]]) for lr in lrs}
    return max(lrs, key=lambda lr: score[lr])  # max keeps the first of equal scores: the smallest rate


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
                       **{k: _mean(records, k) for k in SELECT_KEYS.values()}}
    return best


def _mean(records: list[dict], key: str) -> float:
    """Mean of ``key`` over records (NaN when a record lacks it: a probe without validation)."""
    values = [r.get(key) for r in records]
    return float(np.mean(values)) if all(isinstance(v, (int, float)) for v in values) else float("nan")


def table6(cells: Cells, select: str = "val") -> list[dict]:
    """Per dataset and configuration (each distinct ``component`` tag, :func:`ordered_groups`):
    its ``strategy`` and ``label``, ``params`` (median ``trainable_params`` of its done records on
    that dataset, any lr), the chosen lr (None for the probe), mean and std of the test accuracy
    (%) over seeds, and the test accuracies themselves (``accs``). Then one ``average`` row per
    configuration (mean of the means; ``params``: the median over every dataset's records;
    ``n_datasets``: how many datasets that mean is over, which :func:`partial_averages` compares)."""
    rows = []
    labels = column_labels({g for _, g, _ in cells})
    for dataset in sorted({d for d, _, _ in cells}):
        for group, best in best_per_component(cells, dataset, select).items():
            accs = [100.0 * r["test_acc"] for r in best["records"]]
            mean, std = float(np.mean(accs)), float(np.std(accs, ddof=1)) if len(accs) > 1 else 0.0  # sample std
            mine = [r for (d, g, _), rs in cells.items() if (d, g) == (dataset, group) for r in rs]
            strategy = best["records"][0].get("strategy") or strategy_of(group)  # a record before `strategy`: its tag's
            rows.append({"dataset": dataset, "group": group, "strategy": strategy, "label": labels[group],
                         "params": median_params(mine), "lr": best["lr"], "mean": mean, "std": std,
                         "n_seeds": len(accs), "accs": accs})
    for group in ordered_groups(r["group"] for r in rows):
        mine = [r for r in rows if r["group"] == group]
        records = [r for (_, g, _), rs in cells.items() if g == group for r in rs]
        rows.append({"dataset": AVERAGE, "group": group, "strategy": mine[0]["strategy"], "label": labels[group],
                     "params": median_params(records), "lr": None, "mean": float(np.mean([r["mean"] for r in mine])),
                     "std": float("nan"), "n_seeds": None, "n_datasets": len(mine), "accs": []})
    return rows


def partial_averages(rows: list[dict]) -> tuple[int, dict[str, int]]:
    """The most datasets an ``average`` row of :func:`table6` is over, and the configurations whose
    average is over fewer (group -> its count): a configuration run on one target is not comparable
    with averages over six, and tables and figures say so."""
    counts = {r["group"]: r["n_datasets"] for r in rows if r["dataset"] == AVERAGE and r.get("n_datasets")}
    most = max(counts.values(), default=0)
    return most, {g: n for g, n in counts.items() if n < most}


def means_by(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per-dataset table-6 means: ``{group: {dataset: mean}}`` (without the average rows)."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for r in rows:
        if r["dataset"] != AVERAGE:
            out[r["group"]][r["dataset"]] = r["mean"]
    return dict(out)


def relative_gain(rows: list[dict]) -> list[dict]:
    """100 * (acc_g - acc_lp) / acc_lp per dataset, and per configuration an ``average`` row over
    datasets, where lp is :func:`linear_probe_baseline`: the logistic-regression probe when the
    sweep has probe records, else SGD on the head (the same baseline for every dataset; datasets
    without it get no gain). Each row names its ``baseline``. Empty without either."""
    means = means_by(rows)
    baseline = linear_probe_baseline(means)
    if baseline is None:
        return []
    base = means[baseline]
    out = []
    for group in ordered_groups(g for g in means if g != baseline):
        gains = {d: 100.0 * (acc - base[d]) / base[d] for d, acc in means[group].items() if d in base}
        out += [{"dataset": d, "group": group, "baseline": baseline, "gain_pct": v} for d, v in sorted(gains.items())]
        if gains:
            out.append({"dataset": AVERAGE, "group": group, "baseline": baseline,
                        "gain_pct": float(np.mean(list(gains.values())))})
    return out


EXACT_MAX_N = 25
"""Up to this many pairs the Wilcoxon p-value is exact (the permutation distribution, ties included)."""


def wilcoxon_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided Wilcoxon signed-rank p-value of paired samples (zero differences dropped; exact up
    to :data:`EXACT_MAX_N` pairs, the normal approximation above); NaN when fewer than 2 pairs or
    all differences are zero."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if len(d) < 2 or np.all(d == 0):
        return float("nan")
    return float(stats.wilcoxon(d, method="exact" if len(d) <= EXACT_MAX_N else "auto").pvalue)


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
    a group are those it ran at on any dataset (a group may have its own grid: LayerNorms often
    take larger steps; none for a configuration without a learning rate, the probe), the expected
    seeds those any run of the same task used."""
    seeds, lrs, done, lrless, task_of = defaultdict(set), defaultdict(set), defaultdict(set), set(), {}
    for _, r in runs:
        cell = (r["dataset"], r["component"], lr_key(r))
        seeds[r.get("task")].add(r.get("seed"))
        task_of[cell[:2]] = r.get("task")
        if cell[2] is None:
            lrless.add(cell[:2])
        else:
            lrs[r["component"]].add(cell[2])
        if r.get("status") == "done":
            done[cell].add(r.get("seed"))
    out = []
    for dataset in sorted({d for d, _ in task_of}):
        for group in ordered_groups(g for d, g in task_of if d == dataset):
            expected = seeds[task_of[(dataset, group)]]
            for lr in [None] if (dataset, group) in lrless else sorted(lrs[group]):
                have = done[(dataset, group, lr)]
                if have != expected:
                    out.append({"dataset": dataset, "group": group, "lr": lr, "n_seeds": len(have),
                                "missing_seeds": sorted(expected - have, key=str)})
    return out


def block_means(per_run: Iterable[dict[str, list[float]]]) -> dict[str, float]:
    """Mean per group of per-block values pooled over several runs: P(f) over the blocks of analysis
    runs, a bound over the blocks of one run.

    Args:
        per_run: Per run, group -> its per-block values (e.g. ``plasticity.csv``'s ``mean`` column, as
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
        plasticity: Dataset -> group -> mean plasticity (:func:`block_means`).
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


def pareto_front(points: list[tuple[float | None, float]]) -> list[bool]:
    """Which (trainable parameters, accuracy) points are on the Pareto front: a point is on it iff
    no other point has accuracy >= and parameters <=, one of the two strictly. A point without a
    parameter count is never on it (and dominates nothing)."""
    known = [(p, a) for p, a in points if p is not None]
    return [p is not None and not any(q <= p and b >= a and (q < p or b > a) for q, b in known) for p, a in points]


def strategies(rows: list[dict]) -> list[dict]:
    """Per dataset, every configuration as a point of accuracy against trainable parameters:
    :data:`STRATEGIES_COLUMNS` from the :func:`table6` rows (the chosen lr, the mean and std over
    its seeds) and ``pareto`` (:func:`pareto_front` within the dataset)."""
    out = []
    for dataset in sorted({r["dataset"] for r in rows} - {AVERAGE}):
        mine = [r for r in rows if r["dataset"] == dataset]
        front = pareto_front([(r["params"], r["mean"]) for r in mine])
        out += [{"dataset": dataset, "component": r["group"], "strategy": r["strategy"], "label": r["label"],
                 "trainable_params": r["params"], "lr": r["lr"], "mean": r["mean"], "std": r["std"],
                 "n_seeds": r["n_seeds"], "pareto": on} for r, on in zip(mine, front)]
    return out

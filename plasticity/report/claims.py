"""The paper's claims C1..C5 tested on a sweep: the rows of ``claims.csv`` and the Claims section of report.md.

Each claim gets one ``level="claim"`` row holding its verdict, then ``level="detail"`` rows (per
target, or per compared group) that it is built from. Columns (:data:`COLUMNS`): ``claim`` (the id
C1..C5 and the claim's words), ``statistic`` (what ``value`` is), ``value``, ``p_value`` (empty when
no test applies), ``n`` (the targets, groups or runs the statistic used, as the statistic says),
``verdict`` (:data:`VERDICTS`), then ``level``, ``target`` (a target, or ``pooled``) and ``reason``
(why a claim is not testable).

Rules (alpha = :data:`ALPHA` = 0.05, every test two-sided):

- C1 (plasticity ranking MHA > FC1 > FC2 > LN2 > LN1): per target, Kendall tau-b between the
  groups' P(f) and the paper's ranking (exact p, n = groups). Pooled: the mean of the per-target
  taus, p of the two-sided exact Wilcoxon signed-rank test of those taus against 0 (n = targets).
- C2 (higher plasticity, higher accuracy): per target, Spearman rho between the groups' P(f) and
  their Table 6 accuracy (test accuracy at the learning rate chosen as the report chooses it,
  on validation by default). Pooled as C1.
- C4 (gradient norms follow plasticity): per target, Spearman rho between each group's mean
  ``grad_norm/<group>`` (mean over the logged steps of each of its runs at the chosen learning
  rate, then over those runs' seeds) and its P(f). Pooled as C1.
- A directional statistic (the pooled coefficient of C1, C2, C4; the mean decrease from MHA of
  "MHA better than G") is: supported when > 0 with p < alpha; not supported when <= 0, or > 0
  without p < alpha over at least :data:`MIN_TARGETS` = 6 targets; not testable when > 0 over
  fewer than 6 targets (the exact two-sided Wilcoxon test over n targets cannot go below 2 / 2**n,
  0.0625 for n = 5) or undefined (a constant input). Per-target detail rows: supported when the
  coefficient is > 0 with p < alpha (an exact Kendall p over 5 groups reaches 0.017 for a perfect
  ranking, 0.083 with one swap).
- C1, C2, C4 are not testable without P(f) (no ``task=plasticity`` record with ``plasticity.csv``
  and no ``plasticity/<group>`` in the finetuning runs' metrics), without the statistic's inputs
  (C4: no ``grad_norm/<group>``), or with fewer than 3 groups on every target.
- C3 (MHA better than FC2, LN2, LN1, no worse than FC1): Table 1, the mean decrease from MHA to
  each group over the targets both have and its two-sided exact Wilcoxon p (n = targets). "Better
  than G": directional, as above. "No worse than FC1": supported unless the decrease is < 0 with
  p < alpha; not testable with fewer than 6 targets (where it could never be refuted). The claim
  is not supported when any part is not, else not testable when any part is, else supported.
- C5 (MHA most robust to learning rate and seed): per group, the sample standard deviation of
  the test accuracy (%) over every done run of the lr x seed grid of a target (Fig. 4 left), mean
  over the targets; n = the group's runs. Supported when MHA's spread is the smallest of the five
  groups (ties count for MHA); no test. Not testable without MHA and another group with two runs
  on a target.

P(f) of a target is the mean over blocks (and over its analysis runs) of ``plasticity.csv`` of its
``task=plasticity`` records; without them, the mean over its finetuning runs (at the chosen
learning rates) of the first logged ``plasticity/<group>`` value (the plasticity callback measures
every group at step 0, before training).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
from scipy import stats

from plasticity.components import GROUPS, label
from plasticity.report.tables import AVERAGE, Cells, means_by, table1, wilcoxon_p
from plasticity.runs.io import blank

__all__ = ["ALPHA", "CLAIMS", "COLUMNS", "ClaimInputs", "PAPER_RANKING", "chosen_runs", "claim_inputs",
           "evaluate_claims", "kendall_distance", "kendall_vs_paper", "verdict_text", "wilcoxon_exact"]

ALPHA = 0.05
"""Significance level of every test: the paper's (Table 1 marks p < 0.05)."""
MIN_TARGETS = 6
"""Fewest targets with which a two-sided exact Wilcoxon test can reach p < :data:`ALPHA` (2 / 2**6)."""
MIN_GROUPS = 3
"""Fewest groups a per-target correlation needs: over 2 a rank correlation is always +1 or -1."""
PAPER_RANKING = ("mha", "fc1", "fc2", "ln2", "ln1")
"""The paper's plasticity ranking (Sec. 5.1), most plastic first."""
SUPPORTED, NOT_SUPPORTED, NOT_TESTABLE = "supported", "not supported", "not testable"
VERDICTS = (SUPPORTED, NOT_SUPPORTED, NOT_TESTABLE)
CLAIMS = {"C1": "C1 plasticity ranking MHA > FC1 > FC2 > LN2 > LN1",
          "C2": "C2 higher plasticity gives higher finetuning accuracy",
          "C3": "C3 MHA is better than FC2, LN2, LN1 and no worse than FC1",
          "C4": "C4 gradient norms follow the plasticity ranking",
          "C5": "C5 MHA is the most robust to the learning rate and seed"}
"""Claim id -> the ``claim`` cell of its rows."""
COLUMNS = ("claim", "statistic", "value", "p_value", "n", "verdict", "level", "target", "reason")
POOLED = "pooled"
NO_PLASTICITY = ("no plasticity measured: no task=plasticity record with plasticity.csv and no plasticity/<group> "
                 "in the finetuning runs' metrics.csv")


@dataclass
class ClaimInputs:
    """What the claims are computed from.

    Attributes:
        rows: :func:`~plasticity.report.tables.table6` rows (accuracy at the chosen learning rate).
        cells: Done records per (target, configuration, lr) (:func:`~plasticity.report.tables.done_cells`).
        plasticity: Target -> group -> P(f).
        sources: Target -> where its P(f) came from (``task=plasticity`` or ``finetuning metrics step 0``).
        grad_norms: Target -> group -> mean gradient norm of its runs at the chosen learning rate.
    """

    rows: list[dict] = field(default_factory=list)
    cells: Cells = field(default_factory=dict)
    plasticity: dict[str, dict[str, float]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    grad_norms: dict[str, dict[str, float]] = field(default_factory=dict)


# ------------------------------------------------------------------------------- statistics


def paper_score(group: str) -> int:
    """Higher for a group the paper finds more plastic: MHA 5 ... LN1 1."""
    return len(PAPER_RANKING) - PAPER_RANKING.index(group)


def kendall_vs_paper(values: dict[str, float]) -> tuple[float, float, int]:
    """Kendall tau-b (and its p) between ``values`` of the paper's groups and the paper's ranking,
    and the number of groups used; NaNs with fewer than 2 groups."""
    groups = [g for g in PAPER_RANKING if g in values]
    if len(groups) < 2:
        return float("nan"), float("nan"), len(groups)
    # tau-b (scipy's default) corrects for tied P(f); its p is exact for so few groups without ties
    res = stats.kendalltau([values[g] for g in groups], [paper_score(g) for g in groups])
    return float(res.statistic), float(res.pvalue), len(groups)


def kendall_distance(values: dict[str, float]) -> int:
    """Pairs of the paper's groups (among those in ``values``) not strictly in the paper's order
    (a tie counts as a swap): 0 when the measured ranking is the paper's."""
    groups = [g for g in PAPER_RANKING if g in values]
    return sum(not values[a] > values[b] for i, a in enumerate(groups) for b in groups[i + 1:])


def ranking_text(values: dict[str, float]) -> str:
    """``"MHA > FC1 > ..."``: the groups by decreasing value."""
    return " > ".join(label(g) for g in sorted(values, key=lambda g: -values[g]))


def wilcoxon_exact(x: Iterable[float]) -> float:
    """Two-sided exact Wilcoxon signed-rank p of ``x`` against 0 (zeros dropped; the normal
    approximation beyond :data:`~plasticity.report.tables.EXACT_MAX_N` values); NaN when fewer than
    2 values or all are zero."""
    x = np.asarray(list(x), dtype=float)
    # exact, not the normal approximation: a sweep has few targets (the paper 11), too few for it
    return wilcoxon_p(x, np.zeros_like(x))


def spearman(x: list[float], y: list[float]) -> tuple[float, float]:
    """Spearman rho and its p (NaN for a constant input)."""
    if len(set(x)) < 2 or len(set(y)) < 2:  # rho is undefined (scipy would warn and return NaN)
        return float("nan"), float("nan")
    res = stats.spearmanr(x, y)
    return float(res.statistic), float(res.pvalue)


def _significant(value: float, p: float) -> bool:
    return not math.isnan(value) and value > 0 and not math.isnan(p) and p < ALPHA


def too_few_targets(n: int) -> str | None:
    """The reason a Wilcoxon test over ``n`` targets cannot decide, or None when it can."""
    if n >= MIN_TARGETS:
        return None
    floor = f" (its smallest p over {n} is 2/2^{n} = {2 / 2 ** n:.3g})" if n >= 1 else ""
    return f"{n} target(s): the exact Wilcoxon test needs >= {MIN_TARGETS} to reach p < {ALPHA}{floor}"


def directional(value: float, p: float, n: int) -> tuple[str, str]:
    """(verdict, reason) of a claim that ``value`` > 0, tested over ``n`` targets: supported when
    > 0 with p < alpha; not supported when <= 0, or > 0 without significance over enough targets;
    not testable when undefined, or > 0 over fewer than :data:`MIN_TARGETS` targets (no test there
    could reach alpha)."""
    if math.isnan(value):
        return NOT_TESTABLE, "undefined (a constant input)"
    if value <= 0:
        return NOT_SUPPORTED, ""
    reason = too_few_targets(n)
    if reason:
        return NOT_TESTABLE, reason
    return (SUPPORTED if _significant(value, p) else NOT_SUPPORTED), ""


# ------------------------------------------------------------------------------------- rows


def row(cid: str, statistic: str, value: float | None = None, p: float | None = None, n: int | None = None,
        verdict: str = NOT_TESTABLE, level: str = "detail", target: str = "", reason: str = "") -> dict:
    """One row of ``claims.csv`` (NaN value or p become empty)."""
    value, p = (None if blank(x) == "" else x for x in (value, p))
    return {"claim": CLAIMS[cid], "statistic": statistic, "value": value, "p_value": p, "n": n,
            "verdict": verdict, "level": level, "target": target, "reason": reason}


def untestable(cid: str, statistic: str, reason: str) -> list[dict]:
    """The claim's verdict row when it cannot be tested."""
    return [row(cid, statistic, level="claim", target=POOLED, reason=reason)]


def pooled(cid: str, what: str, per_target: dict[str, float]) -> dict:
    """The verdict row pooling per-target coefficients: their mean, the exact Wilcoxon p against 0."""
    values = [v for v in per_target.values() if not math.isnan(v)]
    statistic = f"mean over targets of the per-target {what}; p: two-sided exact Wilcoxon signed-rank vs 0"
    n, mean = len(values), float(np.mean(values)) if values else float("nan")
    p = wilcoxon_exact(values)
    verdict, reason = directional(mean, p, n) if values else (NOT_TESTABLE, "no target with a defined coefficient")
    return row(cid, statistic, mean, p, n, verdict, "claim", POOLED, reason)


def per_target(cid: str, target: str, statistic: str, value: float, p: float, n: int) -> dict:
    """A per-target detail row: supported when the coefficient is > 0 with p < alpha."""
    if math.isnan(value):
        return row(cid, statistic, value, p, n, NOT_TESTABLE, target=target, reason="a constant input")
    return row(cid, statistic, value, p, n, SUPPORTED if _significant(value, p) else NOT_SUPPORTED, target=target)


# ----------------------------------------------------------------------------------- claims


def accuracies(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Target -> group -> Table 6 test accuracy (%), the five groups only."""
    out: dict[str, dict[str, float]] = {}
    for group, by in means_by(rows).items():
        for target, acc in by.items() if group in GROUPS else ():
            out.setdefault(target, {})[group] = acc
    return out


def claim_c1(inputs: ClaimInputs) -> list[dict]:
    """C1: Kendall tau of the measured P(f) against the paper's ranking, per target and pooled."""
    what = "Kendall tau-b between P(f) and the paper's ranking"
    if not inputs.plasticity:
        return untestable("C1", what, NO_PLASTICITY)
    found = {}
    for target, plast in sorted(inputs.plasticity.items()):
        values = {g: v for g, v in plast.items() if g in PAPER_RANKING}
        if len(values) >= MIN_GROUPS:
            statistic = (f"{what} over n groups (P(f) from {inputs.sources.get(target, '?')}; measured: "
                         f"{ranking_text(values)})")
            found[target] = (statistic, *kendall_vs_paper(values))
    return _pooled_claim("C1", what, found, f"fewer than {MIN_GROUPS} groups with P(f) on every target")


def claim_c2(inputs: ClaimInputs) -> list[dict]:
    """C2: Spearman rho between P(f) and finetuning accuracy, per target and pooled."""
    what = "Spearman rho between a group's P(f) and its test accuracy at the chosen lr"
    if not inputs.plasticity:
        return untestable("C2", what, NO_PLASTICITY)
    return _correlations("C2", what, inputs.plasticity, accuracies(inputs.rows), inputs.sources,
                         "no target has both P(f) and finetuning accuracy")


def claim_c4(inputs: ClaimInputs) -> list[dict]:
    """C4: Spearman rho between mean gradient norm and P(f), per target and pooled."""
    what = "Spearman rho between a group's mean grad_norm/<group> and its P(f)"
    if not inputs.plasticity:
        return untestable("C4", what, NO_PLASTICITY)
    if not any(inputs.grad_norms.values()):
        return untestable("C4", what, "no grad_norm/<group> logged in the finetuning runs' metrics.csv")
    return _correlations("C4", what, inputs.plasticity, inputs.grad_norms, inputs.sources,
                         "no target has both P(f) and gradient norms")


def _correlations(cid: str, what: str, plasticity: dict[str, dict[str, float]], other: dict[str, dict[str, float]],
                  sources: dict[str, str], none: str) -> list[dict]:
    """Per target with at least 3 groups in both: Spearman rho of P(f) against ``other``; pooled."""
    found = {}
    for target in sorted(set(plasticity) & set(other)):
        groups = [g for g in GROUPS if g in plasticity[target] and g in other[target]]
        if len(groups) >= MIN_GROUPS:
            rho, p = spearman([plasticity[target][g] for g in groups], [other[target][g] for g in groups])
            found[target] = (f"{what} over n groups (P(f) from {sources.get(target, '?')})", rho, p, len(groups))
    return _pooled_claim(cid, what, found, f"{none} for at least {MIN_GROUPS} groups")


def _pooled_claim(cid: str, what: str, found: dict[str, tuple[str, float, float, int]], none: str) -> list[dict]:
    """The pooled verdict row, then a detail row per target of ``found`` (target -> statistic, coefficient,
    p, n); not testable (``none`` says why) without a target."""
    if not found:
        return untestable(cid, what, none)
    details = [per_target(cid, target, *values) for target, values in found.items()]
    return [pooled(cid, what, {target: values[1] for target, values in found.items()})] + details


C3_PARTS = (("fc2", "better"), ("ln2", "better"), ("ln1", "better"), ("fc1", "no worse"))
"""(group, relation) of the parts of C3: MHA better than, or no worse than, the group."""


def claim_c3(rows: list[dict]) -> list[dict]:
    """C3: Table 1's mean decrease from MHA and its Wilcoxon p, one detail row per compared group."""
    t1 = {r["group"]: r for r in table1(rows)}
    parts = [_c3_part(group, relation, t1.get(group)) for group, relation in C3_PARTS]
    verdicts = [p["verdict"] for p in parts]
    verdict = NOT_SUPPORTED if NOT_SUPPORTED in verdicts else NOT_TESTABLE if NOT_TESTABLE in verdicts else SUPPORTED
    reason = "; ".join(dict.fromkeys(p["reason"] for p in parts if p["reason"]))
    n = max((p["n"] or 0 for p in parts), default=0)
    statistic = ("parts supported of 4 (MHA > FC2, MHA > LN2, MHA > LN1: mean decrease > 0 with p < 0.05; "
                 "MHA no worse than FC1: not significantly below)")
    head = row("C3", statistic, float(verdicts.count(SUPPORTED)), None, n, verdict, "claim", POOLED,
               reason if verdict == NOT_TESTABLE else "")
    return [head] + parts


def _c3_part(group: str, relation: str, t1: dict | None) -> dict:
    statistic = (f"MHA {'better than' if relation == 'better' else 'no worse than'} {label(group)}: mean decrease "
                 f"from MHA (points) over targets; p: two-sided exact Wilcoxon signed-rank")
    if t1 is None:
        return row("C3", statistic, target=f"vs {label(group)}", reason=f"no runs of MHA and {label(group)}")
    value, p, n = t1["mean_decrease"], t1["p_value"], t1["n_datasets"]
    if relation == "better":
        verdict, reason = directional(value, p, n)
    else:  # refuted only by a significant decrease below FC1, which needs enough targets to be possible
        reason = too_few_targets(n) or ""
        worse = value < 0 and not math.isnan(p) and p < ALPHA
        verdict = NOT_TESTABLE if reason else NOT_SUPPORTED if worse else SUPPORTED
    return row("C3", statistic, value, p, n, verdict, target=f"vs {label(group)}", reason=reason)


def spreads(cells: Cells) -> dict[str, dict[str, tuple[float, int]]]:
    """Group -> target -> (sample std of the test accuracy (%) over its done runs of every lr and
    seed, number of runs), for the five groups and targets with at least 2 runs."""
    runs: dict[tuple[str, str], list[float]] = {}
    for (target, group, _), records in cells.items():
        if group in GROUPS:
            runs.setdefault((target, group), []).extend(100.0 * r["test_acc"] for r in records)
    out: dict[str, dict[str, tuple[float, int]]] = {}
    for (target, group), accs in sorted(runs.items()):
        if len(accs) >= 2:
            out.setdefault(group, {})[target] = (float(np.std(accs, ddof=1)), len(accs))
    return out


def claim_c5(cells: Cells) -> list[dict]:
    """C5: MHA has the smallest spread of test accuracy over the lr x seed grid (mean over targets);
    one detail row per other group: its spread minus MHA's (> 0: MHA steadier)."""
    what = "std of test accuracy (%) over the lr x seed grid, mean over targets"
    by = spreads(cells)
    mean = {g: float(np.mean([s for s, _ in t.values()])) for g, t in by.items()}
    n = {g: sum(k for _, k in t.values()) for g, t in by.items()}
    if "mha" not in mean or len(mean) < 2:
        return untestable("C5", what, "needs MHA and another group with at least 2 runs (lr x seed) on a target")
    smallest = min(mean, key=lambda g: (mean[g], g != "mha"))  # a tie goes to MHA
    statistic = (f"MHA's {what} (n = MHA's runs); smallest of {len(mean)} groups: {label(smallest)} "
                 f"({mean[smallest]:.3g})")
    verdict = SUPPORTED if smallest == "mha" else NOT_SUPPORTED
    details = [row("C5", f"{label(g)}'s {what} ({mean[g]:.3g}, n = its {n[g]} runs) minus MHA's ({mean['mha']:.3g})",
                   mean[g] - mean["mha"], None, n[g], SUPPORTED if mean[g] >= mean["mha"] else NOT_SUPPORTED,
                   target=f"vs {label(g)}") for g in GROUPS if g in mean and g != "mha"]
    return [row("C5", statistic, mean["mha"], None, n["mha"], verdict, "claim", POOLED)] + details


def evaluate_claims(inputs: ClaimInputs) -> list[dict]:
    """Every row of ``claims.csv``: per claim its verdict row, then its detail rows."""
    return claim_c1(inputs) + claim_c2(inputs) + claim_c3(inputs.rows) + claim_c4(inputs) + claim_c5(inputs.cells)


# ----------------------------------------------------------------------------------- inputs


def chosen_runs(rows: list[dict], cells: Cells) -> dict[tuple[str, str], list[dict]]:
    """(target, group) -> the done records at the chosen learning rate, for the five groups."""
    return {(r["dataset"], r["group"]): cells[(r["dataset"], r["group"], r["lr"])]
            for r in rows if r["dataset"] != AVERAGE and r["group"] in GROUPS}


def claim_inputs(rows: list[dict], cells: Cells, analysis: dict[str, dict[str, float]],
                 metrics: dict[tuple[str, str], list[dict]]) -> ClaimInputs:
    """What the claims are computed from: P(f) of ``analysis`` and, for the targets it lacks, the first
    ``plasticity/<group>`` of their chosen runs; the chosen runs' mean gradient norms.

    Args:
        rows: :func:`~plasticity.report.tables.table6` rows.
        cells: The done records they come from.
        analysis: Target -> group -> P(f) of the ``task=plasticity`` records
            (:func:`plasticity.report.collect.analysis_plasticity`).
        metrics: (target, group) -> per chosen run (:func:`chosen_runs`), column -> (steps, values) of
            ``grad_norm/<group>`` and every ``plasticity/<g>`` (:func:`plasticity.report.collect.claim_metrics`).
    """
    inputs = ClaimInputs(rows=rows, cells=cells)
    for target, found in sorted(analysis.items()):
        if found:
            inputs.plasticity[target], inputs.sources[target] = dict(found), "task=plasticity"
    first: dict[str, dict[str, list[float]]] = {}
    for (target, group), runs in metrics.items():
        # C4: each run's mean over its logged steps, then the mean over the runs (seeds) below
        norms = [float(np.mean(s[f"grad_norm/{group}"][1])) for s in runs if len(s[f"grad_norm/{group}"][1])]
        for series in runs:
            for g in GROUPS:
                steps, values = series[f"plasticity/{g}"]
                if len(steps):  # the earliest step: the callback measures every group at step 0, before training
                    first.setdefault(target, {}).setdefault(g, []).append(float(values[np.argmin(steps)]))
        if norms:
            inputs.grad_norms.setdefault(target, {})[group] = float(np.mean(norms))
    for target, groups in first.items():
        if target not in inputs.plasticity:  # a task=plasticity record is the paper's measure: it comes first
            inputs.plasticity[target] = {g: float(np.mean(v)) for g, v in groups.items()}
            inputs.sources[target] = "finetuning metrics step 0"
    return inputs


def verdict_text(r: dict) -> str:
    """The verdict, with the reason when not testable."""
    return f"{r['verdict']} ({r['reason']})" if r["reason"] else r["verdict"]

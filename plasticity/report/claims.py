"""The paper's claims C1..C5 tested on a sweep: the rows of ``claims.csv`` and the Claims section of report.md.

Each claim gets one ``level="claim"`` row holding its verdict, then ``level="detail"`` rows (per
target, per compared group, and the screening notes) it is built from. Columns (:data:`COLUMNS`):
``claim``, ``statistic`` (what ``value`` is), ``value`` (the effect size), ``p_value``, ``n`` (the
independent replicates: targets, or groups of one ranking), ``verdict`` (:data:`VERDICTS`),
``ci_low``/``ci_high`` (the effect's 95% interval), ``mde`` (the smallest effect the design detects: see
below), ``level`` (``claim``, ``detail`` or ``note``), ``target`` and ``reason``.

A verdict is ``supported`` when the test is significant (alpha = :data:`ALPHA`, two-sided) in the
claimed direction, ``contradicted`` when it is significant against it, and ``inconclusive`` otherwise,
with the reason: too few replicates for any test to reach alpha, or an effect below what the design
detects. Replicates are independent: targets (each its own finetuning runs and P(f)), never the
repeated values of one measurement; one ranking is tested by its own exact permutation distribution.

- C1 (P(f) ranking MHA > FC1 > FC2 > LN2 > LN1): ONE ranking of the model, the groups' P(f) averaged
  over targets; Kendall tau-b against the paper's order, p from the exact distribution over every
  ordering of the groups (5! = 120); ``mde``: the smallest |tau| that can reach p < alpha (1.0 for 5
  groups: only the paper's order or its reverse is decidable). CI: percentile bootstrap over targets.
  Detail rows: each target's tau and exact p.
- C2 (higher P(f), higher accuracy) and C4 (gradient norms follow P(f)): per target, Spearman rho over
  the groups (exact permutation p); pooled: the mean rho over targets, its t interval, the exact
  Wilcoxon signed-rank p against 0 (n targets), ``mde`` = (t_.975 + t_.80) x sd / sqrt(n) (80% power).
- C3 (MHA better than FC2, LN2, LN1, no worse than FC1): per compared group, the mean decrease from MHA
  (points, Table 6 accuracies) over targets, tested as C2. "No worse": contradicted when significantly
  below, supported when the interval's low end is above -:data:`MARGIN` points, else inconclusive.
  The claim: contradicted when a part is, supported when every part is, else inconclusive.
- C5 (MHA most robust to learning rate and seed): per target and group, the sample std of the test
  accuracy (%) over the lr x seed runs on the target's common grid; per other group, its spread minus
  MHA's, tested as C3's parts; the claim combines the parts as C3.

Groups are compared on one learning-rate grid: per target, only the learning rates every group ran
(the others are left out of the claims, noted). A group whose chosen rate is at the grid's edge is
noted (its best may lie outside). A target where every group stays within :data:`MAJORITY_SLACK` of
the majority class (``majority_acc`` of the records) is left out of every claim, with the reason.
P(f) of a target is the mean over blocks (and over its analysis runs) of ``plasticity.csv`` of its
``task=plasticity`` records; without them, the first logged ``plasticity/<group>`` of its chosen runs.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np
from scipy import stats

from plasticity.components import GROUPS, label
from plasticity.report.tables import AVERAGE, Cells, means_by, wilcoxon_p
from plasticity.runs.io import blank

__all__ = ["ALPHA", "CLAIMS", "COLUMNS", "ClaimInputs", "PAPER_RANKING", "chosen_runs", "claim_inputs",
           "evaluate_claims", "exact_rank_p", "kendall_distance", "kendall_vs_paper", "screen", "verdict_text"]

ALPHA = 0.05
"""Significance level of every test: the paper's (Table 1 marks p < 0.05)."""
POWER = 0.8
"""The power at which ``mde`` is the smallest detectable effect."""
MIN_TARGETS = 6
"""Fewest targets with which a two-sided exact Wilcoxon test can reach p < :data:`ALPHA` (2 / 2**6)."""
MIN_GROUPS = 3
"""Fewest groups a per-target correlation needs: over 2 a rank correlation is always +1 or -1."""
MARGIN = 1.0
"""Points of accuracy within which "MHA no worse than FC1" holds (non-inferiority margin)."""
MAJORITY_SLACK = 0.5
"""Points above the majority class within which a group is "stuck at the majority class"."""
PAPER_RANKING = ("mha", "fc1", "fc2", "ln2", "ln1")
"""The paper's plasticity ranking (Sec. 5.1), most plastic first."""
SUPPORTED, CONTRADICTED, INCONCLUSIVE = "supported", "contradicted", "inconclusive"
VERDICTS = (SUPPORTED, CONTRADICTED, INCONCLUSIVE)
CLAIMS = {"C1": "C1 plasticity ranking MHA > FC1 > FC2 > LN2 > LN1",
          "C2": "C2 higher plasticity gives higher finetuning accuracy",
          "C3": "C3 MHA is better than FC2, LN2, LN1 and no worse than FC1",
          "C4": "C4 gradient norms follow the plasticity ranking",
          "C5": "C5 MHA is the most robust to the learning rate and seed"}
"""Claim id -> the ``claim`` cell of its rows."""
COLUMNS = ("claim", "statistic", "value", "p_value", "n", "verdict", "ci_low", "ci_high", "mde", "level", "target",
           "reason")
POOLED = "pooled"
NO_PLASTICITY = ("no plasticity measured: no task=plasticity record with plasticity.csv and no plasticity/<group> "
                 "in the finetuning runs' metrics.csv")
NAN = float("nan")


@dataclass
class ClaimInputs:
    """What the claims are computed from.

    Attributes:
        rows: :func:`~plasticity.report.tables.table6` rows of the screened cells (accuracy at the chosen lr).
        cells: Done records per (target, configuration, lr) on each target's common grid (:func:`screen`).
        plasticity: Target -> group -> P(f).
        sources: Target -> where its P(f) came from (``task=plasticity`` or ``finetuning metrics step 0``).
        grad_norms: Target -> group -> mean gradient norm of its runs at the chosen learning rate.
        notes: Screening notes (:func:`screen`): ``(target, reason)``.
    """

    rows: list[dict] = field(default_factory=list)
    cells: Cells = field(default_factory=dict)
    plasticity: dict[str, dict[str, float]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    grad_norms: dict[str, dict[str, float]] = field(default_factory=dict)
    notes: list[tuple[str, str]] = field(default_factory=list)


# ------------------------------------------------------------------------------- statistics


def _tau(x: list[float], y: list[float]) -> float:
    return float(stats.kendalltau(x, y).statistic)


def _rho(x: list[float], y: list[float]) -> float:
    return float(stats.spearmanr(x, y).statistic)


def exact_rank_p(x: list[float], y: list[float], statistic: Callable = _tau) -> float:
    """Two-sided p of a rank correlation from its exact permutation distribution: the share of the
    orderings of ``y`` whose |statistic| reaches the observed one (n! orderings; NaN for a constant input)."""
    if len(set(x)) < 2 or len(set(y)) < 2:
        return NAN
    observed = abs(statistic(x, y))
    values = [abs(statistic(x, list(order))) for order in itertools.permutations(y)]
    return float(np.mean([v >= observed - 1e-12 for v in values]))


@functools.lru_cache(maxsize=None)
def decidable(n: int, statistic: Callable = _tau) -> float:
    """The smallest |statistic| over ``n`` distinct items whose exact permutation p is below alpha."""
    x = list(range(n))
    values = np.array([abs(statistic(x, list(order))) for order in itertools.permutations(x)])
    return next((float(v) for v in np.unique(values.round(12)) if np.mean(values >= v - 1e-12) < ALPHA), NAN)


def kendall_vs_paper(values: dict[str, float]) -> tuple[float, float, int]:
    """Kendall tau-b between ``values`` of the paper's groups and the paper's ranking, its exact
    permutation p, and the number of groups used; NaNs with fewer than 2 groups."""
    groups = [g for g in PAPER_RANKING if g in values]
    if len(groups) < 2:
        return NAN, NAN, len(groups)
    x, y = [values[g] for g in groups], [len(PAPER_RANKING) - PAPER_RANKING.index(g) for g in groups]  # MHA 5 .. LN1 1
    return _tau(x, y), exact_rank_p(x, y), len(groups)


def kendall_distance(values: dict[str, float]) -> int:
    """Pairs of the paper's groups (among those in ``values``) not strictly in the paper's order
    (a tie counts as a swap): 0 when the measured ranking is the paper's."""
    groups = [g for g in PAPER_RANKING if g in values]
    return sum(not values[a] > values[b] for i, a in enumerate(groups) for b in groups[i + 1:])


def ranking_text(values: dict[str, float]) -> str:
    """``"MHA > FC1 > ..."``: the groups by decreasing value."""
    return " > ".join(label(g) for g in sorted(values, key=lambda g: -values[g]))


@dataclass(frozen=True)
class Effect:
    """A mean over independent replicates: its 95% t interval, exact Wilcoxon p against 0, n and the
    smallest mean the design detects with :data:`POWER` at :data:`ALPHA` (from the replicates' sd)."""

    mean: float
    low: float
    high: float
    p: float
    n: int
    mde: float

    @classmethod
    def of(cls, values: Iterable[float]) -> "Effect":
        x = np.asarray([v for v in values if not math.isnan(v)], dtype=float)
        n = len(x)
        if n < 2:
            return cls(float(x.mean()) if n else NAN, NAN, NAN, NAN, n, NAN)
        sd, t = float(x.std(ddof=1)), float(stats.t.ppf(1 - ALPHA / 2, n - 1))
        half = t * sd / math.sqrt(n)
        mde = (t + float(stats.t.ppf(POWER, n - 1))) * sd / math.sqrt(n)
        p = wilcoxon_p(x, np.zeros_like(x))  # exact (n <= 25 targets) against 0, zeros dropped
        return cls(float(x.mean()), float(x.mean()) - half, float(x.mean()) + half, p, n, mde)


def too_few_targets(n: int) -> str | None:
    """The reason a Wilcoxon test over ``n`` targets cannot decide, or None when it can."""
    if n >= MIN_TARGETS:
        return None
    floor = f" (its smallest p over {n} is 2/2^{n} = {2 / 2 ** n:.3g})" if n >= 1 else ""
    return f"{n} target(s): the exact Wilcoxon test needs >= {MIN_TARGETS} to reach p < {ALPHA}{floor}"


def decide(effect: Effect) -> tuple[str, str]:
    """(verdict, reason) of the claim that ``effect.mean`` > 0 (see the module docstring)."""
    if math.isnan(effect.mean) or math.isnan(effect.p):
        return INCONCLUSIVE, too_few_targets(effect.n) or "undefined (a constant input, or every difference zero)"
    if effect.p < ALPHA:
        return (SUPPORTED if effect.mean > 0 else CONTRADICTED), ""
    reason = too_few_targets(effect.n)
    return INCONCLUSIVE, reason or (f"p {effect.p:.2g} >= {ALPHA}: an effect of {effect.mean:.3g} where the design "
                                    f"detects {effect.mde:.3g} ({POWER:.0%} power)")


def combined(cid: str, statistic: str, parts: list[dict], n: int) -> list[dict]:
    """A claim of several parts: its verdict row (value: the parts supported), then the parts. Contradicted
    when one part is, supported when all are, else inconclusive with its parts' reasons."""
    verdicts = [p["verdict"] for p in parts]
    verdict, reason = INCONCLUSIVE, "; ".join(dict.fromkeys(p["reason"] for p in parts if p["reason"]))
    if CONTRADICTED in verdicts or set(verdicts) == {SUPPORTED}:
        verdict, reason = (CONTRADICTED if CONTRADICTED in verdicts else SUPPORTED), ""
    return [row(cid, statistic, float(verdicts.count(SUPPORTED)), None, n, verdict, "claim", POOLED, reason)] + parts


# ------------------------------------------------------------------------------------- rows


def row(cid: str, statistic: str, value: float | None = None, p: float | None = None, n: int | None = None,
        verdict: str = INCONCLUSIVE, level: str = "detail", target: str = "", reason: str = "",
        ci: tuple[float, float] = (NAN, NAN), mde: float | None = None) -> dict:
    """One row of ``claims.csv`` (NaN numbers become empty)."""
    value, p, low, high, mde = (None if x is None or blank(x) == "" else x for x in (value, p, *ci, mde))
    return {"claim": CLAIMS.get(cid, cid), "statistic": statistic, "value": value, "ci_low": low, "ci_high": high,
            "p_value": p, "n": n, "mde": mde, "verdict": verdict, "level": level, "target": target, "reason": reason}


def effect_row(cid: str, statistic: str, effect: Effect, verdict: str, reason: str, level: str = "detail",
               target: str = "") -> dict:
    return row(cid, statistic, effect.mean, effect.p, effect.n, verdict, level, target, reason,
               (effect.low, effect.high), effect.mde)


def untestable(cid: str, statistic: str, reason: str) -> list[dict]:
    """The claim's verdict row when it cannot be tested."""
    return [row(cid, statistic, level="claim", target=POOLED, reason=reason)]


# ----------------------------------------------------------------------------------- claims


def accuracies(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Target -> group -> Table 6 test accuracy (%), the five groups only."""
    out: dict[str, dict[str, float]] = {}
    for group, by in means_by(rows).items():
        for target, acc in by.items() if group in GROUPS else ():
            out.setdefault(target, {})[group] = acc
    return out


def claim_c1(inputs: ClaimInputs) -> list[dict]:
    """C1: one ranking (P(f) averaged over targets) against the paper's, by its exact permutation p."""
    what = "Kendall tau-b between the groups' P(f) (mean over targets) and the paper's ranking"
    if not inputs.plasticity:
        return untestable("C1", what, NO_PLASTICITY)
    targets = {t: {g: v for g, v in p.items() if g in PAPER_RANKING} for t, p in sorted(inputs.plasticity.items())}
    targets = {t: p for t, p in targets.items() if len(p) >= MIN_GROUPS}
    groups = sorted(set.intersection(*(set(p) for p in targets.values())), key=PAPER_RANKING.index) if targets else []
    if len(groups) < MIN_GROUPS:
        return untestable("C1", what, f"fewer than {MIN_GROUPS} groups with P(f) on every target")
    mean = {g: float(np.mean([p[g] for p in targets.values()])) for g in groups}
    draws = np.random.default_rng(0).integers(0, len(targets), (1000, len(targets)))
    values = list(targets.values())
    boot = [kendall_vs_paper({g: np.mean([values[i][g] for i in d]) for g in groups})[0] for d in draws]
    ci = tuple(np.nanpercentile(boot, [2.5, 97.5])) if len(targets) > 1 else (NAN, NAN)
    statistic = f"{what} over n groups (measured: {ranking_text(mean)}); CI: bootstrap over {len(targets)} targets"
    head = _ranking_row(mean, statistic, level="claim", target=POOLED, ci=ci)
    if head["verdict"] == INCONCLUSIVE:
        n = head["n"]
        head["reason"] = (f"one ranking of {n} groups: only |tau| >= {decidable(n):.2g} reaches p < {ALPHA} (exact "
                          f"permutation over {math.factorial(n)} orderings)")
    return [head] + [_ranking_row(p, f"{what.replace(' (mean over targets)', '')} on this target (P(f) from "
                                     f"{inputs.sources.get(t, '?')}; measured: {ranking_text(p)})", target=t)
                     for t, p in targets.items()]


def _ranking_row(values: dict[str, float], statistic: str, **kwargs) -> dict:
    """A C1 row of one ranking: Kendall tau-b against the paper's, its exact permutation p, its verdict and
    ``mde``, the smallest |tau| that can reach p < alpha (:func:`decidable`)."""
    tau, p, n = kendall_vs_paper(values)
    verdict = (SUPPORTED if tau > 0 else CONTRADICTED) if p < ALPHA else INCONCLUSIVE
    return row("C1", statistic, tau, p, n, verdict, mde=decidable(n), **kwargs)


def claim_c2(inputs: ClaimInputs) -> list[dict]:
    """C2: Spearman rho between P(f) and finetuning accuracy, per target and pooled over targets."""
    return _correlations("C2", "Spearman rho between a group's P(f) and its test accuracy at the chosen lr", inputs,
                         accuracies(inputs.rows), "no target has both P(f) and finetuning accuracy")


def claim_c4(inputs: ClaimInputs) -> list[dict]:
    """C4: Spearman rho between mean gradient norm and P(f), per target and pooled over targets."""
    return _correlations("C4", "Spearman rho between a group's mean grad_norm/<group> and its P(f)", inputs,
                         inputs.grad_norms, "no target has both P(f) and gradient norms",
                         "no grad_norm/<group> logged in the finetuning runs' metrics.csv")


def _correlations(cid: str, what: str, inputs: ClaimInputs, other: dict[str, dict[str, float]], none: str,
                  unlogged: str = "") -> list[dict]:
    """Per target with at least 3 groups in both: Spearman rho of P(f) against ``other`` (exact p); pooled.
    Untestable without P(f), or (with ``unlogged``, its reason) when ``other`` holds nothing."""
    plasticity, sources = inputs.plasticity, inputs.sources
    if not plasticity or (unlogged and not any(other.values())):
        return untestable(cid, what, unlogged if plasticity else NO_PLASTICITY)
    details = []
    for target in sorted(set(plasticity) & set(other)):
        groups = [g for g in GROUPS if g in plasticity[target] and g in other[target]]
        if len(groups) >= MIN_GROUPS:
            x, y = [plasticity[target][g] for g in groups], [other[target][g] for g in groups]
            rho = _rho(x, y) if len(set(x)) > 1 and len(set(y)) > 1 else NAN
            p = exact_rank_p(x, y, _rho)
            verdict = (SUPPORTED if rho > 0 else CONTRADICTED) if p < ALPHA else INCONCLUSIVE
            details.append(row(cid, f"{what} over n groups (P(f) from {sources.get(target, '?')}); p: exact "
                                    f"permutation", rho, p, len(groups), verdict, target=target,
                               reason="" if p < ALPHA else "a constant input" if math.isnan(rho) else ""))
    if not details:
        return untestable(cid, what, f"{none} for at least {MIN_GROUPS} groups")
    effect = Effect.of(d["value"] for d in details if d["value"] is not None)  # the per-target rhos (NaN: None)
    statistic = (f"mean over targets of the per-target {what}; CI: t; p: two-sided exact Wilcoxon signed-rank vs 0 "
                 f"over n targets")
    return [effect_row(cid, statistic, effect, *decide(effect), level="claim", target=POOLED)] + details


C3_PARTS = (("fc2", "better"), ("ln2", "better"), ("ln1", "better"), ("fc1", "no worse"))
"""(group, relation) of the parts of C3: MHA better than, or no worse than, the group."""


def claim_c3(rows: list[dict]) -> list[dict]:
    """C3: per compared group, the mean decrease from MHA over targets (Table 6 accuracies), tested."""
    acc = accuracies(rows)
    parts = [_c3_part(group, relation, acc) for group, relation in C3_PARTS]
    statistic = (f"parts supported of 4 (MHA > FC2, LN2, LN1: mean decrease > 0 with p < {ALPHA}; MHA no worse than "
                 f"FC1: not significantly below, interval above -{MARGIN:g} point)")
    return combined("C3", statistic, parts, max((p["n"] or 0 for p in parts), default=0))


def _c3_part(group: str, relation: str, acc: dict[str, dict[str, float]]) -> dict:
    statistic = (f"MHA {'better than' if relation == 'better' else 'no worse than'} {label(group)}: mean decrease "
                 f"from MHA (points) over targets; CI: t; p: two-sided exact Wilcoxon signed-rank")
    diffs = [a["mha"] - a[group] for a in acc.values() if "mha" in a and group in a]
    if not diffs:
        return row("C3", statistic, target=f"vs {label(group)}", reason=f"no runs of MHA and {label(group)}")
    effect = Effect.of(diffs)
    verdict, reason = decide(effect)
    if relation == "no worse" and verdict != CONTRADICTED:  # "better" is not needed: not below by MARGIN is
        verdict = SUPPORTED if not too_few_targets(effect.n) and effect.low > -MARGIN else INCONCLUSIVE
        reason = "" if verdict == SUPPORTED else too_few_targets(effect.n) or (
            f"the interval reaches {effect.low:.3g}, below -{MARGIN:g} point")
    return effect_row("C3", statistic, effect, verdict, reason, target=f"vs {label(group)}")


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
    """C5: per other group, its spread of test accuracy over the lr x seed grid minus MHA's (> 0: MHA
    steadier), paired over targets and tested; the claim holds when MHA is steadier than each."""
    what = "std of test accuracy (%) over the lr x seed grid"
    by = spreads(cells)
    if "mha" not in by or len(by) < 2:
        return untestable("C5", what, "needs MHA and another group with at least 2 runs (lr x seed) on a target")
    parts = []
    for g in (g for g in GROUPS if g in by and g != "mha"):
        targets = sorted(set(by[g]) & set(by["mha"]))
        effect = Effect.of([by[g][t][0] - by["mha"][t][0] for t in targets])
        parts.append(effect_row("C5", f"{label(g)}'s {what} minus MHA's, mean over targets; CI: t; p: two-sided "
                                      f"exact Wilcoxon signed-rank", effect, *decide(effect), target=f"vs {label(g)}"))
    mean = {g: float(np.mean([s for s, _ in t.values()])) for g, t in by.items()}
    statistic = (f"parts supported of {len(parts)} (MHA's {what} below each other group's); mean spreads: "
                 + ", ".join(f"{label(g)} {mean[g]:.3g}" for g in sorted(mean, key=mean.get)))
    return combined("C5", statistic, parts, len(by["mha"]))


def evaluate_claims(inputs: ClaimInputs) -> list[dict]:
    """Every row of ``claims.csv``: per claim its verdict row, then its detail rows; then the screening notes
    (:func:`screen`, :func:`edge_notes`), one ``level=note`` row each."""
    claims = claim_c1(inputs) + claim_c2(inputs) + claim_c3(inputs.rows) + claim_c4(inputs) + claim_c5(inputs.cells)
    return claims + [row("screening", "what the claims compare", verdict="", level="note", target=target,
                         reason=reason) for target, reason in inputs.notes]


def screen(cells: Cells) -> tuple[Cells, list[tuple[str, str]]]:
    """The cells the claims compare, and why others are left out: per target, the learning rates every
    one of its groups ran (one grid), without a target where every group stays at the majority class;
    a group's chosen-grid edge is noted where the report picks it (:func:`edge_notes`)."""
    notes, kept = [], {}
    for target in sorted({t for t, _, _ in cells}):
        mine = {k: v for k, v in cells.items() if k[0] == target}
        groups = {g for _, g, _ in mine if g in GROUPS}
        grids = [{lr for _, g2, lr in mine if g2 == g} for g in groups]
        common = set.intersection(*grids) if grids else set()
        dropped = sorted({lr for _, g, lr in mine if g in GROUPS and lr not in common}, key=str)
        if dropped:
            notes.append((target, f"learning rates {', '.join(map(str, dropped))} not run by every group: left out "
                                  f"(one grid for every group: {', '.join(map(str, sorted(common, key=str)))})"))
        if stuck := _stuck(mine, groups):
            notes.append((target, stuck))
            continue
        kept.update({k: v for k, v in mine.items() if k[1] not in GROUPS or k[2] in common})
    return kept, notes


def _stuck(cells: Cells, groups: set[str]) -> str:
    """Why a target is left out when every group's runs stay at the majority class ("" when not)."""
    records = [r for (_, g, _), rs in cells.items() if g in groups for r in rs]
    majority = [r.get("majority_acc") for r in records]
    if not records or any(m is None for m in majority):
        return ""
    best = max(100.0 * r["test_acc"] - 100.0 * r["majority_acc"] for r in records)
    if best > MAJORITY_SLACK:
        return ""
    return (f"every group stays at the majority class ({100 * max(majority):.1f}% of the test set; the best run "
            f"is {best:+.2f} points from it): the groups cannot differ here")


def edge_notes(rows: list[dict], cells: Cells) -> list[tuple[str, str]]:
    """(target, note) for each group whose chosen learning rate is the smallest or largest of its grid."""
    notes = []
    for r in rows:
        if r["dataset"] == AVERAGE or r["group"] not in GROUPS or r.get("lr") is None:
            continue
        grid = sorted(lr for t, g, lr in cells if t == r["dataset"] and g == r["group"])
        if len(grid) >= 2 and r["lr"] in (grid[0], grid[-1]):
            notes.append((r["dataset"], f"{label(r['group'])}: chosen lr {r['lr']} is at the edge of the grid "
                                        f"{grid[0]}..{grid[-1]}: its best may lie outside"))
    return notes


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
    """The verdict, with the reason when it is inconclusive."""
    return f"{r['verdict']} ({r['reason']})" if r["reason"] else r["verdict"]

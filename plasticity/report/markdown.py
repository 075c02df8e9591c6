"""The markdown of ``report.md``: tables of rows, Table 6, the Claims section, and the sections listing
what went wrong (runs not done, missing runs, files that could not be used). Pure functions returning text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from plasticity.report.claims import ALPHA, MIN_TARGETS, verdict_text
from plasticity.components import is_probe
from plasticity.report.tables import (AVERAGE, LINEAR_PROBE, PROBE, column_labels, linear_probe_baseline,
                                      ordered_groups, partial_averages)
from plasticity.runs.io import blank
from plasticity.runs.stop import INTERRUPTED

PROBLEMS_HEADING = "## Problems (files that could not be used)"


def md_table(header: list[str], body: list[list[str]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body]) + "\n"


def cell(text: Any) -> str:
    """``text`` as one table cell: ``|`` becomes ``/``, newlines become spaces."""
    return str(text).replace("|", "/").replace("\n", " ")


def fmt(value: Any) -> str:
    """A value for a table: floats with 4 significant digits (NaN and None empty), the rest as text."""
    value = blank(value)
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def fmt_params(n: float | None) -> str:
    """A parameter count in 3 significant digits: ``28348416`` -> ``28.3M``, ``18432`` -> ``18.4K``,
    ``100`` -> ``100``; None -> ``""``."""
    if n is None:
        return ""
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{suffix}"
    return f"{n:.3g}" if isinstance(n, float) and not float(n).is_integer() else str(int(n))


PROBE_NOTES = {
    PROBE: "linear probing: logistic-regression probe (task=linear_probe)",
    LINEAR_PROBE: "linear probing: SGD on the head (component=head); run task=linear_probe for the paper's baseline",
    None: "linear probing: none in this sweep; run task=linear_probe for the paper's baseline (a logistic "
          "regression on frozen features)",
}
"""What "linear probing" (the last Table 6 column and the relative gain's baseline) is, per
:func:`~plasticity.report.tables.linear_probe_baseline`."""


def probe_note(groups) -> str:
    """The line saying which configuration stands for linear probing (:data:`PROBE_NOTES`)."""
    baseline = linear_probe_baseline(groups)
    if baseline is not None and is_probe(baseline) and baseline != PROBE:  # only a variant on other features
        return f"linear probing: logistic-regression probe {baseline} (task=linear_probe)"
    return PROBE_NOTES[baseline]


def rows_md(rows: list[dict], columns: list[str]) -> str:
    """A markdown table of dict rows."""
    return md_table(columns, [[fmt(r.get(c, "")) for c in columns] for r in rows])


def table6_md(rows: list[dict]) -> str:
    """Datasets as rows, configurations as columns headed by their label and trainable parameters
    (the average row's median, e.g. "MHA (28.3M)"), cells "mean ± std" (average row and cells of one
    seed: mean only). An average over fewer datasets than the others says over how many ("84.38
    (1 of 6)"): it is not comparable with the averages beside it."""
    groups = ordered_groups(r["group"] for r in rows)
    by = {(r["dataset"], r["group"]): r for r in rows}
    labels = column_labels(groups)
    params = {r["group"]: r.get("params") for r in rows if r["dataset"] == AVERAGE}
    datasets = sorted({r["dataset"] for r in rows} - {AVERAGE}) + [AVERAGE]
    most, partial = partial_averages(rows)
    body = [[d] + [_table6_cell(by.get((d, g)), partial, most) for g in groups] for d in datasets]
    header = [labels[g] + (f" ({fmt_params(params[g])})" if params.get(g) is not None else "") for g in groups]
    return md_table(["dataset"] + header, body)


def _table6_cell(row: dict | None, partial: dict[str, int], most: int) -> str:
    """One Table 6 cell: "mean ± std", the mean alone (an average, one seed), and an average over
    fewer datasets than the others with their count (see :func:`table6_md`)."""
    if row is None:
        return ""
    if row["dataset"] == AVERAGE:
        count = partial.get(row["group"])
        return f"{row['mean']:.2f}" + (f" ({count} of {most})" if count else "")
    return f"{row['mean']:.2f}" if row.get("n_seeds", 2) < 2 else f"{row['mean']:.2f} ± {row['std']:.2f}"


def claims_md(rows: list[dict]) -> str:
    """The Claims section of report.md: the five verdicts, the rules, then every detail row
    (:func:`plasticity.report.claims.evaluate_claims` rows)."""
    heads, details, notes = ([{**r, "verdict": verdict_text(r)} for r in rows if r["level"] == level]
                             for level in ("claim", "detail", "note"))
    text = (f"## Claims\n\nThe paper's claims tested on this sweep ([claims.csv](claims.csv)), alpha = {ALPHA}, "
            "two-sided: supported (significant in the claimed direction), contradicted (significant against it) or "
            "inconclusive (not significant: the reason says whether any test could decide, and the effect the design "
            "detects with 80% power, mde). Replicates are targets; C1 tests the one ranking of the groups' P(f) by "
            "its exact permutation distribution. C2, C4: per-target Spearman rho, mean over targets, exact Wilcoxon "
            f"(>= {MIN_TARGETS} targets). C3, C5: differences from MHA over targets (accuracy; spread over the lr x "
            "seed grid), tested likewise. Groups are compared on one learning-rate grid per target.\n\n"
            + rows_md(heads, ["claim", "verdict", "value", "ci_low", "ci_high", "p_value", "n", "mde", "statistic"]))
    if details:
        text += ("\n<details><summary>Per target and per group</summary>\n\n"
                 + rows_md(details, ["claim", "target", "value", "ci_low", "ci_high", "p_value", "n", "verdict",
                                     "statistic"])
                 + "\n</details>\n")
    if notes:
        text += "\nLeft out or noted:\n\n" + "".join(f"- {r['target']}: {r['reason']}\n" for r in notes)
    return text


def not_done_md(runs: list[tuple[Path, dict]]) -> str:
    """The runs whose status is not ``done``, with their error ("None." when none): the interrupted
    ones first, apart (stopped by a signal or the disk, with the step reached: a relaunch resumes
    them), then the failed and diverged ones."""
    stopped = [[INTERRUPTED, str(d), str(r.get("step", "")), cell(r.get("error", ""))]
               for d, r in runs if r.get("status") == INTERRUPTED]
    bad = [[str(r.get("status")), str(d), cell(r.get("error", ""))]
           for d, r in runs if r.get("status") not in ("done", INTERRUPTED)]
    text = ("Interrupted (a relaunch of the same command resumes them from their last checkpoint):\n\n"
            + md_table(["status", "run_dir", "step", "error"], stopped) + ("\nFailed or diverged:\n\n" if bad else "")
            if stopped else "")
    return (text + (md_table(["status", "run_dir", "error"], bad) if bad else "")) or "None.\n"


def problems_md(runs: list[tuple[Path, dict]], missing: list[dict], problems: list[tuple[str, str]] = ()) -> str:
    """The sections listing runs that are not done, cells with missing seeds (a table of them), and files
    that could not be used (each by path, with the reason; they enter no table); "None." for an empty one."""
    missing = [{**m, "missing_seeds": ", ".join(map(str, m["missing_seeds"]))} for m in missing]
    return ("## Runs not done\n\n" + not_done_md(runs)
            + "\n## Missing runs (cells with fewer done seeds than the sweep)\n\n"
            + (rows_md(missing, ["dataset", "group", "lr", "n_seeds", "missing_seeds"]) if missing else "None.\n")
            + f"\n{PROBLEMS_HEADING}\n\n"
            + (md_table(["path", "problem"], [[cell(path), cell(reason)] for path, reason in problems]) if problems
               else "None.\n"))

"""Plasticity through pretraining: when the measured ranking of the groups becomes the paper's.

From ``plasticity_during_training.csv`` of a ``task=pretrain`` run (read by
:func:`plasticity.report.collect.read_during_training` as step -> group -> P(f), mean over blocks;
step 0 is the random init), per measured step: the ranking, Kendall tau-b against the paper's
MHA > FC1 > FC2 > LN2 > LN1 and the Kendall distance (pairs of groups not strictly in the paper's
order, a tie counting as one: the number of rank swaps left). Pure functions; the report writes
``pretraining_ranking.csv`` and the summary prints :func:`sentence`.
"""

from __future__ import annotations

from plasticity.components import label
from plasticity.report.claims import PAPER_RANKING, kendall_distance, kendall_vs_paper, ranking_text

__all__ = ["RANKING_COLUMNS", "first_match", "ranking_rows", "sentence"]

RANKING_COLUMNS = ("run", "step", "ranking", "kendall_tau", "kendall_distance", "matches_paper", "n_groups")
PAPER_TEXT = " > ".join(map(label, PAPER_RANKING))
"""The paper's ranking as text: ``MHA > FC1 > FC2 > LN2 > LN1``."""


def ranking_rows(curves: dict[int, dict[str, float]], run: str = "") -> list[dict]:
    """Per measured step (ascending): the ranking of the paper's groups by P(f), Kendall tau-b
    against the paper's ranking, the Kendall distance and whether the ranking is the paper's (all
    five groups measured and distance 0).

    Args:
        curves: Step -> group -> P(f) (mean over blocks).
        run: Names the run in every row (e.g. its folder).
    """
    out = []
    for step, values in sorted(curves.items()):
        values = {g: v for g, v in values.items() if g in PAPER_RANKING}
        if not values:
            continue
        distance = kendall_distance(values)
        out.append({"run": run, "step": step, "ranking": ranking_text(values),
                    "kendall_tau": kendall_vs_paper(values)[0], "kendall_distance": distance,
                    "matches_paper": distance == 0 and len(values) == len(PAPER_RANKING), "n_groups": len(values)})
    return out


def first_match(rows: list[dict]) -> int | None:
    """The first step whose ranking is the paper's, or None."""
    return next((r["step"] for r in rows if r["matches_paper"]), None)


def sentence(rows: list[dict]) -> str:
    """Where the paper's ranking first appears and how many swaps remain at the last measured step."""
    if not rows:
        return "no plasticity measured during pretraining"
    last, step = rows[-1], first_match(rows)
    first = (f"the measured ranking first matches the paper's {PAPER_TEXT} at step {step}" if step is not None
             else f"the measured ranking never matches the paper's {PAPER_TEXT}")
    swaps = "swap" if last["kendall_distance"] == 1 else "swaps"
    return (f"{first} ({len(rows)} measured steps, {rows[0]['step']} to {last['step']}); at the end (step "
            f"{last['step']}): {last['ranking']}, {last['kendall_distance']} rank {swaps} from the paper's "
            f"(Kendall distance; tau {last['kendall_tau']:.2f})")

"""``component=auto``: the pretrained model's measured plasticity chooses what trains.

Before training, P(f) of every group in every block of the pretrained model is measured in the
paper's embedding mode on ``n_pairs`` pairs (reference test image, target *train* image, in
order: the same pairs for every seed, so the same choice). Then:

- ``budget=None``: the most plastic group (mean over blocks) trains, in every block, as
  ``component=<that group>`` would;
- ``budget=b`` (a fraction of the model's parameters): (group, block) units are taken from the
  most plastic down, each one that still fits in ``b x`` the model's parameter count, until none
  fits (the most plastic unit alone when even it does not fit, with a warning).

Example:
    >>> table = measure_units(net, batches)                  # doctest: +SKIP
    >>> units = choose(table, budget=0.05, total=n_params)   # doctest: +SKIP
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Iterator

from plasticity.components import GROUPS, classify

if TYPE_CHECKING:
    import torch
    import torch.nn as nn

__all__ = ["choose", "measure_units", "unit_name", "unit_params"]

log = logging.getLogger(__name__)
Unit = tuple[str, "int | None"]


def unit_params(model: "nn.Module") -> dict[tuple[str, int], int]:
    """Parameters of each (group, block) unit of the five groups."""
    counts: dict[tuple[str, int], int] = {}
    for name, param in model.named_parameters():
        group, block = classify(name)
        if group in GROUPS and block is not None:
            counts[(group, block)] = counts.get((group, block), 0) + param.numel()
    return counts


def measure_units(model: "nn.Module", batches: Iterator["torch.Tensor"]) -> list[dict]:
    """P(f) of every (group, block) in embedding mode, with each unit's parameter count.

    Returns:
        Rows ``{group, block, mean, std, n_pairs, params}`` in block-then-group order.
    """
    import torch

    from plasticity.measure import measure

    was_training = model.training
    model.eval()
    with torch.no_grad():
        rows = measure(model, batches, "embedding", GROUPS).summary()
    model.train(was_training)
    params = unit_params(model)
    return [{"group": r["group"], "block": int(r["block"]), "mean": float(r["mean"]), "std": float(r["std"]),
             "n_pairs": int(r["n_pairs"]), "params": params.get((r["group"], int(r["block"])), 0)} for r in rows]


def choose(table: list[dict], budget: float | None, total: int) -> list[Unit]:
    """The units to train (see the module docstring); ties go to the earlier group and block.

    Args:
        table: :func:`measure_units` rows.
        budget: None (one whole group) or a fraction in (0, 1] of ``total``.
        total: The model's parameter count.
    """
    if budget is None:
        means: dict[str, list[float]] = {}
        for row in table:
            means.setdefault(row["group"], []).append(row["mean"])
        best = max(GROUPS, key=lambda g: (sum(means.get(g, [float("-inf")])) / max(len(means.get(g, [])), 1),
                                          -GROUPS.index(g)))
        return [(best, None)]
    limit = budget * total
    ranked = sorted(table, key=lambda r: (-r["mean"], r["block"], GROUPS.index(r["group"])))
    chosen, used = [], 0
    for row in ranked:
        if used + row["params"] <= limit:
            chosen.append((row["group"], row["block"]))
            used += row["params"]
    if not chosen:
        top = ranked[0]
        log.warning("component.auto.budget=%s (%d parameters) fits no (group, block) unit; training the most "
                    "plastic one, %s (%d parameters)", budget, int(limit), unit_name((top["group"], top["block"])),
                    top["params"])
        chosen = [(top["group"], top["block"])]
    return chosen


def unit_name(unit: Unit) -> str:
    """``("mha", None)`` -> ``mha``; ``("fc1", 3)`` -> ``fc1@3``."""
    group, block = unit
    return group if block is None else f"{group}@{block}"

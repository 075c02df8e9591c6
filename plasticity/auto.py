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
    >>> selection, fields = auto_select(cfg, net, datamodule)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Iterator

from omegaconf import DictConfig

from plasticity.components import GROUPS, Selection, classify, select_units

if TYPE_CHECKING:
    import torch
    import torch.nn as nn

    from plasticity.data.datamodule import DataModule

__all__ = ["auto_select", "choose", "measure_units", "unit_name", "unit_params"]

log = logging.getLogger(__name__)
Unit = tuple[str, "int | None"]


def auto_select(cfg: DictConfig, net: "nn.Module", datamodule: "DataModule") -> tuple[Selection, dict[str, Any]]:
    """Measures every (group, block) of the pretrained ``net`` on (``component.auto.reference``
    test, target train) pairs and selects what :func:`choose` picks.

    Returns:
        The selection and the record's fields on it: ``selected``, ``auto_table``, ``auto_s``.
    """
    from plasticity.data import load_splits
    from plasticity.data.augment import input_transform
    from plasticity.measure import pair_batches, pair_indices
    from plasticity.recipes.base import paired_inputs

    auto, spec = cfg.component.auto, datamodule.spec
    started = time.perf_counter()
    ref = load_splits(spec.replace(name=auto.reference, limit=None, num_classes=None))
    # window: text tokens per pair; the JPEG path's train split is decoded as the eval splits are
    ref, target, _ = paired_inputs(ref, datamodule.splits, cfg.dataset.get("window"), "train", spec.img_size)
    indices = pair_indices(len(ref), len(target), auto.n_pairs, "sequential")
    transform = input_transform(net, cfg.dataset)  # token ids pass as they are
    table = measure_units(net, pair_batches(ref, target, indices, auto.batch_size, transform))
    units = choose(table, auto.budget, sum(p.numel() for p in net.parameters()))
    fields = {"selected": [unit_name(u) for u in units], "auto_table": table,
              "auto_s": round(time.perf_counter() - started, 2)}
    log.info("component=auto: measured %d (group, block) units on %d pairs in %.1f s; training %s",
             len(table), auto.n_pairs, fields["auto_s"], ", ".join(fields["selected"]))
    return select_units(net, units, cfg.component.train_final_norm), fields


def unit_params(model: "nn.Module") -> dict[tuple[str, int], int]:
    """Parameters of each (group, block) unit of the five groups."""
    counts: dict[tuple[str, int], int] = {}
    for name, param in model.named_parameters():
        group, block = classify(name, len(model.blocks))
        if group in GROUPS and block is not None:
            counts[(group, block)] = counts.get((group, block), 0) + param.numel()
    return counts


def measure_units(model: "nn.Module", batches: Iterator["torch.Tensor"]) -> list[dict]:
    """P(f) of every (group, block) in embedding mode, with each unit's parameter count.

    Returns:
        Rows ``{group, block, mean, std, n_pairs, params}`` in block-then-group order.
    """
    from plasticity.measure import measure

    rows, params = measure(model, batches, "embedding", GROUPS).summary(), unit_params(model)
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
        means = {g: [r["mean"] for r in table if r["group"] == g] or [float("-inf")] for g in GROUPS}
        return [(max(GROUPS, key=lambda g: (sum(means[g]) / len(means[g]), -GROUPS.index(g))), None)]
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

"""``task=bounds``: the upper bounds of paper Props. 1-4 per block, with token statistics measured
on the same pairs as ``task=plasticity`` (paper Sec. 4, Fig. 6).

Writes ``bounds.csv`` (``group, block, bound, value``), ``token_stats.json`` and ``bounds.png``.
"""

from __future__ import annotations

from typing import Any

from plasticity.recipes import register
from plasticity.recipes.base import AnalysisRecipe


@register
class Bounds(AnalysisRecipe):
    """Recipe of ``task=bounds``: token statistics on the pairs' images, then Props. 1-4 per block."""

    name = "bounds"

    def run(self) -> dict[str, Any]:
        from plasticity.bounds import NOT_COVERED, block_bounds, token_stats
        from plasticity.report.figures import plot_bounds
        from plasticity.runs.io import write_csv_atomic, write_json_atomic

        ref, down = self.setup_images()
        net = self.setup_net()
        with self.autocast():
            stats = token_stats(net, self.pairs(net, ref, down))
        rows = block_bounds(net, stats)
        write_csv_atomic(self.run_dir / "bounds.csv", rows, ("group", "block", "bound", "value"))
        summary = stats.summary()
        family = getattr(net, "family", "vit")
        if family in NOT_COVERED:  # a text model: no image energy; what the propositions do not bound, and why
            summary.pop("energy")
            summary["not_covered"] = NOT_COVERED[family]
        write_json_atomic(self.run_dir / "token_stats.json", summary)
        plot_bounds(rows, self.run_dir / "bounds.png")
        self.log_analysis(tables={"bounds": rows}, images={"bounds": self.run_dir / "bounds.png"},
                          summary={"token_stats": summary})
        return {"reference": self.cfg.task.reference, "n_pairs": self.cfg.task.n_pairs, "token_stats": summary}

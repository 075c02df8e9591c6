"""``task=plasticity``: P(f) of every group in every block of a pretrained model (paper Sec. 5.1).

Writes ``plasticity.csv`` (``group, block, depth_pct, mean, std, ci95_low, ci95_high, n_pairs,
distinct_pairs, mode`` + quantiles), ``plasticity.json`` (the ranking of groups by mean over
blocks), optionally ``rates.npy`` (``task.save_rates``: every per-pair rate, (K, n_pairs)), and
the figures ``plasticity_distribution.png`` and ``plasticity_depth.png`` (paper Fig. 3).

When ``task.n_pairs`` exceeds the distinct (reference, downstream) pairs the two test sets give,
pairs repeat: the run warns, records ``distinct_pairs``, and the 95% CI is computed over the
distinct pairs only (repeats add no information).
"""

from __future__ import annotations

import logging
from typing import Any

from plasticity.recipes import register
from plasticity.recipes.base import AnalysisRecipe

log = logging.getLogger(__name__)
CSV_COLUMNS = ("group", "block", "depth_pct", "mean", "std", "ci95_low", "ci95_high", "n_pairs", "distinct_pairs",
               "mode", "q05", "q50", "q95")


@register
class Plasticity(AnalysisRecipe):
    """Recipe of ``task=plasticity``."""

    name = "plasticity"

    named_by = (*AnalysisRecipe.named_by, "mode", "pairing")

    def distinct(self, n_ref: int, n_down: int) -> int:
        """Distinct pairs among the ``task.n_pairs`` drawn; warns when pairs repeat."""
        from plasticity.measure import distinct_pairs

        task = self.cfg.task
        distinct = distinct_pairs(n_ref, n_down, task.n_pairs, task.pairing, task.pairing_seed)
        if distinct < task.n_pairs:
            log.warning("task.n_pairs=%d but the test sets give only %d distinct %s pairs (reference %d x downstream "
                        "%d images): pairs repeat. The 95%% CI is computed over the %d distinct pairs; lower "
                        "task.n_pairs to %d or use task.pairing=random for i.i.d. pairs.", task.n_pairs, distinct,
                        task.pairing, n_ref, n_down, distinct, distinct)
        return distinct

    def run(self) -> dict[str, Any]:
        import lightning as L
        import numpy as np

        from plasticity.measure import measure, ranking
        from plasticity.report.figures import plot_depth, plot_distribution
        from plasticity.runs.io import atomic_path, write_csv_atomic, write_json_atomic

        L.seed_everything(self.cfg.seed, verbose=False)
        task = self.cfg.task
        ref, down = self.setup_images()
        distinct = self.distinct(len(ref), len(down))
        net = self.setup_net()
        saved: list[np.ndarray] = []
        on_rates = (lambda r: saved.append(r.float().cpu().numpy())) if task.save_rates else None
        with self.autocast():
            stats = measure(net, self.pairs(net, ref, down), task.mode, tuple(task.groups), on_rates)
        rows = stats.summary(distinct=distinct)
        self.check_distinct(rows)
        for row in rows:  # Fig. 3: 0 % to 100 %
            row.update(depth_pct=100.0 * row["block"] / max(len(net.blocks) - 1, 1), mode=task.mode)
        write_csv_atomic(self.run_dir / "plasticity.csv", rows, CSV_COLUMNS)
        order = ranking(rows)
        summary = {"mode": task.mode, "pairing": task.pairing, "pairs_from": self.pairs_from, "n_pairs": task.n_pairs,
                   "distinct_pairs": distinct, "reference": task.reference, "dataset": self.cfg.dataset.name,
                   "model": self.cfg.model.name, "ranking": [{"group": g, "mean": m} for g, m in order]}
        if getattr(net, "bos_token_id", None) is not None:  # a decoder's windows: the attention sink left out
            summary["window_start"] = f"BOS token {net.bos_token_id}, prepended to x and y (plasticity.measure.with_bos)"
        write_json_atomic(self.run_dir / "plasticity.json", summary)
        if saved:  # atomically, as every file of a run: a reader never sees half an array
            with atomic_path(self.run_dir / "rates.npy") as tmp:
                np.save(tmp, np.concatenate(saved, axis=1))
        title = f"{self.cfg.model.name}: {task.reference} vs {self.cfg.dataset.name} ({task.mode})"
        plot_distribution(stats, self.run_dir / "plasticity_distribution.png", title=title)
        plot_depth(rows, self.run_dir / "plasticity_depth.png", title=title)
        log.info("plasticity ranking: %s", " > ".join(f"{g} ({m:.3f})" for g, m in order))
        figures = {name: self.run_dir / f"{name}.png" for name in ("plasticity_distribution", "plasticity_depth")}
        self.log_analysis(tables={"plasticity": rows}, images=figures, summary={f"plasticity/{g}": m for g, m in order})
        return {k: v for k, v in summary.items() if k not in ("dataset", "model")}  # those two: the record's identity

    def check_distinct(self, rows: list[dict]) -> None:
        """Pairs of identical images have no rate: none left is an error, some a warning."""
        task = self.cfg.task
        kept = min(r["n_pairs"] for r in rows)
        if kept == 0:
            raise ValueError(f"no distinct pair: every reference image equals its downstream image (task.reference="
                             f"{task.reference!r}, dataset={self.cfg.dataset.name!r}, pairing={task.pairing!r}). "
                             f"Fix: a different reference or downstream dataset.")
        if kept < task.n_pairs:
            log.warning("%d of %d pairs were identical images and were left out", task.n_pairs - kept, task.n_pairs)

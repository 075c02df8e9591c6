"""``task=plasticity`` and ``task=bounds``: the paper's analyses of a pretrained model.

Both stream pairs (x, y) of a reference image (``task.reference``, ImageNet in the paper) and a
downstream image (``dataset``), from the test split of each, through the model on its device.

- ``plasticity`` writes ``plasticity.csv`` (``group, block, depth_pct, mean, std, ci95_low,
  ci95_high, n_pairs, mode`` + quantiles), ``plasticity.json`` (the ranking of groups by mean over
  blocks), optionally ``rates.npy`` (``task.save_rates``: every per-pair rate, (K, n_pairs)), and
  the figures ``plasticity_distribution.png`` and ``plasticity_depth.png`` (paper Fig. 3).
- ``bounds`` writes ``bounds.csv`` (``group, block, bound, value``), ``token_stats.json`` and
  ``bounds.png`` (paper Fig. 6).
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Iterator

import lightning as L
import numpy as np
import torch
from omegaconf import DictConfig

from plasticity.augment import DeviceTransform
from plasticity.bounds import block_bounds, token_stats
from plasticity.data import ArraySet, check_data, ensure_data, load_splits
from plasticity.figures import plot_bounds, plot_depth, plot_distribution
from plasticity.measure import measure, pair_indices, ranking
from plasticity.models import create_model, image_size, input_size
from plasticity.results import atomic_path, write_csv_atomic, write_json_atomic

log = logging.getLogger(__name__)
CSV_COLUMNS = ("group", "block", "depth_pct", "mean", "std", "ci95_low", "ci95_high", "n_pairs", "mode",
               "q05", "q50", "q95")


def device(name: str) -> torch.device:
    """``auto``: CUDA when available, else CPU."""
    return torch.device(("cuda" if torch.cuda.is_available() else "cpu") if name == "auto" else name)


class Analysis:
    """Shared setup: the model on its device in eval mode and the stream of image pairs.

    Args:
        cfg: The composed job config.
        run_dir: The run's own directory.
    """

    def __init__(self, cfg: DictConfig, run_dir: Path) -> None:
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.device = device(cfg.task.device)

    def setup_images(self) -> tuple[ArraySet, ArraySet]:
        """Test splits of the reference and downstream datasets (checked before loading)."""
        data, task = self.cfg.dataset, self.cfg.task
        names = (task.reference, data.name)
        for name in names:  # every problem reported before anything is generated or loaded
            check_data(name, self.cfg.paths.data_dir, severity=data.severity, download=data.download)
        for name in names:
            ensure_data(name, self.cfg.paths.data_dir, download=data.download)
        model = self.cfg.model
        img_size = input_size(model.name, model.get("kwargs"))
        load = lambda name, classes=None: load_splits(  # noqa: E731
            name, self.cfg.paths.data_dir, severity=data.severity, img_size=img_size, num_classes=classes,
            prepared_dir=self.cfg.paths.get("prepared_dir")).test
        return load(task.reference), load(data.name, data.get("num_classes"))

    def setup_net(self, num_classes: int = 10) -> torch.nn.Module:
        model = self.cfg.model
        net = create_model(model.name, num_classes, pretrained=model.pretrained,
                           weights_file=model.weights_file, **model.kwargs)
        return net.to(self.device).eval()

    def autocast(self):
        if self.cfg.task.precision == "bf16-mixed" and self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return nullcontext()

    def pairs(self, net: torch.nn.Module, ref: ArraySet, down: ArraySet) -> Iterator[torch.Tensor]:
        """Batches of 2B transformed images on the device: B reference images, then B downstream."""
        task, data = self.cfg.task, self.cfg.dataset
        ri, di = pair_indices(len(ref), len(down), task.n_pairs, task.pairing, task.pairing_seed)
        transform = DeviceTransform(image_size(net), data.mean, data.std, train=False).to(self.device)
        for start in range(0, task.n_pairs, task.batch_size):
            stop = start + task.batch_size
            x = torch.from_numpy(ref.images[ri[start:stop]]).permute(0, 3, 1, 2)
            y = torch.from_numpy(down.images[di[start:stop]]).permute(0, 3, 1, 2)
            yield torch.cat([transform(t.to(self.device, non_blocking=True)) for t in (x, y)])


class Plasticity(Analysis):
    """Recipe of ``task=plasticity``."""

    def run(self) -> dict[str, Any]:
        L.seed_everything(self.cfg.seed)
        task = self.cfg.task
        ref, down = self.setup_images()
        net = self.setup_net()
        saved: list[np.ndarray] = []
        on_rates = (lambda r: saved.append(r.float().cpu().numpy())) if task.save_rates else None
        with self.autocast():
            stats = measure(net, self.pairs(net, ref, down), task.mode, tuple(task.groups), on_rates)
        rows = stats.summary()
        distinct = min(r["n_pairs"] for r in rows)
        if distinct == 0:
            raise ValueError(
                f"no distinct pair: every reference image equals its downstream image "
                f"(task.reference={task.reference!r}, dataset={self.cfg.dataset.name!r}, "
                f"pairing={task.pairing!r}). Fix: a different reference or downstream dataset.")
        if distinct < task.n_pairs:
            log.warning("%d of %d pairs were identical images and were left out", task.n_pairs - distinct, task.n_pairs)
        depth = len(net.blocks)
        for row in rows:
            row.update(depth_pct=100.0 * row["block"] / max(depth - 1, 1), mode=task.mode)
        write_csv_atomic(self.run_dir / "plasticity.csv", rows, CSV_COLUMNS)
        order = ranking(rows)
        summary = {
            "mode": task.mode, "pairing": task.pairing, "n_pairs": task.n_pairs,
            "reference": task.reference, "dataset": self.cfg.dataset.name, "model": self.cfg.model.name,
            "ranking": [{"group": g, "mean": m} for g, m in order],
        }
        write_json_atomic(self.run_dir / "plasticity.json", summary)
        if saved:
            with atomic_path(self.run_dir / "rates.npy") as tmp:
                np.save(tmp, np.concatenate(saved, axis=1))
        plot_distribution(stats, self.run_dir / "plasticity_distribution.png", title=self._title())
        plot_depth(rows, self.run_dir / "plasticity_depth.png", title=self._title())
        log.info("plasticity ranking: %s", " > ".join(f"{g} ({m:.3f})" for g, m in order))
        return {k: summary[k] for k in ("mode", "pairing", "n_pairs", "reference", "ranking")}

    def _title(self) -> str:
        return f"{self.cfg.model.name}: {self.cfg.task.reference} vs {self.cfg.dataset.name} ({self.cfg.task.mode})"


class Bounds(Analysis):
    """Recipe of ``task=bounds``: token statistics on the pairs' images, then Props. 1-4 per block."""

    def run(self) -> dict[str, Any]:
        ref, down = self.setup_images()
        net = self.setup_net()
        with self.autocast():
            stats = token_stats(net, self.pairs(net, ref, down))
        rows = block_bounds(net, stats)
        write_csv_atomic(self.run_dir / "bounds.csv", rows, ("group", "block", "bound", "value"))
        summary = stats.summary()
        write_json_atomic(self.run_dir / "token_stats.json", summary)
        plot_bounds(rows, self.run_dir / "bounds.png")
        return {"reference": self.cfg.task.reference, "n_pairs": self.cfg.task.n_pairs, "token_stats": summary}

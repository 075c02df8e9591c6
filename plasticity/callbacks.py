"""Lightning callbacks of the framework: :class:`PlasticityCallback` (P(f) logged during training)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

import lightning as L
import numpy as np
import torch

from plasticity.data import DataSpec, load_splits
from plasticity.measure import as_inputs, disjoint, measure, pair_indices, pair_inputs
from plasticity.runs.checkpoints import DURING_TRAINING
from plasticity.runs.io import write_csv_atomic
from plasticity.schema import PlasticityCallback as Options
from plasticity.schema import check_node
from plasticity.validate import ConfigError

log = logging.getLogger(__name__)


class PlasticityCallback(L.Callback):
    """Measures the plasticity of each group during training, on a fixed set of pairs.

    Every ``every_n_steps`` optimizer steps (and before the first), the model being trained is
    put in eval mode and P(f) of ``groups`` is measured on the same ``n_pairs`` pairs (reference
    test image, downstream validation image), on the model's device. Logged to every logger:
    ``plasticity/<group>`` (mean over blocks), ``plasticity/<group>/block_<i>`` and
    ``plasticity/cost``, the fraction of the training wall time spent measuring. Every
    measurement is also written to ``<run dir>/plasticity_during_training.csv``
    (:data:`plasticity.runs.checkpoints.DURING_TRAINING`, by global rank 0; the rows so far travel in
    the checkpoint, so a resumed run keeps them).

    During finetuning the downstream images are the run's own validation split. During
    pretraining (``task=pretrain``) they come from ``downstream``, the target the pretrained model
    will be finetuned on (its validation split, restricted to ``downstream_classes``), so the
    measurements trace how P(f) of each group evolves from the random init (step 0) to the
    weights the finetuning runs start from.

    The reference is read like the run's own data: its :class:`~plasticity.data.DataSpec` is the
    datamodule's (same data dir, prepared arrays' root, severity and input size) with
    ``name=reference`` and no training limit or class count, so a JPEG reference comes from its
    ``task=prepare`` arrays whenever they exist (:attr:`reference_prepared`).

    The arguments are ``conf/callbacks/plasticity.yaml``'s options (the home of their defaults),
    checked by their schema (:class:`plasticity.schema.PlasticityCallback`) as the launch checks them.

    Args:
        reference: Dataset of the reference images (the pretraining distribution).
        every_n_steps: Optimizer steps between measurements.
        n_pairs: Number of fixed pairs.
        batch_size: Pairs per forward (2 x batch_size images).
        mode: ``embedding`` (the paper's) or ``layer``.
        groups: Groups to measure.
        downstream: Dataset of the downstream images (None: the run's own validation split).
        downstream_classes: Keep only these classes of ``downstream`` (None: all).
        window: A text model's pair window, in tokens (``dataset.window``); unused for images.

    Raises:
        plasticity.validate.ConfigError: an option out of range, naming each one and its fix.

    Attributes:
        reference_spec: What the reference was read from (set in ``setup``).
        reference_prepared: Whether the reference images came from prepared arrays.
        pair_indices: ``(reference test rows, downstream val rows)`` of the pairs.
        pairs: The paired uint8 images ``(n_pairs, C, H, W)`` each, kept on the host.
    """

    def __init__(self, reference: str, every_n_steps: int, n_pairs: int, batch_size: int, mode: str,
                 groups: tuple[str, ...], downstream: str | None, downstream_classes: list[int] | None,
                 window: int | None) -> None:
        options = {k: list(v) if isinstance(v, Sequence) and not isinstance(v, str) else v  # ListConfig: a list
                   for k, v in locals().items() if k != "self"}
        if problems := check_node(Options, options, type(self).__name__):
            raise ConfigError(problems)
        # Each option an attribute of its name (window: a text pair's tokens), the sequences as tuples.
        vars(self).update(options, groups=tuple(groups), downstream_classes=None if downstream_classes is None
                          else tuple(int(c) for c in downstream_classes))
        self.rows: list[dict] = []
        self.reference_spec = self.pair_indices = self.pairs = None  # set in setup (see Attributes)
        self.reference_prepared, self.measure_s, self._start, self._last_step = False, 0.0, 0.0, -1

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit" or self.pairs is not None:
            return
        datamodule = trainer.datamodule
        spec = getattr(datamodule, "spec", None)
        if not isinstance(spec, DataSpec):
            raise TypeError("PlasticityCallback reads its reference like the run's data: it needs a datamodule "
                            "with a DataSpec (plasticity.data.datamodule.DataModule), got "
                            f"{type(datamodule).__name__}")
        self.reference_spec = spec.replace(name=self.reference, limit=None, num_classes=None, classes=None)
        splits = load_splits(self.reference_spec)
        self.reference_prepared = splits.prepared
        down = self._downstream(datamodule, spec, stage)
        ref_rows, down_rows, self.pairs_from = disjoint(splits, down, "val")  # never an example with its own copy
        ref, down = pair_inputs(splits.test, self.window, ref_rows), pair_inputs(down.val, self.window, down_rows)
        self.pair_indices = ri, di = pair_indices(len(ref), len(down), self.n_pairs, "sequential")
        self.pairs = as_inputs(ref[ri]), as_inputs(down[di])
        if self.reference_spec.source.kind == "files" and not self.reference_prepared:
            log.warning("plasticity reference %s: decoding %d JPEG files (no prepared arrays for img_size %d under "
                        "%s). Run `python launch.py task=prepare dataset=%s` (with the same paths.prepared_dir) "
                        "to read them from arrays.", self.reference, len(np.unique(ri)), spec.img_size,
                        self.reference_spec.prepared_root, self.reference)
        else:
            log.info("plasticity reference %s: %d test images from %s", self.reference, len(ref),
                     f"prepared arrays under {self.reference_spec.prepared_root}" if self.reference_prepared
                     else "its array files")

    def _downstream(self, datamodule, spec: DataSpec, stage: str):
        """The splits whose validation images are the downstream side: the run's own, or ``downstream``'s."""
        if self.downstream is None:
            datamodule.setup(stage)  # loads the splits once
            return datamodule.splits
        classes = self.downstream_classes
        return load_splits(spec.replace(name=self.downstream, limit=None, classes=classes,
                                        num_classes=None if classes is None else len(classes)))

    def state_dict(self) -> dict:
        return {"rows": list(self.rows), "last_step": self._last_step}

    def load_state_dict(self, state_dict: dict) -> None:
        self.rows, self._last_step = list(state_dict["rows"]), state_dict["last_step"]

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = time.perf_counter()
        if trainer.global_step != self._last_step:  # a resumed run measured this step before its checkpoint
            self._measure(trainer, pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        # Called after every micro-batch: global_step repeats across one step's accumulation, measured once.
        if step != self._last_step and step % self.every_n_steps == 0:
            self._measure(trainer, pl_module)

    def _batches(self, pl_module: L.LightningModule):
        """``2 x batch_size`` transformed images a batch: the reference halves, then the downstream ones.

        Each half is transformed on its own: the reference and the downstream images may differ in
        size and channels (e.g. 224 px RGB ImageNet against 28 px grayscale Fashion-MNIST).
        """
        x, y = self.pairs
        device, transform = pl_module.device, pl_module.eval_transform
        for start in range(0, self.n_pairs, self.batch_size):
            yield torch.cat([transform(half[start:start + self.batch_size].to(device)) for half in (x, y)])

    def _measure(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        step = self._last_step = trainer.global_step
        started = time.perf_counter()
        rows = measure(pl_module.net, self._batches(pl_module), self.mode, self.groups).summary()  # in eval mode
        metrics = {f"plasticity/{r['group']}/block_{r['block']}": r["mean"] for r in rows} | {
            f"plasticity/{g}": float(np.mean([r["mean"] for r in rows if r["group"] == g])) for g in self.groups}
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize()  # CUDA runs asynchronously: wait, so the cost counts the measurement's kernels
        self.measure_s += time.perf_counter() - started
        metrics["plasticity/cost"] = self.measure_s / max(time.perf_counter() - self._start, 1e-9)
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)
        self.rows += [{"step": step, "group": r["group"], "block": r["block"], "mean": r["mean"]} for r in rows]
        self.rows += [{"step": step, "group": g, "block": "all", "mean": metrics[f"plasticity/{g}"]}
                      for g in self.groups]
        if trainer.is_global_zero:  # every rank measured the same (all-reduced) weights; one writes
            self.write(Path(trainer.default_root_dir) / DURING_TRAINING)

    def write(self, path: Path) -> None:
        """Every measurement so far as ``step,group,block,mean`` rows, written atomically."""
        write_csv_atomic(path, self.rows, ("step", "group", "block", "mean"))

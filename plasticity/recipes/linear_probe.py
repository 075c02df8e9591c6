"""``task=linear_probe``: the paper's linear-probing baseline (Table 6, last column).

The frozen pretrained model turns the train, val and test splits (evaluation transform only:
Resize + CenterCrop, normalised) into features once, in batches, on the device (bf16 autocast on
CUDA, fp32 on the CPU). By default, as the official code: the last block's output (before the
final norm), mean-pooled over every token, L2-normalised per sample and standardised with the
train split's statistics (:mod:`plasticity.probe`). A multinomial logistic regression with
scikit-learn's objective (``C`` = 1) is then fitted full batch by L-BFGS on the device, in float64.

``task.select_c=true`` fits one model on train per ``C`` of ``task.c_grid`` and keeps the one with
the best validation accuracy (ties: the smallest ``C``). That model, fitted on train only, is the
one tested: it is not refitted on train + val, so its validation accuracy is an honest selection
score and the test split stays unseen. The official code fits on train at ``C`` = 1 and never
looks at validation.

Writes ``probe.safetensors`` (``W (K, D)``, ``b (K,)``, the feature ``mean``/``std`` of the
standardisation; metadata: C, features, pool) and returns the record's fields (``test_acc``,
``best_val_acc``, ``trainable_params`` = ``D K + K``, ...).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from plasticity.recipes import register
from plasticity.recipes.base import RecipeBase, eval_set
from plasticity.validate import Problems, model_modality

if TYPE_CHECKING:
    import torch

    from plasticity.data import ArraySet, Splits

log = logging.getLogger(__name__)

PROBE_FILE = "probe.safetensors"
PRECISIONS = ("auto", "32-true", "bf16-mixed")
DTYPES = ("float64", "float32")


@register
class LinearProbe(RecipeBase):
    """Recipe of ``task=linear_probe``: features of the frozen model, then a logistic regression."""

    name = "linear_probe"
    trains = True
    checks = ("device",)

    @classmethod
    def validate(cls, cfg: DictConfig, p: Problems, local: bool = True) -> None:
        from plasticity.probe import pool_problem

        super().validate(cfg, p, local)
        if not p.names("model.name") and (problem := pool_problem(cfg.task.pool, f"model.name={cfg.model.name!r}",
                                                                  model_modality(cfg) == "text")):
            p.add(problem)

    @classmethod
    def identity(cls, cfg: DictConfig) -> dict[str, Any]:
        from plasticity.components import probe_tag

        # the features are the configuration: a probe on other features is another column of the report
        return super().identity(cfg, component=probe_tag(cfg.task.features, cfg.task.pool), optimizer="lbfgs", lr=None)

    # ------------------------------------------------------------------------------- setup

    def setup_splits(self, net: "torch.nn.Module") -> "Splits":
        """The dataset's splits for the model's input side, ``dataset.limit`` applied to train.

        An unprepared JPEG train split is decoded lazily through the evaluation transform, like
        val and test (``task=prepare`` makes it fast).
        """
        from plasticity.data import DataSpec, FileSet, load_splits
        from plasticity.models import image_size

        spec = DataSpec.from_config(self.cfg, img_size=image_size(net))
        spec.check()
        splits = load_splits(spec)
        if isinstance(splits.train, FileSet):
            log.warning("%s: decoding the JPEG files of train one by one (no prepared arrays for img_size %d). "
                        "Run `python launch.py task=prepare dataset=%s` once to make this fast.", spec.name,
                        spec.img_size, spec.name)
            splits = splits.kept(train=eval_set(splits.train, spec.img_size))
        return splits

    # ------------------------------------------------------------------------------- features

    def batches(self, arrays: "ArraySet", transform) -> "Any":
        """Transformed model inputs of ``arrays`` on the device, in order, ``task.batch_size`` at a time."""
        import numpy as np
        import torch

        from plasticity.measure import as_inputs

        size, sizes = self.cfg.task.batch_size, getattr(arrays, "sizes", None)
        rows = arrays.ids if getattr(arrays, "images", None) is None else arrays.images  # a token set: padded ids
        for start in range(0, len(arrays), size):
            part = None if sizes is None else torch.from_numpy(np.asarray(sizes[start:start + size]))
            yield transform(as_inputs(rows[start:start + size]).to(self.device, non_blocking=True), part)

    def features(self, net: "torch.nn.Module", splits: "Splits") -> dict[str, "torch.Tensor"]:
        """Raw (pooled, not yet normalised) features of each non-empty split, float32 on the device."""
        from plasticity.data.augment import input_transform
        from plasticity.probe import extract_features

        task = self.cfg.task
        transform = input_transform(net, self.cfg.dataset).to(self.device)
        out = {}
        for name in ("train", "val", "test"):
            arrays = getattr(splits, name)
            if len(arrays) == 0:
                continue
            start = time.perf_counter()
            with self.autocast():
                out[name] = extract_features(net, self.batches(arrays, transform), task.features, task.pool)
            log.info("features of %s: %d x %d in %.1f s", name, *out[name].shape, time.perf_counter() - start)
        return out

    # ------------------------------------------------------------------------------- fit

    def fit(self, x: dict, y: dict, num_classes: int) -> dict[str, Any]:
        """The regression at ``task.C``, or at the best ``C`` of ``task.c_grid`` on validation."""
        import torch

        from plasticity.probe import accuracy, fit_logreg, select_c

        task = self.cfg.task
        dtype = getattr(torch, task.dtype)
        if not task.select_c:
            C = float(task.C)
            W, b, iterations = fit_logreg(x["train"], y["train"], C, task.max_iter, task.tol, num_classes, dtype)
            return {"C": C, "W": W, "b": b, "iterations": iterations,
                    "val_acc": accuracy(x["val"], y["val"], W, b) if "val" in x else None}
        best, scores, fits = select_c(x["train"], y["train"], x["val"], y["val"], list(task.c_grid),
                                      task.max_iter, task.tol, num_classes, dtype)
        log.info("validation accuracy per C: %s; chosen C=%s",
                 ", ".join(f"{c:g}: {100 * a:.2f}%" for c, a in scores.items()), best)
        W, b, iterations = fits[best]  # val_acc: the chosen C's validation accuracy, its selection score
        return {"C": best, "W": W, "b": b, "iterations": iterations, "val_acc": scores[best],
                "c_grid_val_acc": {str(c): a for c, a in scores.items()}}

    def run(self) -> dict[str, Any]:
        """Features, standardisation, fit, test (the fit written to ``probe.safetensors``, atomically: W, b and
        the standardisation's mean and std); returns the record's fields."""
        import torch

        from plasticity.data.splits import expected_classes
        from plasticity.runs.io import write_safetensors_atomic

        task = self.cfg.task
        torch.manual_seed(self.cfg.seed)
        net = self.setup_net(expected_classes(self.cfg.dataset.name, self.cfg.dataset.num_classes))
        splits = self.setup_splits(net)
        start = time.perf_counter()
        raw = self.features(net, splits)
        feature_s = time.perf_counter() - start
        x, y, mean, std = self.standardise(raw, splits)
        start = time.perf_counter()
        fitted = self.fit(x, y, splits.num_classes)
        fit_s = time.perf_counter() - start
        meta = {"C": repr(fitted["C"]), "features": str(task.features), "pool": str(task.pool),
                "normalise": "l2+standardise"}
        tensors = {"W": fitted["W"], "b": fitted["b"], "mean": mean, "std": std}
        write_safetensors_atomic(self.run_dir / PROBE_FILE, tensors, meta)
        fields = self.result_fields(net, splits, x, y, fitted, feature_s=round(feature_s, 2), fit_s=round(fit_s, 2))
        log.info("linear probe: C=%g, %d L-BFGS iterations, train %.2f%%, test %.2f%%", fitted["C"],
                 fields["iterations"], 100 * fields["train_acc"], 100 * fields["test_acc"])
        self.log_wandb(fields)
        return fields

    def standardise(self, raw: dict, splits: "Splits") -> tuple[dict, dict, "torch.Tensor", "torch.Tensor"]:
        """Features L2-normalised and standardised with the train split's statistics, and the labels,
        per split on the device; then the statistics (``mean``, ``std``)."""
        import torch

        from plasticity.probe import l2_standardise

        if self.cfg.task.select_c and "val" not in raw:
            raise ValueError(f"task.select_c=true needs a validation split, and dataset={self.cfg.dataset.name} has "
                             f"none. Fix: task.select_c=false.")
        standardised, mean, std = l2_standardise(*raw.values())
        x = dict(zip(raw, standardised))
        y = {n: torch.as_tensor(getattr(splits, n).labels, dtype=torch.long, device=self.device) for n in raw}
        return x, y, mean, std

    def result_fields(self, net: "torch.nn.Module", splits: "Splits", x: dict, y: dict, fitted: dict,
                      **timings: float) -> dict[str, Any]:
        """The record's fields of the fitted regression: accuracies, the regression's facts, ``timings``."""
        from plasticity.data.sources import recorded_classes
        from plasticity.probe import accuracy, grad_max, loss

        task = self.cfg.task
        W, b, C = fitted["W"], fitted["b"], fitted["C"]
        gmax = grad_max(x["train"], y["train"], W, b, C)
        if fitted["iterations"] >= task.max_iter:
            log.warning("L-BFGS stopped at task.max_iter=%d before reaching task.tol=%g (largest gradient entry "
                        "%.2e). Fix: raise task.max_iter.", task.max_iter, task.tol, gmax)
        dim, k = int(W.shape[1]), splits.num_classes
        return {
            "test_acc": accuracy(x["test"], y["test"], W, b),
            "best_val_acc": fitted["val_acc"],
            "test_loss": loss(x["test"], y["test"], W, b), "train_acc": accuracy(x["train"], y["train"], W, b),
            "C": C, "select_c": bool(task.select_c), "feature_dim": dim, "num_classes": k,
            "features": str(task.features),
            "pool": str(task.pool) if task.features == "block_output" else f"model:{net.global_pool}",
            "strategy": "probe", "trainable_params": dim * k + k,  # W (K, D) and b (K,)
            "n_train": len(splits.train), "n_val": len(splits.val), "n_test": len(splits.test),
            "iterations": fitted["iterations"], "converged": fitted["iterations"] < task.max_iter,
            "grad_max": gmax, "precision": self.precision, **timings,
            "split_hash": splits.split_hash, **recorded_classes(self.cfg.dataset.name),
            "probe_file": PROBE_FILE, **({"c_grid_val_acc": fitted["c_grid_val_acc"]} if task.select_c else {}),
        }

    def log_wandb(self, fields: dict[str, Any]) -> None:
        """The result (and the C grid) to W&B when the job has ``logger=wandb``; a no-op otherwise."""
        grid = [{"C": float(c), "val_acc": a} for c, a in (fields.get("c_grid_val_acc") or {}).items()]
        summary = {k: v for k, v in fields.items() if isinstance(v, (int, float, str, bool))}
        self.log_analysis(tables={"c_grid": grid}, images={}, summary=summary)

"""``task=inspect_data``: a dataset read through its real loader; sizes, classes and split hash
written to ``data_info.json`` in the run directory and printed (for a text set also the tokenizer,
``max_length`` and how many examples fill it)."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from plasticity.recipes import register
from plasticity.recipes.base import RecipeBase
from plasticity.recipes.prepare import check_data_task, image_side
from plasticity.validate import Problems

DATA_INFO = "data_info.json"


@register
class InspectData(RecipeBase):
    """Recipe of ``task=inspect_data``."""

    name = "inspect_data"
    sections = ("task", "model", "dataset")
    always_run = True  # cheap: never skipped

    @classmethod
    def validate(cls, cfg: DictConfig, p: Problems, local: bool = True) -> None:
        check_data_task(cfg, p)

    @classmethod
    def identity(cls, cfg: DictConfig) -> dict[str, Any]:
        return {"task": cls.name, "dataset": cfg.dataset.name}

    def run(self) -> dict[str, Any]:
        from plasticity.data import DataSpec, load_splits, modality
        from plasticity.runs.io import write_json_atomic

        text = modality(self.cfg.dataset.name) == "text"
        spec = DataSpec.from_config(self.cfg, img_size=None if text else image_side(self.cfg))
        splits = load_splits(spec)
        info = {"dataset": spec.name, "num_classes": splits.num_classes, **splits.sizes(),
                "split_hash": splits.split_hash, "severity": spec.severity, "prepared": splits.prepared,
                "kind": spec.source.kind, **(_token_info(spec, splits) if text else {"img_size": spec.img_size})}
        write_json_atomic(self.run_dir / DATA_INFO, info)
        print("  ".join(f"{k}={v}" for k, v in info.items()), flush=True)
        return info


def _token_info(spec, splits) -> dict[str, Any]:
    """A text set's tokenizer, ``max_length`` and the share of examples that fill it (truncated, or
    exactly that long)."""
    lengths = [part.lengths() for part in (splits.train, splits.val, splits.test)]
    full = sum(int((n == spec.max_length).sum()) for n in lengths) / max(1, sum(len(n) for n in lengths))
    return {"tokenizer": spec.tokenizer, "max_length": spec.max_length, "at_max_length": round(full, 4)}

"""``task=inspect_data``: a dataset read through its real loader; sizes, classes and split hash
written to ``data_info.json`` in the run directory and printed (for a text set also the tokenizer,
``max_length`` and how many examples fill it)."""

from __future__ import annotations

from typing import Any

from plasticity.recipes import register
from plasticity.recipes.prepare import Prepare, image_side

DATA_INFO = "data_info.json"


@register
class InspectData(Prepare):
    """Recipe of ``task=inspect_data``: :class:`Prepare`'s sections, checks and identity (never skipped)."""

    name = "inspect_data"

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

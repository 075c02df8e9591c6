"""``task=pretrain``: train a model from scratch and export a weights file for ``model.weights_file``.

The offline stand-in for ImageNet-21k pretraining: the quickstart pretrains ``vit_micro_patch7_28``
on Fashion-MNIST, then finetunes it component by component on a corrupted Fashion-MNIST.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from plasticity.recipes import register
from plasticity.recipes.finetune import Finetune
from plasticity.validate import Problems

WEIGHTS_FILE = "weights.safetensors"


def save_weights(state_dict: dict, path: Path) -> None:
    """Writes a safetensors state dict atomically."""
    from safetensors.torch import save_file

    from plasticity.runs.io import atomic_path

    with atomic_path(path) as tmp:
        save_file({k: v.detach().contiguous().cpu() for k, v in state_dict.items()}, str(tmp))


@register
class Pretrain(Finetune):
    """Recipe of ``task=pretrain``: every parameter trains; the best-validation weights are exported."""

    name = "pretrain"

    @classmethod
    def validate(cls, cfg: DictConfig, p: Problems, local: bool = True) -> None:
        super().validate(cfg, p, local)
        p.require(cfg.component.name == "all",
                  f"component={cfg.component.name!r}: task=pretrain trains every parameter. "
                  f"Fix: component=all (the task's default).")

    def run(self) -> dict[str, Any]:
        fields, module = self.fit()
        weights = self.run_dir / WEIGHTS_FILE
        if self.is_global_zero:  # the other ranks of a DDP run hold the same weights and write nothing
            # fit() tested the best-validation checkpoint, whose weights the module now holds.
            save_weights(module.net.state_dict(), weights)
        return {**fields, "weights_file": str(weights)}

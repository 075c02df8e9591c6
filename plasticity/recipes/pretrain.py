"""``task=pretrain``: train a model from scratch and export a weights file for ``model.weights_file``.

The offline stand-in for ImageNet-21k pretraining: the quickstart pretrains ``vit_micro_patch7_28``
on Fashion-MNIST, then finetunes it component by component on a corrupted Fashion-MNIST.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from plasticity.recipes import register
from plasticity.recipes.finetune import Finetune
from plasticity.runs.checkpoints import WEIGHTS_FILE
from plasticity.runs.io import write_safetensors_atomic
from plasticity.validate import Problems


@register
class Pretrain(Finetune):
    """Recipe of ``task=pretrain``: every parameter trains; the best-validation weights are exported."""

    name = "pretrain"

    @classmethod
    def validate(cls, cfg: DictConfig, p: Problems, local: bool = True) -> None:
        super().validate(cfg, p, local)
        p.require(cfg.component.name == "all", f"component={cfg.component.name!r}: task=pretrain trains every "
                                               f"parameter. Fix: component=all (the task's default).")

    def run(self) -> dict[str, Any]:
        fields, module = self.fit()
        weights = self.run_dir / WEIGHTS_FILE
        if self.trainer.is_global_zero:  # the other ranks of a DDP run hold the same weights and write nothing
            # fit() tested the best-validation checkpoint, whose weights the module now holds.
            write_safetensors_atomic(weights, module.net.state_dict())
        return {**fields, "weights_file": str(weights)}

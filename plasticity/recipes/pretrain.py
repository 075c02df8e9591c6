"""``task=pretrain``: train a model from scratch and export a weights file for ``model.weights_file``.

The offline stand-in for ImageNet-21k pretraining: the quickstart pretrains ``vit_micro_patch7_28``
on Fashion-MNIST, then finetunes it component by component on a corrupted Fashion-MNIST.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from safetensors.torch import save_file

from plasticity.config import ConfigError
from plasticity.finetune import Finetune
from plasticity.results import atomic_path

WEIGHTS_FILE = "weights.safetensors"


def save_weights(state_dict: dict, path: Path) -> None:
    """Writes a safetensors state dict atomically."""
    with atomic_path(path) as tmp:
        save_file({k: v.detach().contiguous().cpu() for k, v in state_dict.items()}, str(tmp))


class Pretrain(Finetune):
    """Recipe of ``task=pretrain``: every parameter trains; the best-validation weights are exported."""

    def run(self) -> dict[str, Any]:
        if self.cfg.component.name != "all":
            raise ConfigError(
                f"task=pretrain trains every parameter, got component={self.cfg.component.name!r}. "
                f"Fix: component=all (the task's default)."
            )
        result = super().run()
        weights = self.run_dir / WEIGHTS_FILE
        # trainer.test(ckpt_path=best) left the best-validation weights in the module.
        save_weights(self.module.net.state_dict(), weights)
        result["weights_file"] = str(weights)
        return result

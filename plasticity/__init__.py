"""plasticity: component-wise finetuning and plasticity analysis of vision transformers."""

from plasticity import models  # noqa: F401  (registers vit_micro_patch7_28 with timm)

__version__ = "0.1.0"

"""plasticity: component-wise finetuning and plasticity analysis of vision transformers."""

import hashlib

from omegaconf import OmegaConf

from plasticity import models  # noqa: F401  (registers vit_micro_patch7_28 with timm)

# ${run_id:<text>}: a stable 16-hex-digit id, e.g. the W&B run id of a run directory, so that a
# requeued job resumes its own W&B run.
OmegaConf.register_new_resolver("run_id", lambda text: hashlib.sha1(str(text).encode()).hexdigest()[:16],
                                replace=True)

__version__ = "0.1.0"

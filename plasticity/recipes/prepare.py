"""``task=prepare``: decode a JPEG dataset once into memory-mappable arrays
(:mod:`plasticity.data.prepared`); array datasets need nothing and are only checked."""

from __future__ import annotations

import logging
import os
from typing import Any

from omegaconf import DictConfig

from plasticity.recipes import register
from plasticity.recipes.base import RecipeBase

log = logging.getLogger(__name__)


def image_side(cfg: DictConfig) -> int:
    """``task.img_size``, else the configured model's input side (no model is built)."""
    from plasticity.models import input_size

    return int(cfg.task.img_size or input_size(cfg.model.name, cfg.model.kwargs))


@register
class Prepare(RecipeBase):
    """Recipe of ``task=prepare``."""

    name = "prepare"
    sections = ("task", "model", "dataset")
    always_run = True  # cheap when done: finished splits are skipped inside
    # validate: a model name (for the input side) and the data, all task=inspect_data needs too

    @classmethod
    def identity(cls, cfg: DictConfig) -> dict[str, Any]:
        return {"task": cls.name, "dataset": cfg.dataset.name}

    def run(self) -> dict[str, Any]:
        from plasticity.data import DataSpec, prepare

        spec = DataSpec.from_config(self.cfg, img_size=image_side(self.cfg))
        spec.ensure()
        if spec.source.kind != "files":
            log.info("%s is stored as arrays already: nothing to decode", spec.name)
            return {"prepared": False, "reason": "stored as arrays already"}
        workers = self.cfg.task.workers
        workers = max(1, (os.cpu_count() or 1) - 1) if workers == "auto" else int(workers)
        result = prepare(spec.name, spec.data_dir, spec.prepared_root, spec.img_size,
                         train_size=int(self.cfg.task.train_size), workers=workers, num_classes=spec.num_classes)
        log.info("prepared %s in %s (%s)", spec.name, result["dir"], result["sizes"])
        return {"prepared": True, **result}

"""Recipes: one class per task, behind one protocol and one registry.

A task is ``conf/task/<name>.yaml`` (its defaults and ``run_name``, the run's path) plus
``plasticity/recipes/<name>.py`` (a class registered with :func:`register`): adding a task touches
those two files only. :func:`names` lists the tasks from the module names without importing them
(so ``--help`` stays fast); :func:`get` imports one.

Every recipe answers four questions (:class:`plasticity.recipes.base.RecipeBase` holds the defaults):

- ``validate(cfg, problems, local)``: add every problem of the config, before any compute;
- ``identity(cfg)``: the fields that name the run in its record (task, dataset, model, ...);
- ``sections``: the config sections that define what the run computes (its config hash and the
  printed config tree); ``always_run``: rebuilt at every launch (no skipping, no conflicts);
- ``run()``: do the work in the run directory and return the record's result fields.

Example:
    >>> recipe = get("finetune")(cfg, run_dir)  # doctest: +SKIP
    >>> fields = recipe.run()                   # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from plasticity.validate import Problems, check_run_folder, check_run_path, resolved

if TYPE_CHECKING:
    from plasticity.recipes.base import RecipeBase as Recipe

__all__ = ["REGISTRY", "get", "names", "register", "tree_sections", "validate"]

REGISTRY: dict[str, type[Recipe]] = {}
"""Task name -> recipe class, filled as recipe modules are imported."""



def register(cls: type) -> type:
    """Class decorator: adds a recipe to :data:`REGISTRY` under its ``name``."""
    REGISTRY[cls.name] = cls
    return cls


def names() -> tuple[str, ...]:
    """Every task name: the recipe modules of this package (nothing is imported)."""
    found = (m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]))
    return tuple(sorted(n for n in found if not n.startswith("_") and n != "base"))  # base: shared code


def get(name: str) -> type[Recipe]:
    """The recipe class of a task, imported on first use.

    Raises:
        ValueError: ``name`` is not a task; the message lists the tasks.
    """
    if name not in names():
        raise ValueError(f"task={name!r} is not a task. Choices: {', '.join(names())}. Fix: task=<one of them>.")
    if name not in REGISTRY:
        importlib.import_module(f"{__name__}.{name}")  # its @register fills REGISTRY
    return REGISTRY[name]


def tree_sections(recipe: type[Recipe]) -> tuple[str, ...]:
    """The config sections a run's printed tree shows: the recipe's, the paths, and for training
    recipes the loggers and callbacks."""
    training = ("logger", "callbacks") if "trainer" in recipe.sections else ()
    return recipe.sections + ("paths",) + training


def validate(cfg: DictConfig, local: bool = True) -> list[str]:
    """Every problem of a job's config, each a message with its fix (empty: good to run): each key
    against :mod:`plasticity.schema`, then the task's rules between keys and of what they name.

    Args:
        cfg: The composed job config.
        local: The job runs on this machine (False: a SLURM launch, whose device checks happen
            on the node).
    """
    from plasticity.schema import check

    p = Problems()
    raw = OmegaConf.to_container(cfg, resolve=False)
    values = resolved(cfg, raw, p)
    if values is None or not p.check(get, (values.get("task") or {}).get("name")):  # nothing more can be read
        return p.items
    p.add(*check(values))
    get(values["task"]["name"]).validate(cfg, p, local)
    check_run_path(raw, values, p)
    check_run_folder(cfg, raw, values, p)
    return p.items

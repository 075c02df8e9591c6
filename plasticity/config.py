"""Checks of a composed config that run before any compute, with errors that name the fix."""

from __future__ import annotations

from omegaconf import DictConfig

from plasticity.components import check_component
from plasticity.data import DATASETS
from plasticity.models import check_model_name, check_weights_file


class ConfigError(ValueError):
    """A config value that cannot work; the message names the value, the choices and the fix."""


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def check(cfg: DictConfig, tasks: tuple[str, ...]) -> None:
    """Validates the config of one job.

    Args:
        cfg: The composed job config.
        tasks: Names of the tasks that exist.

    Raises:
        ConfigError: the first problem found, with its fix.
    """
    task = cfg.task
    _require(task.name in tasks, f"task={task.name!r} is not a task. Choices: {', '.join(tasks)}.")
    try:
        check_component(cfg.component.name)
        check_model_name(cfg.model.name)
        check_weights_file(cfg.model.get("weights_file"))
    except (ValueError, FileNotFoundError) as err:
        raise ConfigError(str(err)) from err
    _require(
        cfg.dataset.name in DATASETS,
        f"dataset={cfg.dataset.name!r} is not a dataset. Choices: {', '.join(sorted(DATASETS))}. "
        f"Fix: dataset=<one of them>.",
    )
    lr = cfg.optimizer.lr
    _require(
        isinstance(lr, (int, float)) and lr > 0,
        f"optimizer.lr={lr!r} must be a positive number. Fix: e.g. optimizer.lr=1e-2.",
    )
    _require(
        isinstance(cfg.seed, int) and cfg.seed >= 0,
        f"seed={cfg.seed!r} must be a non-negative integer (the paper's seeds: 0, 42, 3407).",
    )
    _check_steps(task)


def _check_steps(task: DictConfig) -> None:
    for key in ("max_steps", "val_every", "batch_size", "micro_batch_size"):
        value = task[key]
        _require(
            isinstance(value, int) and value > 0,
            f"task.{key}={value!r} must be a positive integer.",
        )
    _require(
        isinstance(task.warmup_steps, int) and 0 <= task.warmup_steps < task.max_steps,
        f"task.warmup_steps={task.warmup_steps!r} must be an integer in [0, task.max_steps="
        f"{task.max_steps}). Fix: lower task.warmup_steps or raise task.max_steps.",
    )
    _require(
        task.batch_size % task.micro_batch_size == 0,
        f"the effective batch task.batch_size={task.batch_size} is not divisible by "
        f"task.micro_batch_size={task.micro_batch_size}; gradient accumulation needs a whole "
        f"number of micro-batches. Fix: a micro-batch that divides it (e.g. "
        f"task.micro_batch_size={_largest_divisor(task.batch_size, task.micro_batch_size)}).",
    )
    _require(
        task.val_every <= task.max_steps,
        f"task.val_every={task.val_every} exceeds task.max_steps={task.max_steps}: no validation "
        f"would run and no best checkpoint could be chosen. Fix: task.val_every<={task.max_steps}.",
    )


def _largest_divisor(n: int, below: int) -> int:
    return max(d for d in range(1, min(n, below) + 1) if n % d == 0)

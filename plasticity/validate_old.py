"""Checks of a composed config that run before any compute, with errors that name the fix."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from plasticity.components import GROUPS, check_component
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
    if task.name == "report":
        _require(Path(cfg.sweep_dir).is_dir(), f"sweep_dir={cfg.sweep_dir!r} is not a directory. "
                 f"Fix: sweep_dir=<a directory with run records, e.g. outputs/finetune/cifar10>.")
        _require(task.select in ("val", "test"), f"task.select={task.select!r}; choices: val, test.")
    elif task.get("analysis", False):
        _check_analysis(cfg)
    elif task.name in ("prepare", "inspect_data"):
        _check_model_and_data(cfg, (cfg.dataset.name,))
    else:
        _check_training(cfg)


def _check_model_and_data(cfg: DictConfig, datasets: tuple[str, ...]) -> None:
    try:
        check_model_name(cfg.model.name)
        check_weights_file(cfg.model.get("weights_file"))
    except (ValueError, FileNotFoundError) as err:
        raise ConfigError(str(err)) from err
    for name in datasets:
        _require(
            name in DATASETS,
            f"dataset={name!r} is not a dataset. Choices: {', '.join(sorted(DATASETS))}. "
            f"Fix: dataset=<one of them> (task.reference=<one of them> for the reference set).",
        )
    _check_dataset_values(cfg.dataset)
    _require(
        isinstance(cfg.seed, int) and cfg.seed >= 0,
        f"seed={cfg.seed!r} must be a non-negative integer (the paper's seeds: 0, 42, 3407).",
    )


def _check_dataset_values(data: DictConfig) -> None:
    from plasticity.data import resolve_workers
    from plasticity.sources import check_severity

    try:
        check_severity(data.severity)
        resolve_workers(data.get("num_workers", 0))
    except ValueError as err:
        raise ConfigError(str(err)) from err
    n = data.get("num_classes")
    _require(n is None or (isinstance(n, int) and n > 0),
             f"dataset.num_classes={n!r} must be a positive integer or null (the dataset's own).")
    limit = data.get("limit")
    _require(limit is None or (isinstance(limit, int) and limit > 0),
             f"dataset.limit={limit!r} must be a positive number of training images or null (all).")


def _check_analysis(cfg: DictConfig) -> None:
    from plasticity.measure import MODES, PAIRINGS

    task = cfg.task
    _check_model_and_data(cfg, (cfg.dataset.name, task.reference))
    for key in ("n_pairs", "batch_size"):
        _require(isinstance(task[key], int) and task[key] > 0, f"task.{key}={task[key]!r} must be a positive integer.")
    _require(task.pairing in PAIRINGS, f"task.pairing={task.pairing!r}; choices: {', '.join(PAIRINGS)}.")
    if "mode" in task:
        _require(task.mode in MODES, f"task.mode={task.mode!r}; choices: {', '.join(MODES)}.")
    for group in task.get("groups", []):
        _require(group in GROUPS, f"task.groups has {group!r}; choices: {', '.join(GROUPS)}.")


def _check_training(cfg: DictConfig) -> None:
    try:
        check_component(cfg.component.name)
    except ValueError as err:
        raise ConfigError(str(err)) from err
    _check_model_and_data(cfg, (cfg.dataset.name,))
    from plasticity.sources import source

    _require(not source(cfg.dataset.name).reference_only,
             f"dataset={cfg.dataset.name!r} is the plasticity reference (test split only): it cannot be "
             f"trained on. Fix: another dataset; use it as task.reference={cfg.dataset.name} of task=plasticity.")
    lr = cfg.optimizer.lr
    _require(
        isinstance(lr, (int, float)) and lr > 0,
        f"optimizer.lr={lr!r} must be a positive number. Fix: e.g. optimizer.lr=1e-2.",
    )
    _check_steps(cfg.task)


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

"""Config validation before any compute: every problem of a config is reported at once.

Each recipe's ``validate`` adds to a :class:`Problems` collector with the checkers below; a
problem is one line that names the key, the bad value, the choices or valid range, and the fix.
:func:`plasticity.recipes.validate` runs them all and returns the list, so nothing is built,
read (beyond file headers) or written before the whole config is known to be good. It runs in
the launching process for every job of a sweep (:mod:`plasticity.prelaunch`) and again in each job
(:mod:`plasticity.job`); the model and data checks, the slow ones, are memoised
(:func:`model_problems`, :func:`data_problems`), so the second time costs little.
"""

from __future__ import annotations

import functools
import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Iterable

from omegaconf import DictConfig, ListConfig, OmegaConf

from plasticity.errors import did_you_mean

__all__ = ["CONF_DIR", "ConfigError", "DDP_STRATEGIES", "Problems", "known_keys", "world_size"]

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
"""The Hydra config folder (``launch.py``'s ``config_path``): the one home of every default."""

TASK_OWNED_TRAINER = {
    "max_steps": "task.max_steps", "max_epochs": "task.max_steps", "min_steps": "task.max_steps",
    "val_check_interval": "task.val_every", "check_val_every_n_epoch": "task.val_every",
    "accumulate_grad_batches": "task.batch_size (effective) and task.micro_batch_size",
    "callbacks": "callbacks=<a conf/callbacks option>", "logger": "logger=<a conf/logger option>",
    "default_root_dir": "paths.output_dir", "plugins": "hydra/launcher=slurm (SLURM is handled by submitit)",
    "use_distributed_sampler": "nothing: the datamodule shards the batches over trainer.devices x trainer.num_nodes",
}
"""Trainer arguments the task sets itself (a ``+trainer.<key>`` would be ignored) -> where they live."""


class ConfigError(ValueError):
    """A config that cannot work; ``problems`` holds one message per problem, each with its fix."""

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__(format_problems(self.problems))


def format_problems(problems: list[str]) -> str:
    if len(problems) == 1:
        return problems[0]
    return f"{len(problems)} problems:\n" + "\n".join(f"  - {p}" for p in problems)


class Problems:
    """Collects problem messages instead of stopping at the first one."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def __bool__(self) -> bool:
        return bool(self.items)

    def add(self, message: str) -> None:
        if message not in self.items:
            self.items.append(message)

    def require(self, ok: bool, message: str) -> bool:
        """Adds ``message`` unless ``ok``; returns ``ok``."""
        if not ok:
            self.add(message)
        return ok

    def check(self, check: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
        """Runs a check that raises on a problem (ValueError, FileNotFoundError or a WeightsError);
        its message becomes a problem. Returns whether it passed."""
        from plasticity.errors import USER_ERRORS

        try:
            check(*args, **kwargs)
        except USER_ERRORS as err:
            for line in getattr(err, "problems", [str(err)]):
                self.add(line)
            return False
        return True

    def raise_if_any(self) -> None:
        if self.items:
            raise ConfigError(self.items)


# ----------------------------------------------------------------------------------- values


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def positive_int(p: Problems, key: str, value: Any, hint: str = "") -> bool:
    return p.require(is_int(value) and value > 0, f"{key}={value!r} must be a positive integer.{hint}")


def positive_number(p: Problems, key: str, value: Any, example: str) -> bool:
    ok = is_number(value) and math.isfinite(value) and value > 0
    return p.require(ok, f"{key}={value!r} must be a finite positive number. Fix: e.g. {key}={example}.")


def one_of(p: Problems, key: str, value: Any, choices: Iterable[str], fix: str) -> bool:
    """``value`` is one of ``choices``; else the problem names the key, the value, the choices and ``fix``."""
    choices = tuple(choices)
    return p.require(value in choices, f"{key}={value!r}; choices: {', '.join(choices)}. Fix: {fix}")


def closest(key: str, choices: list[str] | tuple[str, ...]) -> str | None:
    """The one closest choice (:func:`plasticity.errors.did_you_mean`), or None."""
    found = did_you_mean(key, choices)
    return found[0] if found else None


def flat_keys(cfg: DictConfig | dict, prefix: str = "") -> list[str]:
    """Every dotted key of a config (``optimizer.lr``, ``task.max_steps`` ...), interpolations unresolved
    (a key whose value cannot resolve yet is still a key)."""
    tree = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else cfg
    keys = []
    for key, value in tree.items():
        keys.append(f"{prefix}{key}")
        if isinstance(value, dict):
            keys += flat_keys(value, f"{prefix}{key}.")
    return keys


@functools.lru_cache(maxsize=None)
def known_keys() -> tuple[str, ...]:
    """The top-level keys a job config may have: ``conf/config.yaml``'s own keys and its defaults list's
    groups, and the keys the tasks add (their files are ``@package _global_``: ``sweep_dir``)."""
    primary = OmegaConf.load(CONF_DIR / "config.yaml")
    # Defaults entries: "_self_", {group: option}, {"override hydra/...": option} (Hydra's own groups).
    groups = [str(key) for entry in primary.defaults if isinstance(entry, DictConfig) for key in entry
              if " " not in str(key) and "/" not in str(key)]
    tasks = [str(key) for path in sorted((CONF_DIR / "task").glob("*.yaml")) for key in OmegaConf.load(path)]
    keys = groups + [str(key) for key in primary] + tasks
    return tuple(dict.fromkeys(key for key in keys if key != "defaults"))


# ----------------------------------------------------------------------------------- checkers


def check_top_level(cfg: DictConfig, p: Problems) -> None:
    """Unknown top-level keys (``+optimzer.lr=1`` adds ``optimzer``) name the closest known key."""
    for key in cfg.keys():
        if key not in known_keys():
            near = closest(str(key), known_keys())
            p.add(f"{key}={cfg.get(key)!r} is not a config key{f'; did you mean {near}?' if near else ''}. "
                  f"Fix: {f'{near}.<key>=...' if near else 'remove it'} (python launch.py --cfg job lists every key).")


def check_seed(cfg: DictConfig, p: Problems) -> None:
    seed = cfg.get("seed")
    p.require(is_int(seed) and seed >= 0,
              f"seed={seed!r} must be a non-negative integer. Fix: e.g. seed=0 (the paper's seeds: 0, 42, 3407).")


def check_callbacks(cfg: DictConfig, p: Problems) -> None:
    """Each ``callbacks.<name>`` must be instantiable (an experiment may set options of a callback
    that ``callbacks=none`` removed)."""
    for name, node in (cfg.get("callbacks") or {}).items():
        if node is None:
            continue
        p.require(isinstance(node, DictConfig) and "_target_" in node,
                  f"callbacks.{name} has options but no _target_: the {name} callback is not selected "
                  f"(callbacks={cfg.get('hydra', {}).get('runtime', {}).get('choices', {}).get('callbacks', 'none')}"
                  f" replaced it). Fix: callbacks={name}, or drop the callbacks.{name}.* overrides.")
        downstream = node.get("downstream") if isinstance(node, DictConfig) else None
        if downstream is not None:
            check_dataset(cfg, p, downstream, key=f"callbacks.{name}.downstream")
            classes = node.get("downstream_classes")
            classes = list(classes) if isinstance(classes, ListConfig) else classes
            count = len(classes) if isinstance(classes, list) else None
            for problem in _classes_problems(downstream, classes, count):
                p.add(problem.replace("dataset.classes", f"callbacks.{name}.downstream_classes"))


def check_trainer(cfg: DictConfig, p: Problems, local: bool) -> None:
    """Trainer keys the task owns, and a GPU trainer on a machine without CUDA (``local`` only:
    a SLURM launch validates the GPU on the node)."""
    trainer = cfg.get("trainer") or {}
    for key, where in TASK_OWNED_TRAINER.items():
        if key in trainer:
            p.add(f"trainer.{key}={trainer[key]!r} is set by the task and would be ignored. Fix: {where}.")
    check_distributed(cfg, p)
    accelerator = str(trainer.get("accelerator", "auto"))
    if local and accelerator in ("gpu", "cuda"):
        import torch

        p.require(torch.cuda.is_available(),
                  f"trainer.accelerator={accelerator!r} (trainer=gpu) needs CUDA, and this machine has no CUDA device. "
                  f"Fix: trainer=cpu here, trainer=default (picks the device), or run on a GPU node "
                  f"(hydra/launcher=slurm).")


DDP_STRATEGIES = ("auto", "ddp")
"""``trainer.strategy`` choices: ``auto`` (one process: none; several: Lightning's ``ddp``) or ``ddp``."""


def world_size(trainer: Any) -> int | None:
    """Processes of one run, ``trainer.devices`` x ``trainer.num_nodes`` (None when either is invalid).

    ``devices`` is a count per node or a list of device indices (its length counts).
    """
    trainer = trainer or {}
    devices, nodes = trainer.get("devices", 1), trainer.get("num_nodes", 1)
    if isinstance(devices, (list, ListConfig)) and devices and all(is_int(d) and d >= 0 for d in devices):
        devices = len(devices)
    if not (is_int(devices) and devices > 0 and is_int(nodes) and nodes > 0):
        return None
    return devices * nodes


def check_distributed(cfg: DictConfig, p: Problems) -> None:
    """``trainer.devices``, ``trainer.num_nodes`` and ``trainer.strategy``, and a launcher that can
    start the ranks of a run of several processes (Lightning's own, or srun under SLURM)."""
    trainer = cfg.get("trainer") or {}
    devices, nodes, strategy = trainer.get("devices", 1), trainer.get("num_nodes", 1), trainer.get("strategy", "auto")
    p.require(world_size({"devices": devices}) is not None,
              f"trainer.devices={devices!r} must be a positive number of processes per node (one per device) or a "
              f"list of device indices; the global batch is divided among them. Fix: e.g. trainer.devices=2.")
    positive_int(p, "trainer.num_nodes", nodes, " Fix: e.g. trainer.num_nodes=1.")
    p.require(strategy in DDP_STRATEGIES,
              f"trainer.strategy={strategy!r}; choices: {', '.join(DDP_STRATEGIES)} (auto: Lightning's ddp when "
              f"trainer.devices x trainer.num_nodes > 1). Fix: trainer.strategy=ddp.")
    world = world_size(trainer)
    if world is None or world == 1:
        return
    mode, launcher = _launch_of(cfg)
    target = str(launcher.get("_target_", "")) if launcher is not None else ""
    if "slurm" in target.lower():
        tasks, slurm_nodes = launcher.get("tasks_per_node", 1), launcher.get("nodes", 1)
        p.require(tasks == world // nodes and slurm_nodes == nodes,
                  f"trainer.devices={devices!r} x trainer.num_nodes={nodes!r} under SLURM needs one task per process: "
                  f"hydra.launcher.tasks_per_node={tasks!r} and hydra.launcher.nodes={slurm_nodes!r} differ. Fix: "
                  f"hydra.launcher.tasks_per_node={world // nodes} hydra.launcher.nodes={nodes} (and "
                  f"hydra.launcher.gpus_per_node={world // nodes} on GPUs).")
    elif mode == "MULTIRUN":
        p.add(f"trainer.devices={devices!r} x trainer.num_nodes={nodes!r} in a multirun with the "
              f"{target.rsplit('.', 1)[-1] or 'basic'} launcher: Lightning starts a run's other processes by "
              f"re-running the command, which would re-run the whole sweep. Fix: launch such a run on its own "
              f"(no -m), or hydra/launcher=slurm hydra.launcher.tasks_per_node={world // nodes}.")


def _launch_of(cfg: DictConfig) -> tuple[str | None, Any]:
    """Hydra's run mode (``RUN`` | ``MULTIRUN``) and launcher config, from the job config's ``hydra``
    node (the launch's checks) or the running Hydra job. The sweep composes each job's config
    without a mode: a ``hydra`` node without one is a multirun's job."""
    from hydra.core.hydra_config import HydraConfig

    if "hydra" in cfg:
        mode = cfg.hydra.get("mode")
        return (getattr(mode, "name", None) or "MULTIRUN"), cfg.hydra.get("launcher")
    if not HydraConfig.initialized():
        return None, None
    running = HydraConfig.get()
    return getattr(running.get("mode"), "name", None), running.get("launcher")


def _mtime(path: Any) -> int | None:
    try:
        return os.stat(str(path)).st_mtime_ns
    except (OSError, TypeError):
        return None


def _model_kwargs(model: DictConfig) -> dict:
    kwargs = model.get("kwargs")
    return OmegaConf.to_container(kwargs, resolve=True) if isinstance(kwargs, DictConfig) else dict(kwargs or {})


def _model_key(model: DictConfig) -> tuple:
    """The arguments of :func:`model_problems` (a rewritten weights file has another mtime)."""
    weights = model.get("weights_file")
    return model.name, weights, _mtime(weights), json.dumps(_model_kwargs(model), sort_keys=True)


@functools.lru_cache(maxsize=None)
def model_problems(name: str, weights_file: str | None, mtime: int | None, kwargs: str) -> tuple[str, ...]:
    """The timm name, then the weights file's header against the architecture (no model is built).
    Memoised on the name, the file and its ``mtime``, and the architecture arguments (as JSON: hashable)."""
    from plasticity.models import check_model_name, check_weights_file

    p = Problems()
    if p.check(check_model_name, name):
        p.check(check_weights_file, weights_file, name, json.loads(kwargs))
    return tuple(p.items)


@functools.lru_cache(maxsize=None)
def data_problems(spec: Any) -> tuple[str, ...]:
    """Problems of a dataset's files (:meth:`plasticity.data.DataSpec.check`, headers only), memoised."""
    p = Problems()
    p.check(spec.check)
    return tuple(p.items)


def check_model(cfg: DictConfig, p: Problems) -> None:
    """The model's name and weights file (:func:`model_problems`)."""
    for problem in model_problems(*_model_key(cfg.model)):
        p.add(problem)


def check_dataset_values(data: DictConfig, p: Problems) -> None:
    """Dataset options: severity, limit, class count, workers, normalisation, augmentation."""
    from plasticity.data.sources import check_severity

    p.check(check_severity, data.severity)
    workers = data.get("num_workers", 0)
    p.require(workers == "auto" or (is_int(workers) and workers >= 0),
              f"dataset.num_workers={workers!r} must be a non-negative integer or auto (0 without CUDA, else up to 8).")
    n = data.get("num_classes")
    p.require(n is None or (is_int(n) and n > 0),
              f"dataset.num_classes={n!r} must be a positive integer or null (the dataset's own).")
    if data.get("classes") is not None:
        classes = data.classes
        classes = list(classes) if isinstance(classes, ListConfig) else classes
        if p.require(isinstance(classes, list), f"dataset.classes={classes!r} must be a list of class indices or "
                                                 f"null. Fix: e.g. dataset.classes=[5,6,7,8,9] dataset.num_classes=5."):
            for problem in _classes_problems(data.name, classes, n):
                p.add(problem)
    limit = data.get("limit")
    p.require(limit is None or (is_int(limit) and limit > 0),
              f"dataset.limit={limit!r} must be a positive number of training images or null (all).")
    for key in ("mean", "std"):
        _check_channels(p, key, data.get(key), positive=key == "std")
    _check_crop_scale(p, data.get("crop_scale"))
    for key in ("augment", "hflip", "download"):
        value = data.get(key)
        p.require(isinstance(value, bool), f"dataset.{key}={value!r} must be true or false.")


def _classes_problems(name: str, classes: list, num_classes: Any) -> list[str]:
    from plasticity.data import DATASETS
    from plasticity.data.splits import check_classes

    return check_classes(name, classes, num_classes) if name in DATASETS else []


def _check_channels(p: Problems, key: str, value: Any, positive: bool) -> None:
    values = list(value) if isinstance(value, (ListConfig, list, tuple)) else None
    ok = values is not None and len(values) == 3 and all(is_number(v) and math.isfinite(v) for v in values)
    ok = ok and (not positive or all(v > 0 for v in values))
    p.require(ok, f"dataset.{key}={value!r} must be 3 finite numbers{' > 0' if positive else ''}, one per RGB "
                  f"channel (grey images are expanded to RGB). Fix: e.g. dataset.{key}="
                  f"{'[0.229,0.224,0.225]' if key == 'std' else '[0.485,0.456,0.406]'} (ImageNet) or [0.5,0.5,0.5].")


def _check_crop_scale(p: Problems, value: Any) -> None:
    values = list(value) if isinstance(value, (ListConfig, list, tuple)) else None
    ok = values is not None and len(values) == 2 and all(is_number(v) for v in values)
    ok = ok and 0 < values[0] <= values[1] <= 1
    p.require(ok, f"dataset.crop_scale={value!r} must be [low, high] with 0 < low <= high <= 1 (the share of the "
                  f"image area RandomResizedCrop keeps). Fix: e.g. dataset.crop_scale=[0.08,1.0] (torchvision's).")


def check_dataset(cfg: DictConfig, p: Problems, name: str, key: str = "dataset", trains: bool = False) -> None:
    """A dataset name (``dataset`` or ``task.reference``) and its files (headers only)."""
    from plasticity.data import DATASETS, source

    if not p.require(name in DATASETS, _unknown_dataset(name, key, DATASETS)):
        return
    if trains and source(name).reference_only:
        p.add(f"dataset={name!r} is the plasticity reference (test split only): it cannot be trained on. "
              f"Fix: another dataset; use it as task.reference={name} of task=plasticity.")
        return
    for problem in data_problems(_spec(cfg, name)):
        p.add(problem)


def inputs_status(cfg: DictConfig, sections: tuple[str, ...]) -> tuple[str, str]:
    """For a dry run: whether a job's data and weights exist, as ``ok`` or the problem.

    Args:
        cfg: The job config.
        sections: Its recipe's sections: a recipe without ``dataset`` (``model``) reads no data
            (weights), which are then ``ok``.
    """
    from plasticity.data import DATASETS

    names = [cfg.dataset.name] + ([cfg.task.reference] if "reference" in cfg.task else [])
    found = [problem for name in names if name in DATASETS and "dataset" in sections
             for problem in data_problems(_spec(cfg, name))]
    data = "; ".join(found) or "ok"
    weights = cfg.model.get("weights_file")
    if not weights:
        return data, "hub" if cfg.model.get("pretrained") else "random init"
    if "model" not in sections:
        return data, "ok"
    return data, "; ".join(model_problems(*_model_key(cfg.model))) or "ok"


def _spec(cfg: DictConfig, name: str):
    """The spec the data check reads (the input size does not matter to it)."""
    from plasticity.data import DataSpec

    return DataSpec.from_config(cfg, name=name, img_size=224)


def _unknown_dataset(name: str, key: str, choices) -> str:
    near = closest(str(name), sorted(choices))
    return (f"{key}={name!r} is not a dataset.{f' Did you mean {near}?' if near else ''} Choices: "
            f"{', '.join(sorted(choices))}. Fix: {key}=<one of them>.")

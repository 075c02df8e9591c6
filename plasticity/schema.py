"""The typed schema of every option: types, choices and ranges declared once, beside the field.

One dataclass per config group (per task, per adapter and per image or text dataset where their
keys differ); the defaults live in ``conf/`` only, so no field has one. A field's metadata
(:func:`rule`) holds its range (``ge``, ``gt``, ``le``, ``lt``, ``min_len``), its choices when they
have a home elsewhere (``"module.NAME"``, read when checked) and its fix. A node with a
``_target_`` (the optimizer, the trainer, loggers, callbacks) is checked against its target's own
signature, the library's type hints, with the project's narrower rules (:class:`Optimizer`,
:class:`Trainer`) on top. :func:`check` walks a resolved job config once and returns every
problem, one line each: the key, the value, what it may be and the fix.

Example:
    >>> check_node(Lora, {"name": "lora", "rank": 0, "alpha": 16, "dropout": 0.0}, "adapter")[0][:40]
    'adapter.rank=0 must be a positive intege'
"""

import builtins
import collections
import copy
import dataclasses
import functools
import importlib
import inspect
import math
import operator
import types
import re
import typing
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Literal, Optional, Union

from omegaconf import OmegaConf

from plasticity.errors import Problems, did_you_mean

BOOL_WORDS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}
"""Words that mean a boolean but reach the config as text (``key='true'`` quoted, ``key=yes``)."""


def rule(fix: str | None = None, **rules: Any) -> Any:
    """A schema field without a default: its ``fix`` (the message's end) and ``rules``: ``ge``, ``gt``,
    ``le``, ``lt`` (numbers, or each number of a list), ``min_len``, ``choices`` (``"module.NAME"``)."""
    return dataclasses.field(metadata={"fix": fix, **rules})


class Schema:
    """A node's schema: each subclass is a dataclass whose fields are the node's keys (:func:`fields_of`)."""

    def __init_subclass__(cls) -> None:
        dataclasses.dataclass(cls)


class Named(Schema):
    """The schema of a config group option or task, chosen by its ``name``."""

    name: str


class Target:
    """The hint of a node built from its ``_target_``: its keys are the target's arguments (metadata
    ``overlay``: a schema whose fields narrow them; ``by_target``: overlays per target)."""


# ----------------------------------------------------------------------------------- groups


class Sweep(Schema):
    skip_done: bool
    overwrite: bool
    dry_run: bool


class Paths(Schema):
    root_dir: str
    data_dir: str
    output_dir: str
    prepared_dir: str


class Model(Named):
    pretrained: bool
    weights_file: Optional[str]
    kwargs: dict[str, Any]


RGB = tuple[float, float, float]  # one per RGB channel (grey images are expanded to RGB)


class ImageData(Named):
    severity: int  # its range: plasticity.data's check_severity
    download: bool
    limit: Optional[int] = rule(gt=0)
    eval_limit: Optional[int] = rule(gt=0)
    num_workers: Union[Literal["auto"], int] = rule(ge=0, fix="dataset.num_workers=auto (0 without CUDA, else <= 8)")
    num_classes: Optional[int] = rule(gt=0, fix="dataset.num_classes=null (the dataset's own)")
    classes: Optional[list[int]] = rule(ge=0, fix="e.g. dataset.classes=[5,6,7,8,9] dataset.num_classes=5")
    mean: RGB = rule(fix="e.g. dataset.mean=[0.485,0.456,0.406] (ImageNet's)")
    std: RGB = rule(gt=0, fix="e.g. dataset.std=[0.229,0.224,0.225] (ImageNet's)")
    augment: bool
    crop_scale: tuple[float, float] = rule(gt=0, le=1, fix="e.g. dataset.crop_scale=[0.08,1.0] (torchvision's)")
    hflip: bool


class TextData(ImageData):
    max_length: int  # its range: plasticity.data's text checks
    window: Optional[int]


class FolderData(ImageData):
    root: str
    skip_unreadable: bool


class TableData(TextData):
    path: str
    text_column: str
    label_column: str
    split_column: Optional[str]
    corruption: Optional[Literal["typos", "word_drop", "word_shuffle"]]  # plasticity.data.text's TEXT_CORRUPTIONS


USER_DATA = {"folder": FolderData, "table": TableData}
"""The user's own datasets (``dataset=folder``, ``dataset=table``), by their name's prefix (``folder:<root>``)."""


class Pairs(Schema):
    """The pairs an analysis measures on (the task's, the callback's, the auto component's): of which
    reference images, how many, and how many per forward."""

    reference: str
    n_pairs: int = rule(gt=0)
    batch_size: int = rule(gt=0)


class Auto(Pairs):
    budget: Optional[float] = rule(gt=0, le=1, fix="e.g. component.auto.budget=0.05, or null (one whole group)")


class Component(Named):
    train_final_norm: bool
    blocks: Optional[list[int]] = rule(ge=0, min_len=1, fix="e.g. component.blocks=[8,9,10,11], or null (all)")
    lr_scale: Optional[dict[str, float]] = rule(gt=0, fix="e.g. component.lr_scale={ln1: 10}")


class AutoComponent(Component):
    auto: Auto


class NoAdapter(Schema):
    name: Literal[None, "none"]


class Lora(Schema):
    name: Literal["lora"] = rule(fix="adapter=lora or adapter=none")
    rank: int = rule(gt=0, fix="e.g. adapter.rank=8 (the rank r of each update B @ A)")
    alpha: float = rule(gt=0, fix="e.g. adapter.alpha=16 (the update is scaled by alpha / rank)")
    dropout: float = rule(ge=0, lt=1, fix="adapter.dropout=0.0 (none) or e.g. 0.1")


class Optimizer(Schema):
    """Narrower than torch: ``_partial_`` (the module passes the parameters), ``lr`` and ``momentum``
    below 1 (every schedule here assumes it); the other arguments are the class's own."""

    _target_: str
    _partial_: Literal[True] = rule(fix="optimizer._partial_=true (the module passes the trainable parameters)")
    lr: float = rule(gt=0, fix="e.g. optimizer.lr=1e-2")
    momentum: float = rule(ge=0, lt=1, fix="e.g. optimizer.momentum=0.9")


class Trainer(Schema):
    """Narrower than Lightning's Trainer (its other arguments: its own hints, and building it); ``OWNED``: the
    arguments the task sets itself -> where they live (a ``+trainer.<key>`` would be ignored)."""

    OWNED: ClassVar[dict[str, str]] = {
        **dict.fromkeys(("max_steps", "max_epochs", "min_steps"), "task.max_steps"),
        **dict.fromkeys(("val_check_interval", "check_val_every_n_epoch"), "task.val_every"),
        "accumulate_grad_batches": "task.batch_size (effective) and task.micro_batch_size",
        "callbacks": "callbacks=<a conf/callbacks option>", "logger": "logger=<a conf/logger option>",
        "default_root_dir": "paths.output_dir", "plugins": "hydra/launcher=slurm (SLURM is handled by submitit)",
        "use_distributed_sampler": "nothing: the datamodule shards the batches over the processes"}

    _target_: str
    strategy: Literal["auto", "ddp"] = rule(fix="trainer.strategy=ddp (auto: ddp when devices x num_nodes > 1)")
    precision: str = rule(fix="trainer.precision=auto (bf16-mixed on CUDA, 32-true on the CPU)")
    num_nodes: int = rule(gt=0)
    gradient_clip_val: Optional[float] = rule(ge=0, fix="trainer.gradient_clip_val=1.0 (the paper's)")
    log_every_n_steps: int = rule(gt=0, fix="trainer.log_every_n_steps=1 (every optimizer step)")
    num_sanity_val_steps: int = rule(ge=-1, fix="e.g. trainer.num_sanity_val_steps=0 (-1: the whole validation set)")


class PlasticityCallback(Pairs):
    every_n_steps: int = rule(gt=0, fix="e.g. callbacks.plasticity.every_n_steps=100")
    mode: str = rule(choices="plasticity.measure.MODES", fix="callbacks.plasticity.mode=embedding (the paper's)")
    groups: Sequence[str] = rule(choices="plasticity.components.GROUPS", min_len=1,
                                 fix="e.g. callbacks.plasticity.groups=[mha,fc1] (the default measures all five)")
    downstream: Optional[str]
    downstream_classes: Optional[list[int]] = rule(ge=0)
    window: Optional[int] = rule(gt=0)


# ------------------------------------------------------------------------------------ tasks


class Pretrain(Named):
    max_steps: int = rule(gt=0)
    warmup_steps: int = rule(ge=0)
    val_every: int = rule(gt=0)
    batch_size: int = rule(gt=0)
    micro_batch_size: int = rule(gt=0)
    eval_batch_size: int = rule(gt=0)
    keep_checkpoints: bool


class Finetune(Pretrain):
    export_merged: bool


class Bounds(Pairs, Named):  # its keys: name, then the pairs (dataclass fields follow the reversed MRO)
    analysis: bool
    pairing: str = rule(choices="plasticity.measure.PAIRINGS", fix="task.pairing=sequential (the official code's)")
    pairing_seed: int
    precision: Literal["32-true", "bf16-mixed"] = rule(fix="task.precision=32-true")
    device: str  # its choices and CUDA: plasticity.devices.check_device


class Plasticity(Bounds):
    mode: str = rule(choices="plasticity.measure.MODES", fix="task.mode=embedding (the paper's numbers)")
    groups: Sequence[str] = rule(choices="plasticity.components.GROUPS", min_len=1, fix="e.g. task.groups=[mha,fc1]")
    save_rates: bool


class LinearProbe(Named):
    features: str = rule(choices="plasticity.probe.FEATURES", fix="task.features=block_output (the official code's)")
    pool: str = rule(choices="plasticity.probe.POOLS", fix="task.pool=mean (every token, as the official code)")
    C: float = rule(gt=0, fix="e.g. task.C=1.0")
    select_c: bool
    c_grid: list[float] = rule(gt=0, min_len=1, fix="e.g. task.c_grid=[1e-3,1e-2,1e-1,1,10,100]")
    max_iter: int = rule(gt=0)
    tol: float = rule(gt=0)
    dtype: str = rule(choices="plasticity.recipes.linear_probe.DTYPES", fix="task.dtype=float64 (matches sklearn)")
    batch_size: int = rule(gt=0)
    precision: str = rule(choices="plasticity.recipes.linear_probe.PRECISIONS", fix="task.precision=auto")
    device: str  # its choices and CUDA: plasticity.devices.check_device
    c_tag: dict[str, str]


class InspectData(Named):
    img_size: Optional[int] = rule(gt=0, fix="task.img_size=null (the model's input side)")


class Prepare(InspectData):
    train_size: int = rule(gt=0)
    workers: Union[Literal["auto"], int] = rule(gt=0, fix="task.workers=auto (all cores but one)")


class Report(Named):
    select: Literal["val", "test"] = rule(fix="task.select=val (learning rate chosen on validation)")
    optimizer: Optional[str]


class Dashboard(Named):
    project: str = rule(min_len=1, fix="task.project=plasticity (logger.wandb.project)")
    entity: Optional[str] = rule(min_len=1)
    workspace: Optional[str] = rule(min_len=1)
    dataset: Optional[str] = rule(min_len=1)
    model: Optional[str] = rule(min_len=1)
    group: Optional[str] = rule(min_len=1)
    online: Union[Literal["auto"], bool] = rule(fix="task.online=auto (save when W&B can be reached)")


TASKS: dict[str, type] = {"finetune": Finetune, "pretrain": Pretrain, "plasticity": Plasticity, "bounds": Bounds,
                          "linear_probe": LinearProbe, "prepare": Prepare, "inspect_data": InspectData,
                          "report": Report, "dashboard": Dashboard}
"""Each task's ``task.*`` schema (``conf/task/<name>.yaml``)."""
PLASTICITY_CALLBACK = "plasticity.callbacks.PlasticityCallback"


class Root(Schema):
    seed: int = rule(ge=0, fix="e.g. seed=0 (the paper's seeds: 0, 42, 3407)")
    threads: Optional[int] = rule(gt=0)
    matmul_precision: str  # torch.set_float32_matmul_precision checks it
    print_config: bool
    resume: bool
    sweep: Sweep
    run_name: str
    sweep_dir: Optional[str]
    paths: Paths
    model: Model
    dataset: ImageData
    component: Component
    adapter: Lora
    optimizer: Target = rule(overlay=Optimizer, kind="torch.optim.Optimizer")  # another: validate.check_optimizer
    trainer: Target = rule(overlay=Trainer)
    logger: dict[str, Target] = rule(fix="logger=<a conf/logger option>")  # a null entry: one removed
    callbacks: Optional[dict[str, Target]] = rule(by_target={PLASTICITY_CALLBACK: PlasticityCallback},
                                                  fix="callbacks=<a conf/callbacks option>")
    task: Finetune


def variants(tree: Mapping) -> dict[str, type]:
    """The schema of the nodes whose keys depend on a value: the task, the adapter, the component and
    the dataset's modality."""
    from plasticity.data import is_dataset, modality

    task, data, adapter, component = (name_of(tree.get(k)) for k in ("task", "dataset", "adapter", "component"))
    text = data is not None and is_dataset(data) and modality(data) == "text"
    return {"task": TASKS.get(task, Any), "dataset": USER_DATA.get(str(data).partition(":")[0] if ":" in str(data)
                                                                    else None, TextData if text else ImageData),
            "adapter": NoAdapter if adapter in (None, "none") else Lora,
            "component": AutoComponent if component == "auto" else Component}


def name_of(node: Any) -> str | None:
    """A node's ``name`` when it is text (a wrong type is the schema's to name), else None."""
    name = node.get("name") if isinstance(node, Mapping) else None
    return name if isinstance(name, str) else None


def check(tree: Mapping) -> list[str]:
    """Every problem of a job config (plain values, interpolations resolved) against the schema."""
    specs = {**fields_of(Root), **{key: (hint, {}) for key, hint in variants(tree).items()}}
    if specs["task"][0] is not Any and isinstance(tree["task"], dict):  # debug=text sets the steps for every task
        tree = {**tree, "task": {k: v for k, v in tree["task"].items() if k in fields_of(specs["task"][0])
                                 or not any(k in fields_of(t) for t in set(TASKS.values()))}}
    return walk({k: v for k, v in tree.items() if k != "hydra"}, specs, "", "the config", [])


def check_node(schema: type, node: Mapping, key: str) -> list[str]:
    """Every problem of one node (a mapping of options at ``key``) against a schema dataclass."""
    return walk(node, fields_of(schema), key, key, [])


# ----------------------------------------------------------------------------------- walker

Spec = tuple[Any, Mapping[str, Any]]
UNIONS = (Union, types.UnionType)  # Optional[X], X | Y


@functools.lru_cache(maxsize=None)
def fields_of(schema: type) -> dict[str, Spec]:
    """A schema dataclass's fields: name -> (type hint, rules); its ``OWNED`` keys: where they are set instead."""
    hints = typing.get_type_hints(schema)
    return {f.name: (hints[f.name], f.metadata) for f in dataclasses.fields(schema)} | \
        {name: (Any, {"owner": owner}) for name, owner in getattr(schema, "OWNED", {}).items()}


@functools.lru_cache(maxsize=None)
def target_fields(target: str, overlay: type | None, kind: str | None = None) -> tuple[dict[str, Spec], bool] | None:
    """The arguments of ``target`` (the library's type hints, ``overlay``'s fields where it has
    them) and whether it takes any keyword (``**kwargs``); None when it cannot be imported, or is
    not a subclass of ``kind`` (``"module.Class"``: the check that owns the key names it)."""
    obj = located(target)
    if obj is None or kind and not (isinstance(obj, type) and issubclass(obj, located(kind))):
        return None  # named by instantiate in the job, or by the check that owns the key (kind)
    specs: dict[str, Spec] = {"_target_": (str, {})}
    ours = fields_of(overlay) if overlay else {}
    # A subclass passing **kwargs to its parent (plasticity's WandbLogger) takes the parent's arguments too.
    for call in [k.__init__ for k in obj.__mro__ if "__init__" in vars(k)] if isinstance(obj, type) else [obj]:
        # A name imported only for type checkers (TYPE_CHECKING) reads as Any.
        names = collections.defaultdict(lambda: Any, {**vars(builtins), **getattr(call, "__globals__", {})})
        hints = typing.get_type_hints(call, localns=names)
        params = list(inspect.signature(call).parameters.values())
        specs.update({p.name: ours.get(p.name, (hints.get(p.name, Any), {})) for p in params if p.name not in specs
                      and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in ("self", "params")})
        if not (open_ := any(p.kind == p.VAR_KEYWORD for p in params)):
            break
    return {**specs, **{k: v for k, v in ours.items() if k.startswith("_")}}, open_


def walk(node: Any, specs: Mapping[str, Spec], key: str, owner: str, problems: list[str], noun: str = "option",
         open_: bool = False) -> list[str]:
    """Checks each key of ``node`` against ``specs`` (unknown keys, missing ones, each value); returns ``problems``."""
    if not isinstance(node, Mapping):
        problems.append(f"{key}={node!r} must be a mapping of options. Fix: {key}.<option>=<value>.")
        return problems
    for name, value in node.items():
        path = f"{key}.{name}" if key else str(name)
        if name in specs:
            check_value(value, *specs[name], path, problems)
        elif not open_:
            problems.append(unknown(path, value, list(specs), owner, noun))
    for name, (hint, _) in specs.items():
        if name not in node and not accepts(None, hint) and noun == "option":
            problems.append(f"{key + '.' if key else ''}{name} is missing. Fix: restore it (conf/ sets every option), "
                            f"or pick the config group option that has it.")
    return problems


def check_value(value: Any, hint: Any, rules: Mapping[str, Any], key: str, problems: list[str]) -> None:
    """Adds the problem of one value (or, for a nested node, of each of its keys)."""
    if "owner" in rules:
        problems.append(f"{key}={value!r} is set by the task and would be ignored. Fix: {rules['owner']}.")
    if value is None and accepts(None, hint):
        return
    inner = [a for a in typing.get_args(hint) if a is not type(None)] if typing.get_origin(hint) in UNIONS else [hint]
    core = inner[0] if len(inner) == 1 else hint  # Optional[X] holding a value: X
    if dataclasses.is_dataclass(core):
        walk(value, fields_of(core), key, key, problems)
    elif core is Target:  # a node built from its _target_, against the target's arguments
        if not isinstance(value, Mapping) or "_target_" not in value:
            return  # named by the check that owns the group (plasticity.validate.check_callbacks)
        target = str(value["_target_"])
        found = target_fields(target, rules.get("overlay") or rules.get("by_target", {}).get(target), rules.get("kind"))
        if found is None and not rules.get("kind"):
            problems.append(f"{key}._target_={target!r} cannot be imported. Fix: the import path of a class "
                            f"(python -c 'import <module>' names what is missing).")
        elif found is not None:
            walk(value, found[0], key, target, problems, noun="argument", open_=found[1])
    elif typing.get_origin(core) in (dict, Mapping) and isinstance(value, Mapping):  # each item at its key
        for name, item in value.items():
            check_value(item, typing.get_args(core)[1], rules, f"{key}.{name}", problems)
    elif not (accepts(value, hint) and within(value, rules)):
        problems.append(problem(key, value, hint, rules))
    else:  # No option takes these words as text: a boolean was meant (a quoted 'false' reads as true).
        problems.extend(problem(path, text, bool, {}) for path, text in texts(value, key)
                        if text.strip().lower() in BOOL_WORDS)


def texts(value: Any, key: str) -> list[tuple[str, str]]:
    """Every text in a value, at its key (the items of a mapping by name, of a list as the list)."""
    if isinstance(value, Mapping):
        return [text for name, item in value.items() for text in texts(item, f"{key}.{name}")]
    return [(key, item) for item in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(item, str)]


def unknown(key: str, value: Any, known: list[str], owner: str, noun: str) -> str:
    """A key that is not an option (argument) of ``owner``: the closest one, the options and the fix."""
    parent, _, name = key.rpartition(".")
    near = did_you_mean(name, known)
    fix = f"{parent + '.' if parent else ''}{near[0]}{'=<value>' if parent else '.<key>=...'}" if near \
        else f"drop {key}"
    listed = f"; its {noun}s: {', '.join(k for k in known if not k.startswith('_'))}" if len(known) <= 12 else ""
    return (f"{key}={value!r} is not an {noun} of {owner}{f' (did you mean {near[0]}?)' if near else ''}{listed}. "
            f"Fix: {fix} (python launch.py --cfg job lists every key).")


# ------------------------------------------------------------------------------------ types


def accepts(value: Any, hint: Any) -> bool:
    """Whether ``value`` (a plain config value) has the type ``hint`` says; booleans are never numbers."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is Target or dataclasses.is_dataclass(hint):
        return True
    if origin in UNIONS:
        return any(accepts(value, arm) for arm in args)
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if hint in (int, float):  # a float is finite; an int is one too (a float is not an int)
        return isinstance(value, (int, hint)) and not isinstance(value, bool) and (hint is int or math.isfinite(value))
    if origin in (dict, Mapping):
        return isinstance(value, Mapping) and all(accepts(v, args[1]) for v in value.values())
    if origin in (list, tuple, Sequence, Iterable):
        if not isinstance(value, (list, tuple)):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(accepts(v, a) for v, a in zip(value, args))
        return all(accepts(v, args[0]) for v in value) if args else True
    return isinstance(value, hint) if isinstance(hint, type) else True  # a hint no config value can be checked on


def within(value: Any, rules: Mapping[str, Any]) -> bool:
    """Whether the numbers of ``value`` (it, or the items of a list or mapping) are in range, its
    text among the choices, and its length at least ``min_len``."""
    items = value.values() if isinstance(value, Mapping) else value if isinstance(value, (list, tuple)) else [value]
    size = len(value.strip() if isinstance(value, str) else value) if isinstance(value, (str, list, tuple)) else 1
    numbers = [v for v in items if isinstance(v, (int, float)) and not isinstance(v, bool)]
    bounds = [(getattr(operator, op), rules[op]) for op in ("ge", "gt", "le", "lt") if op in rules]
    return size >= rules.get("min_len", 0) and all(test(v, bound) for test, bound in bounds for v in numbers) \
        and all(v in located(rules["choices"]) for v in items if isinstance(v, str) and "choices" in rules)


@functools.lru_cache(maxsize=None)
def located(path: str) -> Any:
    """The object at an import path (``torch.optim.SGD``; a choice list, ``"plasticity.measure.MODES"``), or None
    when it cannot be imported."""
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except Exception:  # ImportError, ValueError (no module), or an error raised by the module it imports
        return None


def problem(key: str, value: Any, hint: Any, rules: Mapping[str, Any]) -> str:
    """The one-line message: key, value, what it may be (and why a word is not a boolean), the fix."""
    meant = BOOL_WORDS.get(value.strip().lower()) if isinstance(value, str) and accepts(True, hint) else None
    if meant is not None:  # a boolean given as text
        return (f"{key}={value!r} must be {describe(hint, rules)} (it is text: quotes or a word such as yes make a "
                f"string, which reads as true even when it says false). Fix: {key}={str(meant).lower()}, unquoted.")
    fix = rules.get("fix") or (f"{key}=true or {key}=false" if hint is bool else f"{key}=<{describe(hint, rules)}>")
    named = [word(a) for a in typing.get_args(hint)] if typing.get_origin(hint) is Literal else \
        located(rules["choices"]) if hint is str and "choices" in rules else None  # the words it takes, and no other
    what = f"; choices: {', '.join(named)}" if named and len(named) > 1 else f" must be {describe(hint, rules)}"
    return f"{key}={value!r}{what}. Fix: {fix.rstrip('.')}."


def word(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def describe(hint: Any, rules: Mapping[str, Any]) -> str:
    """What a hint (with its rules) accepts, in words: ``a positive integer or null``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in UNIONS:
        return " or ".join([describe(a, rules) for a in args if a is not type(None)] + ["null"] * (type(None) in args))
    if origin is Literal:
        return " or ".join(word(a) for a in args)
    if hint in (bool, Target):
        return "true or false" if hint is bool else "configs with a _target_"
    if hint is int or hint is float:
        return number_words(hint, rules)
    if hint is str:
        return f"one of {', '.join(located(rules['choices']))}" if "choices" in rules else \
            "non-empty text" if rules.get("min_len") else "text"
    if origin in (list, tuple, Sequence, Iterable):
        size = f"{len(args)} " if origin is tuple and args and args[-1] is not Ellipsis else ""
        each = describe(args[0], rules) if args else "anything"
        return f"a {'non-empty ' if rules.get('min_len') else ''}list of {size}values, each {each}"
    if origin in (dict, Mapping):
        return f"a mapping of names to {describe(args[1], rules)}"
    return f"a {getattr(hint, '__name__', hint)}"


def number_words(hint: type, rules: Mapping[str, Any]) -> str:
    """``a positive integer``, ``a non-negative integer``, ``a number in [0, 1)``, ``an integer >= -1``."""
    noun = "integer" if hint is int else "number"
    low, high = (next(((op, rules[op]) for op in ops if op in rules), None) for ops in (("gt", "ge"), ("lt", "le")))
    if low and high:
        return f"a {noun} in {'(' if low[0] == 'gt' else '['}{low[1]:g}, {high[1]:g}{')' if high[0] == 'lt' else ']'}"
    if low in (("gt", 0), ("ge", 0)):
        return f"a {'non-negative' if low[0] == 'ge' else 'finite positive' if hint is float else 'positive'} {noun}"
    if low or high:
        name, bound = low or high
        return f"a{'n' if hint is int else ''} {noun} {dict(ge='>=', gt='>', le='<=', lt='<')[name]} {bound:g}"
    return f"a{'n' if hint is int else ' finite'} {noun}"


# ----------------------------------------------------------------------------------- values


def flat_keys(cfg: Any) -> list[str]:
    """Every dotted key of a config (``optimizer.lr``, ``task.max_steps`` ...), interpolations unresolved."""
    return [key for key, _ in _items(cfg if isinstance(cfg, dict) else OmegaConf.to_container(cfg, resolve=False))]


def _items(tree: dict, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every (dotted key, value) of a plain tree, each node before its keys."""
    for key, value in tree.items():
        yield f"{prefix}{key}", value
        if isinstance(value, dict):
            yield from _items(value, f"{prefix}{key}.")


def resolved(cfg: Any, raw: dict, p: Problems) -> dict | None:
    """The job config (``raw``: before interpolation) as plain values, each interpolation resolved, or
    None when one does not resolve (``+optimizer.foo=${nope}``, ``seed=${oc.env:UNSET}``): each is
    named with OmegaConf's reason. ``${hydra:...}`` values resolve only inside the running job: they stay text."""
    tree = copy.deepcopy(raw)
    reasons: set[str] = set()
    # Fewest interpolations first: a broken source (seed=${oc.env:UNSET}) is named, not run_name that reads it.
    for key, value in sorted(_items(tree), key=lambda item: str(item[1]).count("${")):
        if isinstance(value, dict) or "${" not in str(value) or "${hydra:" in str(value) or key.startswith("hydra."):
            continue
        try:
            found = OmegaConf.select(cfg, key, throw_on_resolution_failure=True)
        except Exception as err:  # OmegaConf's errors, or a resolver's: the first line says what
            reason = str(err).splitlines()[0]
            if reason not in reasons:  # a key that reads a broken one (run_name reads seed) fails the same way
                reasons.add(reason)
                p.add(f"{key}={value!r} cannot be resolved ({reason}). Fix: a plain value, or an interpolation of "
                      f"a key that exists (python launch.py --cfg job lists them).")
            continue
        *parents, leaf = key.split(".")
        node = functools.reduce(dict.__getitem__, parents, tree)
        node[leaf] = OmegaConf.to_container(found, resolve=True) if OmegaConf.is_config(found) else found
    return None if reasons else tree


FOLDER_KEYS = ("dataset.name", "task.reference", "model.name")
"""Run-path keys whose values may hold a ``/`` (``fashion_mnist_c/motion_blur``: a folder per
corruption, on purpose; a user's folder, ``hf:/data/my_vit``, ``folder:/data/pics``); any other ``/``
would add a folder the run's path does not have."""
_PATH_KEY = re.compile(r"(?<=[{,:])\s*([A-Za-z_][\w.]*)\s*(?=[},])")
"""The config keys an interpolation reads: ``${a.b}``, ``${resolver:a.b,c}``, ``${oc.select:a.b,null}``."""
ABSENT = object()


def get(tree: dict, key: str) -> Any:
    """The value at a dotted ``key`` of a plain tree, or :data:`ABSENT`."""
    try:
        return functools.reduce(operator.getitem, key.split("."), tree)
    except (KeyError, TypeError):  # a missing key, or a value that holds no keys
        return ABSENT


def check_run_path(raw: dict, values: dict, p: Problems) -> None:
    """No value that ``run_name`` (the run's path under ``paths.output_dir``) reads adds a folder to
    it. ``raw``: the job config before interpolation, ``values``: resolved (:func:`resolved`)."""
    template = raw.get("run_name", "")
    for key in dict.fromkeys(_PATH_KEY.findall(str(template))):
        value = get(values, key)
        if key not in FOLDER_KEYS and isinstance(value, (str, int, float)) and not p.names(key):
            p.require("/" not in str(value) and str(value) not in (".", ".."), f"{key}={value!r} would add a folder "
                      f"to the run's path ({template}), which has one folder per key. Fix: a value without '/'.")

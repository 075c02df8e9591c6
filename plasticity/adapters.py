"""LoRA on component groups: low-rank updates of a group's ``nn.Linear`` weights instead of the weights.

``adapter=lora`` with ``component=mha`` trains a rank-``r`` update ``(alpha / r) * B @ A`` of every
attention Linear (timm's fused ``attn.qkv``, so q, k and v share one update, and ``attn.proj``;
EVA's split ``q_proj``/``k_proj``/``v_proj``), ``fc1`` of ``mlp.fc1`` (SwiGLU ``fc1_g``/``fc1_x``),
``fc2`` of ``mlp.fc2``. The head (new, full) and, by ``component.train_final_norm``, the final norm
train as without an adapter; the base weights stay frozen. ``ln1``, ``ln2``, ``emb``, ``all`` and
``head`` have no Linear to adapt: :func:`check_adapter` reports them before compute.

The injection is peft's ``inject_adapter_in_model``, which keeps the timm model (same class, same
``forward``) and renames only the adapted Linears' parameters::

    blocks.0.attn.qkv.weight -> blocks.0.attn.qkv.base_layer.weight   (frozen)
                                blocks.0.attn.qkv.lora_A.default.weight  [r, in]   (trains)
                                blocks.0.attn.qkv.lora_B.default.weight  [out, r]  (trains, starts at 0)

Every such name still starts with ``blocks.<i>.attn.`` / ``blocks.<i>.mlp.fc1`` ..., so
:func:`plasticity.components.classify` puts it in the same group and block. ``lora_B`` starts at
zero: before training the adapted model computes exactly what the base model does.

:func:`merged_state_dict` folds the updates into the base weights and returns a plain timm state
dict (original names) that :func:`plasticity.models.create_model` loads as ``model.weights_file``.

``import peft`` takes seconds (it imports transformers): it happens only inside the functions that
inject or merge, never at import of this module.

Example:
    >>> net = create_model("vit_micro_patch7_28", 10, depth=2)                    # doctest: +SKIP
    >>> net, selection = apply_lora(net, ["mha"], None, rank=8, alpha=16, dropout=0.0)  # doctest: +SKIP
    >>> selection.counts["group"]   # 2 blocks x 8 x ((64 + 192) + (64 + 64))   # doctest: +SKIP
    6144
    >>> export_merged(net, "merged.safetensors")                               # doctest: +SKIP
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable
from weakref import WeakSet

from plasticity.compat import restore_qkv, route_qkv_through_forward
from plasticity.components import (AUTO, COMPONENTS, Selection, adapter_of, block_count, check_blocks, classify, freeze,
                                   has_adapter, resolve, selection_of)
from plasticity.validate import Problems

if TYPE_CHECKING:
    import torch
    import torch.nn as nn

log = logging.getLogger(__name__)

__all__ = ["ADAPTERS", "ADAPTER_NAME", "LORA_GROUPS", "apply_lora", "check_adapter", "check_job_adapter",
           "export_merged", "lora_names", "lora_selection", "merge_lora", "merged_state_dict", "target_modules"]

ADAPTERS: tuple[str, ...] = ("none", "lora")
"""Every value ``adapter.name`` accepts (``conf/adapter/<name>.yaml``)."""

LORA_GROUPS: tuple[str, ...] = ("mha", "fc1", "fc2")
"""The component groups that hold ``nn.Linear`` weights, the only ones LoRA can adapt."""

ADAPTER_NAME = "default"
"""peft's adapter name: the ``default`` in ``lora_A.default.weight``."""

_LORA_PARAM = re.compile(r"\.lora_[AB]\.")
_ROUTED: "WeakSet[nn.Module]" = WeakSet()  # attention modules routed through qkv's forward, until merge_lora
_WHY_NOT = {"ln1": "a LayerNorm", "ln2": "a LayerNorm", "emb": "the patch embedding (a Conv2d) and tokens",
            "all": "every parameter (full finetuning)", "head": "the head, which always trains in full"}


# ------------------------------------------------------------------------------------ config


def check_job_adapter(cfg: Any, groups: tuple[str, ...], p: Problems) -> None:
    """A job config's ``adapter`` section, given the groups its ``component.name`` selects
    (:func:`plasticity.components.check_strategy`'s return)."""
    adapter = adapter_of(cfg)  # its name, rank, alpha and dropout: the schema's (plasticity.schema.Lora)
    if adapter and adapter["name"] in ADAPTERS:
        p.require(cfg.component.name != AUTO, "component=auto with adapter=lora: the measurement chooses whole "
                                              "weights to train. Fix: adapter=none, or a group with adapter=lora.")
        check_lora_groups(groups, p)


def check_adapter(component_groups: str | Iterable[str], adapter_cfg: Mapping | None) -> list[str]:
    """Every problem of an adapter config, one line each naming the key, the value, the choices and the fix.

    Nothing is built or imported (no peft). The numbers' ranges are :class:`plasticity.schema.Lora`'s.

    Args:
        component_groups: ``component.name`` (``"mha"``, ``"mha+fc1"``) or the list of groups LoRA
            would adapt. ``auto`` is left to :func:`check_job_adapter`.
        adapter_cfg: The ``adapter`` section (``name``, ``rank``, ``alpha``, ``dropout``), a dict or
            a DictConfig; None, ``{}`` or ``name: none``: no adapter, no problem.

    Returns:
        The problem messages (empty when the config is good).
    """
    if not has_adapter(adapter_cfg):
        return []
    name = adapter_cfg.get("name")
    if name not in ADAPTERS:
        return [f"adapter.name={name!r} is not an adapter. Choices: {', '.join(ADAPTERS)}. "
                f"Fix: adapter=lora (LoRA on the component's Linear weights) or adapter=none."]
    from plasticity.schema import Lora, check_node

    p = Problems()
    check_lora_groups(component_groups, p)
    # A dict built in code may leave dropout out: apply_lora's default, none.
    return p.items + check_node(Lora, {**adapter_cfg, "dropout": adapter_cfg.get("dropout", 0.0)}, "adapter")


def check_lora_groups(groups: str | Iterable[str], p: Problems) -> None:
    """Each group must hold ``nn.Linear`` weights (:data:`LORA_GROUPS`); ``auto`` is the strategy check's."""
    for group in (g for g in _groups(groups) if g not in (*LORA_GROUPS, AUTO)):
        if group in COMPONENTS:
            p.add(f"component={group!r} with adapter=lora: LoRA adapts nn.Linear weights and {group} is "
                  f"{_WHY_NOT.get(group, 'not a Linear')}. Choices with adapter=lora: {', '.join(LORA_GROUPS)}. "
                  f"Fix: component=mha (or fc1, fc2), or adapter=none to finetune {group} itself.")
        else:
            p.add(f"component={group!r} is not a component group. Choices with adapter=lora: "
                  f"{', '.join(LORA_GROUPS)}. Fix: component=mha (or fc1, fc2).")


def _groups(groups: str | Iterable[str]) -> list[str]:
    """``"mha"`` -> ``["mha"]``, ``"mha+fc1"`` -> ``["mha", "fc1"]``, a list as it is."""
    return str(groups).split("+") if isinstance(groups, str) else [str(g) for g in groups]


# ----------------------------------------------------------------------------------- targets


def target_modules(model: "nn.Module", groups: str | Iterable[str], blocks: Iterable[int] | None = None,
                   adapter: Mapping | None = None) -> list[str]:
    """Full names of the ``nn.Linear`` modules LoRA adapts (peft's ``target_modules``): those whose
    parameters :func:`~plasticity.components.classify` puts in one of ``groups`` and in one of ``blocks``.

    Never ``patch_embed.proj`` (a Conv2d) or the head (outside the blocks).

    Args:
        model: A timm ViT-family model (plain, not yet adapted).
        groups: Groups among :data:`LORA_GROUPS`.
        blocks: Block indices; None: every block.
        adapter: The adapter section, whose numbers are checked too (:func:`check_adapter`); None: not checked.

    Raises:
        ConfigError: every problem of the groups (and ``adapter``) and the blocks, one line each: a group without
            Linear weights, a block the model lacks.
        ValueError: nothing to adapt.
    """
    import torch.nn as nn

    groups, blocks = _groups(groups), None if blocks is None else list(blocks)
    p = Problems()
    p.add(*(check_adapter(groups, adapter) if adapter else ()))  # the groups, then the numbers
    if not adapter:
        check_lora_groups(groups, p)
    p.check(check_blocks, blocks, block_count(model))
    p.raise_if_any()
    located = {name: classify(f"{name}.weight") for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    names = [name for name, (group, block) in located.items()
             if group in groups and block is not None and (blocks is None or block in blocks)]
    if not names:
        raise ValueError(f"no nn.Linear of {'+'.join(groups)} in blocks {blocks if blocks is not None else 'all'} of "
                         f"{type(model).__name__}: nothing for LoRA to adapt. Fix: another component or adapter=none.")
    return names


# ------------------------------------------------------------------------------------ inject


def apply_lora(model: "nn.Module", groups: str | Iterable[str], blocks: Iterable[int] | None = None,
               rank: int = 8, alpha: float = 16, dropout: float = 0.0,
               train_final_norm: bool = True) -> tuple["nn.Module", Selection]:
    """Injects LoRA into the Linears of ``groups`` (in ``blocks``) and freezes everything else.

    In place: the returned model is ``model`` itself (still the timm class). Trainable afterwards:
    every ``lora_A``/``lora_B`` weight, the head and (by ``train_final_norm``) the final norm.
    ``lora_A`` is initialised from torch's global RNG (Kaiming uniform, as peft does), ``lora_B``
    at zero, so the output is unchanged until the first step.

    Attention that bypasses its ``qkv`` Linear's forward (BEiT/EVA with ``q_bias``: they call
    ``F.linear(x, self.qkv.weight, ...)``, which would silently drop the update) is switched to
    ``qkv_bias_separate=True``, the same function through ``self.qkv(x) + bias``.

    Args:
        model: A plain timm ViT-family model (head already reset to the task).
        groups: Groups among :data:`LORA_GROUPS` (``"mha"``, ``"mha+fc1"`` or ``["mha", "fc1"]``).
        blocks: Block indices; None: every block.
        rank: ``r``; each adapted ``W [out, in]`` gets ``r * (in + out)`` trainable parameters.
        alpha: The update is ``(alpha / rank) * B @ A``.
        dropout: Dropout on the LoRA branch's input (0: none).
        train_final_norm: Whether the final ``norm``/``fc_norm`` trains too.

    Returns:
        ``(model, selection)``; see :func:`lora_selection` for the selection's fields.

    Raises:
        ConfigError: bad rank/alpha/dropout, a group without Linear weights, a block the model lacks.
    """
    targets = target_modules(model, groups, blocks, {"name": "lora", "rank": rank, "alpha": alpha, "dropout": dropout})
    if lora_names(model):
        raise ValueError("the model already holds LoRA layers; apply_lora adapts a plain timm model once. "
                         "Fix: build a fresh model (plasticity.models.create_model) and adapt that.")
    groups = _groups(groups)
    # BEiT/EVA attention with q_bias skips its (adapted) qkv module's forward: routed through it until merge_lora
    for parent in (model.get_submodule(name.rpartition(".")[0]) for name in targets if name.endswith(".qkv")):
        if route_qkv_through_forward(parent):
            _ROUTED.add(parent)
    from peft import LoraConfig, inject_adapter_in_model

    # peft matches each module name against the list exactly (or as a dotted suffix): full names adapt exactly these.
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, bias="none")
    adapted = inject_adapter_in_model(config, model, adapter_name=ADAPTER_NAME)
    if adapted is not model:  # peft 0.21 injects in place; the caller keeps its object
        raise RuntimeError("peft's inject_adapter_in_model returned a new object; plasticity expects it in place.")
    selection = lora_selection(model, "+".join(groups), train_final_norm, split=len(groups) > 1 or blocks is not None)
    freeze(model, selection)
    log.info("LoRA r=%d alpha=%g dropout=%g on %s (%d Linear modules): %d trainable LoRA parameters",
             rank, alpha, dropout, "+".join(groups), len(targets), selection.counts["group"])
    return model, selection


def lora_names(model: "nn.Module") -> tuple[str, ...]:
    """Names of the LoRA parameters (``...lora_A.default.weight``, ``...lora_B.default.weight``)."""
    return tuple(n for n, _ in model.named_parameters() if _LORA_PARAM.search(n))


def lora_selection(model: "nn.Module", component: str, train_final_norm: bool = True,
                   split: bool = False) -> Selection:
    """The :class:`~plasticity.components.Selection` of an adapted model.

    Fields: ``component`` the joined groups (``"mha"``, ``"mha+fc1"``); ``group`` the LoRA parameter
    names (so ``counts["group"]`` is the LoRA parameter count); ``head`` and ``final_norm`` as
    :func:`~plasticity.components.select` gives them; ``trainable`` the LoRA names, the head and
    the final norm if ``train_final_norm``; ``blocks`` block -> its LoRA names; ``numel`` every
    parameter (base weights included); ``parts``, with ``split``
    (several groups or a block subset, as ``select`` does), each group -> its LoRA names, else None.
    """
    groups = resolve(model)  # classifies every name: raises on one no rule knows
    chosen: dict[str, list[str]] = {}
    for name in lora_names(model):
        chosen.setdefault(classify(name)[0] if split else component, []).append(name)
    return selection_of(model, component, {g: tuple(v) for g, v in chosen.items()}, groups, train_final_norm,
                        single=not split)


# ------------------------------------------------------------------------------------- merge


def merged_state_dict(model: "nn.Module") -> dict[str, "torch.Tensor"]:
    """A plain timm state dict of an adapted model, each LoRA update folded into its base weight.

    ``W + (alpha / r) * B @ A`` under the original name (``blocks.0.attn.qkv.weight``); no
    ``base_layer`` or ``lora_`` key. The model is not changed: a copy of it is merged
    (:func:`merge_lora`, a weight that is not finite kept as it is), so every tensor is a copy, on
    the model's device, the head included. A model without LoRA gives its own state dict.
    """
    import copy

    return merge_lora(copy.deepcopy(model), safe_merge=False).state_dict()


def merge_lora(model: "nn.Module", safe_merge: bool = True) -> "nn.Module":
    """Folds every LoRA update into its base weight and puts the plain Linears back, in place.

    Returns ``model`` (the same object), now a plain timm model whose parameter names are the
    original ones. With ``safe_merge``, raises ValueError when a merged weight is not finite (peft's).
    """
    from peft.tuners.lora import LoraLayer

    for name, layer in [(name, m) for name, m in model.named_modules() if isinstance(m, LoraLayer)]:
        layer.merge(safe_merge=safe_merge)
        model.set_submodule(name, layer.get_base_layer())
    for module in model.modules():
        if module in _ROUTED:
            restore_qkv(module)
            _ROUTED.discard(module)
    if hasattr(model, "peft_config"):
        del model.peft_config
    return model


def export_merged(model: "nn.Module", path: str | Path) -> Path:
    """Writes :func:`merged_state_dict` as safetensors, atomically (a reader never sees half a file).

    The file is a ``model.weights_file`` for :func:`plasticity.models.create_model` (which, as
    for any pretrained file, resets the head). Returns the path.
    """
    from plasticity.runs.io import write_safetensors_atomic

    path = Path(path)
    write_safetensors_atomic(path, merged_state_dict(model))
    return path

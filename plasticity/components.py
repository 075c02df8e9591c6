"""Component groups of a timm Vision Transformer and the freezing that trains exactly one of them.

A ViT block is ``norm1 -> attn -> +res -> norm2 -> mlp (fc1, act, fc2) -> +res``. The paper finetunes
one *component group* across all blocks (its Table 3) while everything else stays frozen. Groups
are declared as rules over parameter names (first match wins), so a new timm family is supported
by adding a rule, and a parameter no rule knows is an error instead of a silent freeze.

Layer scale (``ls1``/``gamma_1``) multiplies the attention output and goes with ``mha``;
``ls2``/``gamma_2`` and the SwiGLU hidden norm (``mlp.norm``) act on the second feedforward
layer's input/output and go with ``fc2``. Both fused (``fc1``) and split SwiGLU (``fc1_g``,
``fc1_x``) first layers are ``fc1``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

import torch.nn as nn

GROUPS = ("ln1", "mha", "ln2", "fc1", "fc2")
"""The paper's five component groups, in block order."""

COMPONENTS = GROUPS + ("emb", "all", "head")
"""Every value ``component.name`` accepts: a group, the embedding, full finetuning, or the head only."""

_BLOCK = r"^blocks\.(?P<block>\d+)\."
RULES: tuple[tuple[str, str], ...] = (
    (r"^(patch_embed|cls_token|reg_token|pos_embed|norm_pre)(\.|$)", "emb"),
    (_BLOCK + r"norm1\.", "ln1"),
    (_BLOCK + r"(attn|ls1|gamma_1)(\.|$)", "mha"),
    (_BLOCK + r"norm2\.", "ln2"),
    (_BLOCK + r"mlp\.fc1(_g|_x)?\.", "fc1"),
    (_BLOCK + r"(mlp\.(fc2|norm)|ls2|gamma_2)(\.|$)", "fc2"),
    (r"^(norm|fc_norm)\.", "final_norm"),
    (r"^(head|attn_pool)(\.|$)", "head"),
)
"""(regex over the parameter name, group) pairs; the first match classifies a parameter."""

_COMPILED = tuple((re.compile(pattern), group) for pattern, group in RULES)


class UnknownParameterError(ValueError):
    """A parameter that no rule in :data:`RULES` classifies."""


def classify(name: str) -> tuple[str, int | None]:
    """Returns the group of a parameter and its block index (``None`` outside the blocks).

    Args:
        name: Parameter name as in ``model.named_parameters()``.

    Raises:
        UnknownParameterError: if no rule matches.
    """
    for pattern, group in _COMPILED:
        match = pattern.match(name)
        if match:
            block = match.groupdict().get("block")
            return group, None if block is None else int(block)
    raise UnknownParameterError(
        f"cannot classify parameter {name!r} into a component group ({', '.join(GROUPS)}, emb, "
        f"final_norm, head). Supported: timm ViT, DeiT, DINOv2/v3, BEiT and EVA02 parameter names. "
        f"Fix: add a rule for it to plasticity.components.RULES."
    )


@dataclass(frozen=True)
class Selection:
    """Which parameters train when finetuning one component.

    Attributes:
        component: The requested component (one of :data:`COMPONENTS`).
        group: Names of the component's own parameters (for ``all``, every parameter; for
            ``head``, the head).
        head: Names of the classification head's parameters (always trained).
        final_norm: Names of the final norm's parameters (``norm``/``fc_norm``).
        trainable: Every name that trains.
        blocks: Block index -> names of trainable parameters in that block.
        numel: Parameter name -> number of elements, for every parameter of the model.
    """

    component: str
    group: tuple[str, ...]
    head: tuple[str, ...]
    final_norm: tuple[str, ...]
    trainable: frozenset[str]
    blocks: dict[int, tuple[str, ...]]
    numel: dict[str, int]

    def count(self, names: Iterable[str]) -> int:
        """Number of scalar parameters among ``names``."""
        return sum(self.numel[n] for n in names)

    @property
    def counts(self) -> dict[str, int]:
        """Trainable parameter counts: the group, the head, the final norm if trained, the total."""
        return {
            "group": self.count(self.group),
            "head": self.count(self.head),
            "final_norm": self.count(n for n in self.final_norm if n in self.trainable),
            "total": self.count(self.trainable),
        }


def resolve(model: nn.Module) -> dict[str, tuple[str, ...]]:
    """Maps each group (the five groups, ``emb``, ``final_norm``, ``head``) to its parameter names.

    Raises:
        UnknownParameterError: on the first parameter no rule classifies.
    """
    names: dict[str, list[str]] = {g: [] for g in GROUPS + ("emb", "final_norm", "head")}
    for name, _ in model.named_parameters():
        names[classify(name)[0]].append(name)
    return {group: tuple(members) for group, members in names.items()}


def group_counts(model: nn.Module) -> dict[str, int]:
    """Number of scalar parameters in each group of :func:`resolve`."""
    numel = {n: p.numel() for n, p in model.named_parameters()}
    return {group: sum(numel[n] for n in members) for group, members in resolve(model).items()}


def check_component(component: str) -> None:
    """Raises ValueError naming the choices when ``component`` is not one of :data:`COMPONENTS`."""
    if component not in COMPONENTS:
        raise ValueError(
            f"component={component!r} is not a component group. Choices: {', '.join(COMPONENTS)}. "
            f"Fix: component=<one of them> (e.g. component=mha)."
        )


def select(model: nn.Module, component: str, train_final_norm: bool = True) -> Selection:
    """Resolves the parameters that train when finetuning ``component``.

    Args:
        model: A timm ViT-family model.
        component: One of :data:`COMPONENTS`.
        train_final_norm: Whether the final norm trains too (the official code trains it in every
            configuration). Always true for ``all``; ignored for ``head`` (nothing but the head).
    """
    check_component(component)
    groups = resolve(model)
    if component == "all":
        group = tuple(n for n, _ in model.named_parameters())
    else:
        group = groups[component]
    trainable = set(group) | set(groups["head"])
    if train_final_norm and component != "head":
        trainable |= set(groups["final_norm"])
    blocks: dict[int, list[str]] = {}
    for name in (n for n, _ in model.named_parameters() if n in trainable):
        block = classify(name)[1]
        if block is not None:
            blocks.setdefault(block, []).append(name)
    return Selection(
        component=component,
        group=group,
        head=groups["head"],
        final_norm=groups["final_norm"],
        trainable=frozenset(trainable),
        blocks={b: tuple(v) for b, v in sorted(blocks.items())},
        numel={n: p.numel() for n, p in model.named_parameters()},
    )


def freeze(model: nn.Module, selection: Selection) -> None:
    """Sets ``requires_grad`` so that exactly ``selection.trainable`` receives gradients.

    ``requires_grad=False`` (not just leaving parameters out of the optimizer) is what saves the
    backward FLOPs and memory of frozen weights.
    """
    for name, param in model.named_parameters():
        param.requires_grad_(name in selection.trainable)

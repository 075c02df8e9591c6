"""Component groups of a timm Vision Transformer and the freezing that trains exactly one of them.

A ViT block is ``norm1 -> attn -> +res -> norm2 -> mlp (fc1, act, fc2) -> +res``. The paper finetunes
one *component group* across all blocks (its Table 3) while everything else stays frozen. Groups
are declared as rules over parameter names (first match wins), so a new timm family is supported
by adding a rule, and a parameter no rule knows is an error instead of a silent freeze.

Layer scale (``ls1``/``gamma_1``) multiplies the attention output and goes with ``mha``;
``ls2``/``gamma_2`` and the SwiGLU hidden norm (``mlp.norm``) act on the second feedforward
layer's input/output and go with ``fc2``. Both fused (``fc1``) and split SwiGLU (``fc1_g``,
``fc1_x``) first layers are ``fc1``.

Language transformers (:mod:`plasticity.text`) have the same five groups, defined by what each
function feeds (the paper's roles): LN1 is the norm whose output enters the attention, LN2 the one whose
output enters the feed-forward. Llama (pre-RMSNorm, like the ViT): LN1 = ``input_layernorm``; MHA =
``self_attn.{q,k,v,o}_proj``; LN2 = ``post_attention_layernorm``; FC1 = ``mlp.gate_proj`` +
``mlp.up_proj`` (SwiGLU's two first layers); FC2 = ``mlp.down_proj``; ``emb`` = ``embed_tokens``;
``final_norm`` = ``norm``. BERT is post-LN (each LayerNorm sits *after* its residual add), so a norm
feeds the sublayer *after* it: MHA = ``attention.self.{query,key,value}`` + ``attention.output.dense``;
LN2 = ``attention.output.LayerNorm`` (it feeds ``intermediate``); FC1 = ``intermediate.dense``; FC2 =
``output.dense``; LN1 of layer i = ``output.LayerNorm`` of layer i-1 (it feeds layer i's attention), and
of layer 0 the embeddings' LayerNorm; the last layer's ``output.LayerNorm`` feeds the head: the final
norm. ``emb`` = the other ``embeddings.*``. Qwen2 and Mistral have Llama's layout (Qwen2's q/k/v
projections have biases: MHA's). ``transformers``' ViT and Dinov2 (:mod:`plasticity.hfvision`) are
pre-LN like timm's: LN1 = ``layernorm_before`` / ``norm1``, MHA = ``attention.{q,k,v,o}_proj`` (and
Dinov2's ``layer_scale1``), LN2 = ``layernorm_after`` / ``norm2``, FC1 = ``mlp.fc1``, FC2 = ``mlp.fc2``
(and ``layer_scale2``), ``emb`` = ``embeddings.*``, ``final_norm`` = ``layernorm``.

This module owns the one definition of the groups (:data:`GROUP_TABLE`: names, labels, colours,
the module of each family's block whose plasticity a group measures, the bound shown beside it); the config
resolver ``${groups:}``, the analyses, the report and the figures all read it from here. It also
owns the checks of the ``component`` section (:func:`check_strategy`), run before any compute.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, NamedTuple

from plasticity.validate import Problems, check_dataset

if TYPE_CHECKING:
    import torch.nn as nn


class Group(NamedTuple):
    """One trainable configuration: its config name and how every table, figure and analysis shows it.

    Attributes:
        name: The ``component.name`` value (``ln1`` ... ``fc2``, ``emb``, ``all``, ``head``).
        label: How tables and figures name it (paper notation).
        color: Matplotlib colour of its lines and bars.
        module: For the five block groups, the timm block submodule whose plasticity is measured
            (``block.get_submodule(module)``); None otherwise.
        bound: For the five block groups, the upper bound (paper Props. 1-3) shown beside its
            plasticity: ``prop1`` (LN), ``prop2`` (FC), ``prop3_rms`` (MHA); None otherwise.
        bert: The group's site in a BERT layer (:class:`Site` syntax: ``in>out`` when the function
            runs from one module's input to another's output; ``a+b``: the two outputs side by side;
            ``<name``: ``name`` in the previous layer, the embeddings' norm for layer 0).
        llama: The group's site in a Llama decoder layer (Qwen2's and Mistral's too).
        hf_vit: The group's site in a ``transformers`` ViT layer.
        dinov2: The group's site in a ``transformers`` Dinov2 layer.
    """

    name: str
    label: str
    color: str
    module: str | None = None
    bound: str | None = None
    bert: str | None = None
    llama: str | None = None
    hf_vit: str | None = None
    dinov2: str | None = None


GROUP_TABLE: tuple[Group, ...] = (
    Group("ln1", "LN1", "tab:blue", "norm1", "prop1", "<output.LayerNorm", "input_layernorm", "layernorm_before",
          "norm1"),
    Group("mha", "MHA", "tab:red", "attn", "prop3_rms", "attention.self>attention.output.dense", "self_attn",
          "attention", "attention"),
    Group("ln2", "LN2", "tab:cyan", "norm2", "prop1", "attention.output.LayerNorm", "post_attention_layernorm",
          "layernorm_after", "norm2"),
    Group("fc1", "FC1", "tab:orange", "mlp.fc1", "prop2", "intermediate.dense", "mlp.gate_proj+mlp.up_proj", "mlp.fc1",
          "mlp.fc1"),
    Group("fc2", "FC2", "tab:green", "mlp.fc2", "prop2", "output.dense", "mlp.down_proj", "mlp.fc2", "mlp.fc2"),
    Group("emb", "embedding", "tab:brown"),
    Group("all", "full", "tab:purple"),
    Group("head", "linear probing", "tab:gray"),
)
"""The single definition of every component group; everything else derives from it."""

INFO: dict[str, Group] = {g.name: g for g in GROUP_TABLE}
"""``component.name`` -> its :class:`Group`."""

GROUPS: tuple[str, ...] = tuple(g.name for g in GROUP_TABLE if g.module is not None)
"""The paper's five component groups, in block order: ``ln1, mha, ln2, fc1, fc2``."""

COMPONENTS: tuple[str, ...] = GROUPS + ("emb", "all", "head")
"""Every value ``component.name`` accepts: a group, the embedding, full finetuning, or the head only."""

BASELINES: tuple[str, ...] = ("all", "head")
"""Full finetuning and linear probing (by SGD on the head), the paper's two baselines."""

TABLE_ORDER: tuple[str, ...] = GROUPS + BASELINES
"""Column order of the report's tables: the five groups, full finetuning, linear probing."""

BOUND_OF: dict[str, str] = {g.name: g.bound for g in GROUP_TABLE if g.bound is not None}
"""Group -> the bound shown beside its plasticity (MHA: Prop. 3 at the RMS token radius)."""

FAMILIES: tuple[str, ...] = ("vit", "bert", "llama", "hf_vit", "dinov2")
"""The block layouts the groups know: timm ViTs, the two text families of :mod:`plasticity.text` and the two
image families of :mod:`plasticity.hfvision`."""

TEXT_FAMILIES: tuple[str, ...] = ("bert", "llama")
"""The layouts whose models read token ids (the others read images)."""


class Site(NamedTuple):
    """Where a group's function sits in a block: the module whose input is the function's input and
    the modules whose outputs, side by side, are its output.

    ``"norm1"``: one module, input and output. ``"attention.self>attention.output.dense"``: from the
    self-attention's input to the output projection's output (BERT's attention output adds the
    residual and normalises after it, so the MHA function ends at the projection).
    ``"mlp.gate_proj+mlp.up_proj"``: one input, the two outputs concatenated (SwiGLU's FC1, whose
    plasticity is then that of the stacked linear map). The function is *chained* (runs through two modules)
    when its one output module is not its input module.
    """

    input: str
    outputs: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> "Site":
        if ">" in text:
            first, last = text.split(">")
            return cls(first, (last,))
        outputs = tuple(text.split("+"))
        return cls(outputs[0], outputs)


SITES: dict[str, dict[str, Site]] = {
    family: {g.name: Site.parse(g.module if family == "vit" else getattr(g, family))
             for g in GROUP_TABLE if g.module is not None}
    for family in FAMILIES
}
"""Family -> group -> its :class:`Site` in a block of that family."""


def family_of(model: "nn.Module") -> str:
    """The block layout of a model: ``bert`` / ``llama`` for a text model, ``hf_vit`` / ``dinov2`` for a
    ``transformers`` image model, ``vit`` for timm's."""
    return getattr(model, "family", "vit")


def site_module(model: "nn.Module", block: int, path: str) -> "nn.Module":
    """The module at a :class:`Site` path of block ``block``: ``<name`` is ``name`` in the previous block
    (a post-LN norm closing block i-1 is what enters block i), for block 0 the embeddings' norm."""
    if path.startswith("<"):
        if block == 0:
            return model.embedding_norm
        block, path = block - 1, path[1:]
    return model.blocks[block].get_submodule(path)


def group_module(model: "nn.Module", group: str, block: int) -> "nn.Module":
    """The module whose input is the input of ``group``'s function in block ``block`` (a norm, a linear map...)."""
    return site_module(model, block, SITES[family_of(model)][group].input)


COLORS: dict[str, str] = {g.name: g.color for g in GROUP_TABLE}


ADAPTER_LABELS: dict[str, str] = {"lora": "LoRA"}


def label(tag: str) -> str:
    """How tables and figures name a configuration: a group by its label (``MHA``, ``full``), the others
    from their tag (``mha+fc1_b8-11`` -> ``MHA+FC1 b8-11``, ``mha_lora_r8`` -> ``MHA LoRA r8``, ``probe``
    -> ``linear probe (logistic regression)``); an unknown tag as it is."""
    if tag in INFO:
        return INFO[tag].label
    if is_probe(tag):  # probe_block_output_cls -> "(logistic regression, block_output cls)"
        variant = str(tag)[len(PROBE) + 1:].replace("block_output_", "block_output ")
        return "linear probe (logistic regression" + (f", {variant})" if variant else ")")
    parts = parse_tag(tag)
    if parts is None:
        return tag
    adapter, budget = parts["adapter"], parts["budget"]  # each part that is there, after the groups
    extras = (parts["blocks"], adapter and f"{ADAPTER_LABELS.get(adapter, adapter)} r{parts['rank']}",
              budget is not None and f"budget {budget:g}")
    return " ".join(["+".join(INFO[g].label if g in INFO else g for g in parts["groups"]), *filter(None, extras)])


def color(name: str) -> str:
    """The colour of a group (black when unknown)."""
    return COLORS.get(name, "k")


# A block of timm (blocks.<i>), Llama or transformers' ViT (backbone.layers.<i>), BERT or Dinov2
# (backbone.encoder.layer.<i>): each group's rule names its module in every family (the module docstring's table).
_BLOCK = r"^(blocks|backbone\.(layers|encoder\.layer))\.(?P<block>\d+)\."
RULES: tuple[tuple[str, str] | tuple[str, str, int], ...] = (
    (r"^(patch_embed|cls_token|reg_token|pos_embed|norm_pre)(\.|$)", "emb"),
    (r"^backbone\.embeddings\.LayerNorm\.", "ln1", 1),  # BERT's block 0 LN1: it feeds layer 0's attention
    (r"^backbone\.(embeddings|embed_tokens)\.", "emb"),
    (_BLOCK + r"(norm1|input_layernorm|layernorm_before)\.", "ln1"),
    (_BLOCK + r"(attn|ls1|gamma_1|self_attn|attention\.(self|output\.dense|[qkvo]_proj)|layer_scale1)(\.|$)", "mha"),
    (_BLOCK + r"(norm2|post_attention_layernorm|attention\.output\.LayerNorm|layernorm_after)\.", "ln2"),
    (_BLOCK + r"(mlp\.(fc1(_g|_x)?|gate_proj|up_proj)|intermediate\.dense)\.", "fc1"),
    (_BLOCK + r"(mlp\.(fc2|norm|down_proj)|ls2|gamma_2|layer_scale2|output\.dense)(\.|$)", "fc2"),
    (_BLOCK + r"output\.LayerNorm\.", "ln1", 1),  # BERT: LN1 of the next block (the last block's: the final norm)
    (r"^(norm|fc_norm|backbone\.(norm|layernorm))\.", "final_norm"),
    (r"^(head|attn_pool)(\.|$)", "head"),
)
"""(regex over the parameter name, group[, block shift]); the first match classifies a parameter. A shift
of 1 puts a post-LN norm in the block it feeds (block 0 when the name has no block: the embeddings' norm)."""

_COMPILED = tuple((re.compile(rule[0]), rule[1], rule[2] if len(rule) > 2 else None) for rule in RULES)


class UnknownParameterError(ValueError):
    """A parameter that no rule in :data:`RULES` classifies."""


def classify(name: str, depth: int | None = None) -> tuple[str, int | None]:
    """Returns the group of a parameter and its block index (``None`` outside the blocks).

    Args:
        name: Parameter name as in ``model.named_parameters()``.
        depth: The model's number of blocks: a norm shifted past the last block is the final norm.

    Raises:
        UnknownParameterError: if no rule matches.
    """
    for pattern, group, shift in _COMPILED:
        if match := pattern.match(name):
            block = match.groupdict().get("block")
            if shift is not None:
                block = shift + int(block or -1)  # no block: the embeddings' norm, block 0
                return ("final_norm", None) if block == depth else (group, block)
            return group, None if block is None else int(block)
    raise UnknownParameterError(
        f"cannot classify parameter {name!r} into a component group ({', '.join(GROUPS)}, emb, "
        f"final_norm, head). Supported: timm ViT, DeiT, DINOv2/v3, BEiT and EVA02 parameter names, BERT/RoBERTa "
        f"and Llama/Qwen2/Mistral layers (plasticity.text), and transformers' ViT and Dinov2 (plasticity.hfvision). "
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
        parts: For a combination (``mha+fc1``, a block subset, ``auto``): each group -> its
            trainable names, so gradient norms are logged per group; None for one whole group.
    """

    component: str
    group: tuple[str, ...]
    head: tuple[str, ...]
    final_norm: tuple[str, ...]
    trainable: frozenset[str]
    blocks: dict[int, tuple[str, ...]]
    numel: dict[str, int]
    parts: dict[str, tuple[str, ...]] | None = None

    @property
    def by_group(self) -> dict[str, tuple[str, ...]]:
        """Each trained group -> its trainable names (one entry, the component, for a single group)."""
        return dict(self.parts) if self.parts else {self.component: self.group}

    def count(self, names: Iterable[str]) -> int:
        """Number of scalar parameters among ``names``."""
        return sum(self.numel[n] for n in names)

    @property
    def counts(self) -> dict[str, int]:
        """Trainable parameter counts: the group, the head, the final norm if trained, the total."""
        return {"group": self.count(self.group), "head": self.count(self.head),
                "final_norm": self.count(n for n in self.final_norm if n in self.trainable),
                "total": self.count(self.trainable)}


def resolve(model: "nn.Module") -> dict[str, tuple[str, ...]]:
    """Maps each group (the five groups, ``emb``, ``final_norm``, ``head``) to its parameter names.

    Raises:
        UnknownParameterError: on the first parameter no rule classifies.
    """
    names: dict[str, list[str]] = {g: [] for g in GROUPS + ("emb", "final_norm", "head")}
    depth = block_count(model)
    for name, _ in model.named_parameters():
        names[classify(name, depth)[0]].append(name)
    return {group: tuple(members) for group, members in names.items()}


def group_counts(model: "nn.Module") -> dict[str, int]:
    """Number of scalar parameters in each group of :func:`resolve`."""
    numel = {n: p.numel() for n, p in model.named_parameters()}
    return {group: sum(numel[n] for n in members) for group, members in resolve(model).items()}


AUTO = "auto"
"""``component=auto``: the measured plasticity chooses what trains (:mod:`plasticity.auto`)."""
COMBINABLE: tuple[str, ...] = GROUPS + ("emb",)
"""Groups that ``+`` joins (``component.name=mha+fc1``)."""


def parse_component(component: str) -> tuple[str, ...]:
    """The groups of a ``component.name``: ``mha`` -> ``("mha",)``, ``mha+fc1`` -> ``("mha", "fc1")``.

    Raises:
        ValueError: naming the choices, for an unknown name, a repeated group, or ``all``/``head``
            in a combination.
    """
    parts = tuple(str(component).split("+"))
    if len(parts) == 1:
        if component not in COMPONENTS + (AUTO,):
            raise ValueError(
                f"component={component!r} is not a component group. Choices: {', '.join(COMPONENTS + (AUTO,))}, "
                f"or groups joined by '+' from {', '.join(COMBINABLE)}. Fix: component=<one of them> (e.g. "
                f"component=mha, or component.name=mha+fc1).")
        return parts
    bad = [p for p in parts if p not in COMBINABLE]
    if bad or len(set(parts)) != len(parts):
        raise ValueError(
            f"component.name={component!r}: a combination joins distinct groups from {', '.join(COMBINABLE)} "
            f"with '+'{f' ({bad[0]!r} is not one)' if bad else ' (a group repeats)'}. Fix: e.g. "
            f"component.name=mha+fc1.")
    return parts


def check_blocks(blocks, depth: int | None = None) -> None:
    """``component.blocks``: null (every block) or distinct block indices (below ``depth`` if known).

    Raises:
        ValueError: naming the key, the value and the fix.
    """
    if blocks is None:
        return
    values = list(blocks) if hasattr(blocks, "__iter__") else None
    ok = values and all(_is_index(b) for b in values) and len(set(values)) == len(values)
    if not ok:
        raise ValueError(f"component.blocks={blocks!r} must be null (every block) or a list of distinct block "
                         f"indices. Fix: e.g. component.blocks=[8,9,10,11].")
    if depth is not None and max(values) >= depth:
        raise ValueError(f"component.blocks={list(values)} has block {max(values)}, but the model has {depth} blocks "
                         f"(0-{depth - 1}). Fix: indices below {depth}.")


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def block_count(model: "nn.Module") -> int | None:
    """The model's number of blocks (None for a model without ``blocks``)."""
    return len(getattr(model, "blocks", ())) or None


def blocks_tag(blocks) -> str:
    """``[8, 9, 10, 11]`` -> ``b8-11``; ``[2, 5]`` -> ``b2.5``; None -> ``""``."""
    if not blocks:
        return ""
    if isinstance(blocks, str) or not hasattr(blocks, "__iter__") or not all(_is_index(b) for b in blocks):
        # Not block indices: the run path still resolves (a resolver's error is OmegaConf's traceback),
        # and check_blocks names component.blocks before anything runs.
        return f"b{blocks}"
    values = sorted(blocks)
    if len(values) > 1 and values == list(range(values[0], values[-1] + 1)):
        return f"b{values[0]}-{values[-1]}"
    return "b" + ".".join(str(b) for b in values)


def has_adapter(adapter) -> bool:
    """An adapter config names an adapter (``adapter=none`` gives ``name: none``)."""
    return bool(adapter) and adapter.get("name") not in (None, "none")


def component_tag(name: str, blocks=None, adapter=None, budget=None) -> str:
    """The configuration's name in run paths, records and tables: the component, then the block
    subset, the adapter and the ``auto`` budget (``mha+fc1_b8-11``, ``mha_lora_r8``, ``auto_budget0.05``)."""
    tag = str(name)
    if name == AUTO and budget is not None:
        tag += f"_budget{budget}"
    if blocks:
        tag += "_" + blocks_tag(blocks)
    if has_adapter(adapter):
        tag += f"_{adapter['name']}_r{adapter.get('rank')}"  # a missing rank: check_job_adapter names it
    return tag


PROBE = "probe"
"""The tag of the paper's linear probe (``task=linear_probe``: the last block's output, mean-pooled)."""


def probe_tag(features: str = "block_output", pool: str | None = "mean") -> str:
    """A linear probe's configuration tag: :data:`PROBE` for the paper's features, else ``probe_<features>``
    and, for the last block's output, ``_<pool>`` (``probe_block_output_cls``; ``probe_pre_logits``, pooled
    by the model itself). Each is its own configuration in the report."""
    if features == "block_output" and pool == "mean":
        return PROBE
    return f"{PROBE}_{features}" + (f"_{pool}" if features == "block_output" else "")


def is_probe(tag: str) -> bool:
    """``tag`` names a linear probe (:func:`probe_tag`)."""
    return tag == PROBE or str(tag).startswith(f"{PROBE}_")


_BLOCKS_TAG = re.compile(r"^b\d+(-\d+|(\.\d+)*)$")
_RANK_TAG = re.compile(r"^r\d+$")
_BUDGET_TAG = re.compile(r"^budget(?P<budget>\d+(\.\d*)?(e-?\d+)?)$")


def parse_tag(tag: str) -> dict | None:
    """The parts of a :func:`component_tag`, or None when it is not one.

    ``mha+fc1_b8-11_lora_r8`` -> ``{"groups": ["mha", "fc1"], "blocks": "b8-11", "adapter": "lora",
    "rank": 8, "budget": None}``; ``auto_budget0.05`` -> ``budget`` 0.05 (the parts None when absent).
    """
    head, *rest = str(tag).split("_")
    if not head or any(not g for g in head.split("+")):
        return None
    out = {"groups": head.split("+"), "blocks": None, "adapter": None, "rank": None, "budget": None}
    if head == AUTO and len(rest) == 1 and (match := _BUDGET_TAG.match(rest[0])):
        out["budget"] = float(match["budget"])
        return out
    if rest and _BLOCKS_TAG.match(rest[0]):
        out["blocks"] = rest.pop(0)
    if len(rest) == 2 and _RANK_TAG.match(rest[1]):
        out["adapter"], out["rank"] = rest[0], int(rest[1][1:])
    elif rest:
        return None
    return out


def strategy_of(tag: str) -> str:
    """The kind of configuration a tag names: ``group``, ``combination`` (several groups or a block
    subset), its adapter (``lora``), ``auto``, ``full``, ``head`` or ``probe``; ``group`` when it does not parse."""
    if is_probe(tag):
        return PROBE
    parts = parse_tag(tag)
    if parts is None:
        return "group"
    if parts["adapter"]:
        return parts["adapter"]
    kind = {"all": "full", "head": "head", AUTO: AUTO}.get(parts["groups"][0])
    if kind and len(parts["groups"]) == 1:
        return kind
    return "combination" if len(parts["groups"]) > 1 or parts["blocks"] else "group"


def select(model: "nn.Module", component: str, train_final_norm: bool = True, blocks=None) -> Selection:
    """Resolves the parameters that train when finetuning ``component``.

    Args:
        model: A timm ViT-family model.
        component: One of :data:`COMPONENTS`, or groups joined by ``+`` (``mha+fc1``).
        train_final_norm: Whether the final norm trains too (the official code trains it in every
            configuration). Always true for ``all``; ignored for ``head`` (nothing but the head).
        blocks: Block indices whose parameters of the groups train (None: every block); the
            embedding (``emb``) has no block and trains whole.
    """
    parts = parse_component(component)
    check_blocks(blocks, block_count(model))
    groups = resolve(model)
    if component == "all":
        return selection_of(model, component, {"all": tuple(n for n, _ in model.named_parameters())}, groups, True,
                          single=True)
    if component == AUTO:
        raise ValueError("component=auto is resolved by plasticity.auto.choose, not by select().")
    keep = set(blocks) | {None} if blocks else None  # None: outside the blocks (emb), kept whole
    chosen = {g: tuple(n for n in groups[g] if keep is None or classify(n, block_count(model))[1] in keep)
              for g in parts}
    final = train_final_norm and component != "head"
    return selection_of(model, component, chosen, groups, final, single=len(parts) == 1 and not blocks)


def select_units(model: "nn.Module", units: Iterable[tuple[str, int | None]], train_final_norm: bool = True,
                 component: str = AUTO) -> Selection:
    """The selection that trains the given (group, block) units (block None: the group in every block)."""
    units, groups, depth = set(units), resolve(model), block_count(model)
    chosen = {g: tuple(n for n in groups[g] if {(g, None), (g, classify(n, depth)[1])} & units)
              for g in COMBINABLE if any(unit[0] == g for unit in units)}
    return selection_of(model, component, chosen, groups, train_final_norm, single=False)


def selection_of(model: "nn.Module", component: str, chosen: dict[str, tuple[str, ...]],
                 groups: dict[str, tuple[str, ...]], train_final_norm: bool, single: bool) -> Selection:
    """The :class:`Selection` that trains ``chosen`` (group -> names), the head and (by switch) the
    final norm; ``single``: one whole group (no per-group ``parts``).

    Args:
        model: The model (its parameter names and sizes).
        component: The selection's name.
        chosen: Each trained group -> its trainable names (LoRA names for an adapter).
        groups: :func:`resolve` of the model (the head and final norm names).
        train_final_norm: Whether the final norm trains.
        single: One whole group: ``parts`` stays None.
    """
    group = tuple(n for members in chosen.values() for n in members)
    trainable = set(group) | set(groups["head"]) | set(groups["final_norm"] if train_final_norm else ())
    located = [(classify(n, block_count(model))[1], n) for n, _ in model.named_parameters() if n in trainable]
    blocks = {b: tuple(n for at, n in located if at == b) for b in sorted({at for at, _ in located} - {None})}
    return Selection(component=component, group=group, head=groups["head"], final_norm=groups["final_norm"],
                     trainable=frozenset(trainable), blocks=blocks,
                     numel={n: p.numel() for n, p in model.named_parameters()}, parts=None if single else chosen)


def freeze(model: "nn.Module", selection: Selection) -> None:
    """Sets ``requires_grad`` so that exactly ``selection.trainable`` receives gradients.

    ``requires_grad=False`` (not just leaving parameters out of the optimizer) is what saves the
    backward FLOPs and memory of frozen weights.
    """
    for name, param in model.named_parameters():
        param.requires_grad_(name in selection.trainable)


# ------------------------------------------------------------------------- the component section


def blocks_of(component: Any) -> list[int] | None:
    """``component.blocks`` as a list of ints (None: every block)."""
    blocks = component.get("blocks")
    return None if blocks is None else [int(b) for b in blocks]


def adapter_of(cfg: Any) -> dict | None:
    """The configured adapter as a plain dict (``{"name": "lora", "rank": 8, ...}``), or None."""
    from omegaconf import OmegaConf

    node = cfg.get("adapter")
    return OmegaConf.to_container(node, resolve=True) if has_adapter(node) else None


def tag_of(cfg: Any) -> str:
    """The job config's :func:`component_tag`, as its run path (``run_name``) spells it."""
    auto = cfg.component.get("auto") or {}  # only component=auto has the section
    return component_tag(cfg.component.name, blocks_of(cfg.component), adapter_of(cfg), auto.get("budget"))


def check_strategy(cfg: Any, p: Problems) -> tuple[str, ...] | None:
    """``component.name`` (a group, ``+``-joined groups or ``auto``), ``component.blocks``,
    ``component.lr_scale`` and ``component.auto``; the adapter is
    :func:`plasticity.adapters.check_job_adapter`'s.

    Returns:
        The groups ``component.name`` selects, or None when it does not parse (reported).
    """
    component = cfg.component
    if not p.check(parse_component, component.name):  # raises naming the choices
        return None
    parts = parse_component(component.name)
    blocks = component.blocks
    p.check(check_blocks, blocks, model_depth(cfg) if blocks is not None else None)  # depth: a meta-device build
    for group in component.lr_scale or {}:  # its values' range: the schema's (plasticity.schema.Component)
        p.require(group in parts, f"component.lr_scale has {group!r}, which is not trained by "
                                  f"component.name={component.name!r} (groups: {', '.join(parts)}). "
                                  f"Fix: component.lr_scale={{{parts[0]}: 10}} or drop the key.")
    if component.name == AUTO:
        check_auto(cfg, p)
    return parts


def model_depth(cfg: Any) -> int | None:
    """The configured model's number of blocks, from its state dict shapes on the meta device (None if unknown)."""
    from omegaconf import OmegaConf

    from plasticity.models import block_layout, model_shapes

    try:
        kwargs = OmegaConf.to_container(cfg.model.kwargs, resolve=True)
        return block_layout(model_shapes(cfg.model.name, kwargs)).get("depth")
    except Exception:  # an unknown model name is reported by check_model
        return None


def check_auto(cfg: Any, p: Problems) -> None:
    """``component.auto``: the reference dataset exists, no block subset (the numbers' ranges: the schema's)."""
    auto = cfg.component.get("auto")  # component=auto's own section: a component.name=auto override lacks it
    if not p.require(auto is not None, "component=auto needs component.auto (reference, n_pairs, batch_size, "
                                       "budget). Fix: component=auto (conf/component/auto.yaml)."):
        return
    check_dataset(cfg, p, auto.reference, key="component.auto.reference")
    p.require(cfg.component.blocks is None,
              f"component.blocks={cfg.component.blocks!r} with component=auto: the measurement chooses the blocks. "
              f"Fix: component.blocks=null, or a budget (component.auto.budget=0.05).")

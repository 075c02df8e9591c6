"""Language transformers as classifiers: a ``transformers`` BERT- or Llama-family backbone and a new head
(Qwen2 and Mistral are Llama-family: the same layer names). :func:`create_hf_model` also builds the image
models of :mod:`plasticity.hfvision` (a ViT or Dinov2 folder), which load the same way.

:class:`TextTransformer` wraps the backbone (``BertModel`` without its pooler, ``LlamaModel``
without its LM head) so the rest of the project sees what it sees in a timm ViT: ``blocks`` (the
backbone's layers, in order), ``forward_features`` (the tokens after the last layer and, for Llama,
the final norm), a ``head`` and ``reset_classifier``. Parameters keep the backbone's own names under
``backbone.`` (``backbone.encoder.layer.3.attention.self.query.weight``,
``backbone.layers.3.mlp.gate_proj.weight``), which :data:`plasticity.components.RULES` classifies.

Inputs are token ids ``(B, L)`` right-padded with :data:`PAD` (-1): the model derives the attention
mask from them (no real token id is negative), so every loader, sampler and checkpoint path of the
images carries text unchanged. The head reads a pooled token, documented per family:

- encoders (BERT, RoBERTa): the mean of the last layer's tokens over the real (unpadded) positions,
  as sentence-transformers pools all-MiniLM-L6-v2;
- decoders (Llama): the last real token's final-norm output, the only token that has seen the
  whole text under the causal mask.
"""

from __future__ import annotations

import copy
import logging
from functools import lru_cache

import torch
import torch.nn as nn

from plasticity.data.text import PAD  # the padding id of every token batch: the data layer's
from plasticity.errors import WeightsError
from plasticity.hfvision import HFClassifier, HFVisionTransformer, processor_stats
from plasticity.text.hub import FAMILIES, IMAGE_FAMILIES, family_of_config, from_files, is_vision_model, locate

__all__ = ["FAMILIES", "PAD", "TextTransformer", "check_text_model", "create_hf_model", "create_text_model",
           "family_of_config", "max_positions", "text_config", "tiny_config"]

log = logging.getLogger(__name__)


def check_hub_family(name: str, config) -> str:
    """The family of ``name``'s config, refusing an image architecture named by a hub id (an image model is
    told apart from a text model by its folder's config.json, before anything is fetched).

    Raises:
        WeightsError: an unknown architecture (:func:`family_of_config`), or a hub ViT/Dinov2, naming the fix.
    """
    family = family_of_config(config)
    if family in IMAGE_FAMILIES:
        raise WeightsError(
            f"model.name={name!r} is a {config.model_type} image model on the Hugging Face hub: image models load "
            f"from a local folder. Fix: save it once (AutoModel.from_pretrained(...).save_pretrained(<folder>), "
            f"its AutoImageProcessor beside it) and set model.name=hf:<folder>.")
    return family


class TextTransformer(HFClassifier):
    """A classifier on a BERT- or Llama-family backbone (see the module docstring).

    Args:
        backbone: ``BertModel`` (``add_pooling_layer=False``) or ``LlamaModel``, attention ``sdpa``.
        num_classes: Outputs of the new head.
        pad_token_id: The id fed at padded positions (masked out; any valid id).

    Attributes:
        family: ``bert`` or ``llama``.
        head: ``nn.Linear(width, num_classes)``.
    """

    def __init__(self, backbone: nn.Module, num_classes: int, pad_token_id: int = 0) -> None:
        super().__init__(backbone, num_classes)
        # Llama's embedding-mode attention relies on sdpa's causal default (no mask given); eager
        # attention would attend to future tokens there. (Built here with sdpa already: a no-op then.)
        backbone.set_attn_implementation("sdpa")
        self.pad_token_id = int(pad_token_id)

    @property
    def bos_token_id(self) -> int | None:
        """The id a decoder's measured windows start with (:func:`plasticity.measure.measure`): without it,
        a window's first word becomes the attention sink and dominates every distance. None for encoders,
        whose windows start with the tokenizer's [CLS].

        Raises:
            ValueError: a decoder whose config has no ``bos_token_id`` (some Qwen2 configs), naming the fix.
        """
        if self.family != "llama":
            return None
        if self.config.bos_token_id is None:
            raise ValueError(f"this {self.config.model_type} decoder's config has no bos_token_id, which its measured "
                             f"windows start with. Fix: model.kwargs.bos_token_id=<the id of its tokenizer's BOS or "
                             f"<|endoftext|> token>.")
        return self.config.bos_token_id

    @property
    def embedding_norm(self) -> nn.Module:
        """BERT's embeddings' LayerNorm: its output enters layer 0's attention (layer 0's LN1)."""
        return self.backbone.embeddings.LayerNorm

    # ------------------------------------------------------------------------------------ forward

    def split(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ids with PAD replaced, mask)`` of a padded batch, trimmed to its longest row.

        Trimming the columns every row pads changes nothing (they are masked) and saves their compute.
        """
        mask = ids != PAD
        longest = int(mask.sum(dim=1).max()) if ids.numel() else 0
        ids, mask = ids[:, :max(longest, 1)], mask[:, :max(longest, 1)]
        return ids.masked_fill(~mask, self.pad_token_id), mask.long()

    def forward_features(self, ids: torch.Tensor) -> torch.Tensor:
        """The last layer's tokens ``(B, L', D)`` (Llama: after the final norm); L' the batch's longest row."""
        ids, mask = self.split(ids)
        return self.backbone(input_ids=ids, attention_mask=mask).last_hidden_state

    def pool(self, tokens: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """``(B, D)``: the mean over real tokens (encoders) or the last real token (decoders)."""
        mask = (ids != PAD)[:, :tokens.shape[1]]
        if self.family == "llama":
            last = mask.long().sum(dim=1).clamp_min(1) - 1  # right padding: the last real position
            return tokens[torch.arange(tokens.shape[0], device=tokens.device), last]
        weights = mask.to(tokens.dtype).unsqueeze(-1)
        return (tokens * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1)

    def pre_logits(self, ids: torch.Tensor) -> torch.Tensor:
        """The pooled features the head reads."""
        return self.pool(self.forward_features(ids), ids)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.pre_logits(ids))

    # ------------------------------------------------------------------- what the analyses use

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """The embedding-layer tokens of unpadded windows ``(B, L)``: what enters the first layer.

        BERT: word + position + token-type embeddings, then the embedding LayerNorm (its output is
        the first layer's input). Llama: the token embeddings (positions enter as rotations inside
        attention: :meth:`attention_kwargs`).
        """
        return self.backbone.embeddings(input_ids=ids) if self.family == "bert" else self.backbone.embed_tokens(ids)

    def attention_kwargs(self, tokens: torch.Tensor) -> dict:
        """What a layer's attention needs beside its input when applied alone to unpadded windows:
        Llama's rotary cos/sin at positions 0..L-1 and no mask (sdpa then applies the causal mask; Qwen2's and
        Mistral's attention take the mask as a required argument); nothing for BERT (no mask: every position
        attends to every other)."""
        if self.family == "bert":
            return {}
        positions = torch.arange(tokens.shape[1], device=tokens.device).unsqueeze(0)
        return {"position_embeddings": self.backbone.rotary_emb(tokens, positions), "attention_mask": None}


def max_positions(config) -> int | None:
    """The longest sequence the model's positions cover (BERT's learned positions; Llama's configured
    context), or None when the config does not say."""
    value = getattr(config, "max_position_embeddings", None)
    # RoBERTa's position ids start after its padding index: two positions fewer are usable.
    roberta = getattr(config, "model_type", "") in ("roberta", "xlm-roberta")
    return None if value is None else int(value) - (2 if roberta else 0)


@lru_cache(maxsize=8)
def text_config(name: str):
    """The ``transformers`` config of text model ``name`` (from its files; nothing is built), memoised per process
    (a GGUF file's config takes seconds to parse)."""
    from transformers import AutoConfig

    return from_files(AutoConfig, name)


def create_hf_model(name: str, num_classes: int, pretrained: bool = True, weights_file: str | None = None,
                    config=None, weights: dict | None = None, **kwargs) -> nn.Module:
    """The classifier of ``model.name`` with a new ``num_classes`` head: a :class:`TextTransformer`, or an
    :class:`~plasticity.hfvision.HFVisionTransformer` for a ViT/Dinov2 folder.

    Args:
        name: A wheel name (``minilm_l6``, ``smollm2_135m``) or ``hf:<id or folder>``.
        num_classes: Outputs of the head (always newly initialised).
        pretrained: Load the pretrained weights; False: the architecture at random init.
        weights_file: The file ``weights`` were read from (``model.weights_file``: a state dict of
            the wrapped model or of the backbone alone), named in errors.
        weights: Its tensors (:func:`plasticity.models.read_state`), loaded instead of the pretrained ones.
        config: A ``transformers`` config to build from instead of ``name``'s (tests: tiny models).
        **kwargs: Config overrides (``num_hidden_layers=2``, ``hidden_dropout_prob=0.0``...).
    """
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    if config is None:
        config = copy.deepcopy(text_config(name))  # a copy: the overrides below must not reach the memoised one
    config.update(kwargs)
    family = family_of_config(config) if name is None or is_vision_model(name) else check_hub_family(name, config)
    # BERT's and ViT's poolers (a dense layer on the first token) are not used: the head reads the tokens
    built = {"attn_implementation": "sdpa", **({"add_pooling_layer": False} if family in ("bert", "hf_vit") else {})}
    if pretrained and weights is None and name is not None:
        located = locate(name)
        log.info("loading %s from %s%s", name, located.path, f" ({located.gguf_file}, dequantised to fp32)"
                 if located.gguf_file else "")
        # transformers reports the checkpoint's pooler (left out on purpose) as unexpected: an error-level
        # logger keeps that table out of the run's log; real failures raise.
        verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()  # per-tensor bars: hundreds of lines in a sweep's log
        try:
            backbone = from_files(AutoModel, name, config=config, **built)
        finally:
            hf_logging.set_verbosity(verbosity)
            if bars:
                hf_logging.enable_progress_bar()
    else:  # the architecture at random init, no files
        backbone = AutoModel.from_config(config, **built)
    # Every model trains and measures in fp32 (autocast aside). A GGUF model is already dequantised to
    # fp32, and transformers refuses .float() on it (it marks it quantised): cast tensor by tensor.
    for tensor in (*backbone.parameters(), *backbone.buffers()):
        if tensor.is_floating_point() and tensor.dtype != torch.float32:
            tensor.data = tensor.data.float()
    if family in IMAGE_FAMILIES:
        model = HFVisionTransformer(backbone, num_classes, processor_stats(locate(name).path) if name else None)
    else:
        model = TextTransformer(backbone, num_classes, pad_token_id=getattr(config, "pad_token_id", None) or 0)
    if weights is not None:
        load_weights(model, weights, weights_file)
    # from_pretrained returns the model in eval mode; a new model trains (dropout on) like a timm one,
    # and every analysis puts it in eval mode itself.
    return model.train()


create_text_model = create_hf_model  # the name of the text callers (a text model: a wheel or hf:<id or folder>)


def load_weights(model: nn.Module, state: dict, weights_file: str | None = None) -> None:
    """Loads a state dict of the wrapped model (``backbone.*``, ``head.*`` ignored) or of the bare
    backbone, strictly for the backbone's tensors (``weights_file``: where it came from, for errors).

    Raises:
        WeightsError: missing or unexpected tensors, or other shapes, naming a few.
    """
    state = {k: v for k, v in state.items() if not k.startswith("head.")}
    if not any(k.startswith("backbone.") for k in state):
        state = {f"backbone.{k}": v for k, v in state.items()}
    own = model.state_dict()
    differ = [k for k, v in state.items() if k in own and tuple(own[k].shape) != tuple(v.shape)]
    missing = [k for k in own if k.startswith("backbone.") and k not in state]
    unexpected = [k for k in state if k not in own]
    if differ or missing or unexpected:
        parts = [f"{len(v)} {what} ({', '.join(v[:3])})" for what, v in
                 (("tensors of other shapes", differ), ("missing tensors", missing), ("unexpected tensors", unexpected))
                 if v]
        raise WeightsError(f"model.weights_file={weights_file!r} does not fit model.name's architecture: "
                           f"{'; '.join(parts)}. Fix: the file written for this model, or model.weights_file=null.")
    model.load_state_dict(state, strict=False)


def tiny_config(family: str, **overrides):
    """A small random-init config (tests, benchmarks): 2 layers, width 32, 4 heads; ``family`` a ``model_type``:
    text (``bert``; ``llama``, ``qwen2``, ``mistral``: decoders with 2 key-value heads, BOS id 1), MLP 64, a
    120-token vocabulary; or images (``vit``, MLP 64; ``dinov2``, MLP 64 as hidden x mlp_ratio), 16x16 images of
    4x4 patches (17 tokens)."""
    from transformers import AutoConfig

    base = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4)
    dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    text = dict(vocab_size=120, intermediate_size=64, max_position_embeddings=64, pad_token_id=0)
    images = dict(image_size=16, patch_size=4, **dropout)
    layouts = {"bert": {**text, **dropout}, "vit": {**images, "intermediate_size": 64},
               "dinov2": {**images, "mlp_ratio": 2},
               "decoder": {**text, "num_key_value_heads": 2, "tie_word_embeddings": False, "bos_token_id": 1}}
    return AutoConfig.for_model(family, **{**base, **layouts.get(family, layouts["decoder"]), **overrides})


def check_text_model(name: str) -> None:
    """A text model's files exist and its architecture has component groups (config only, no weights).

    Raises:
        WeightsError: a missing wheel or folder, a hub model that cannot be fetched, another family.
    """
    check_hub_family(name, text_config(name))

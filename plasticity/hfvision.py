"""Image classifiers on ``transformers``' ViTModel and Dinov2Model, in the shape of a timm ViT.

``model.name=hf:<folder>`` where ``folder`` holds a ViT or Dinov2 written by ``save_pretrained``
(:func:`plasticity.text.hub.is_vision_model`) is built by :func:`plasticity.text.models.create_hf_model`,
which loads every Hugging Face model; :class:`HFVisionTransformer` wraps the backbone so the rest of the
project sees what it sees in a timm ViT: ``blocks``, ``forward_features`` (the tokens after the final
``layernorm``), ``forward_head``, a ``head`` and ``reset_classifier``. Parameters keep the backbone's names
under ``backbone.``, which :data:`plasticity.components.RULES` classifies. Both are pre-LN ViT blocks:

- ViT (``backbone.layers.<i>``): ``layernorm_before`` (LN1), ``attention.{q,k,v,o}_proj`` (MHA),
  ``layernorm_after`` (LN2), ``mlp.fc1`` (FC1), ``mlp.fc2`` (FC2);
- Dinov2 (``backbone.encoder.layer.<i>``): ``norm1``, ``attention`` and ``layer_scale1`` (MHA, as timm's
  ``ls1``), ``norm2``, ``mlp.fc1``, ``mlp.fc2`` and ``layer_scale2`` (FC2, as timm's ``ls2``).

``embeddings.*`` (patch projection, class token, positions) is ``emb``; ``layernorm`` the final norm. The
head reads the class token of the final norm's output, as ``ViTForImageClassification`` does. Images are
normalised with the folder's image processor mean and std (``preprocessor_config.json``) when it has one,
else with ``dataset.mean``/``dataset.std`` (:func:`plasticity.data.augment.input_transform`).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn as nn

from plasticity.text.hub import family_of_config

__all__ = ["HFClassifier", "HFVisionTransformer", "processor_stats"]


class HFClassifier(nn.Module):
    """A ``transformers`` backbone and a new head, in the shape of a timm ViT: ``blocks`` (the backbone's layers,
    in order), a ``head``, ``reset_classifier`` (the base of :class:`HFVisionTransformer` and
    :class:`plasticity.text.models.TextTransformer`).

    Args:
        backbone: The backbone, attention ``sdpa``.
        num_classes: Outputs of the new head.

    Attributes:
        family: The layout of :data:`plasticity.components.SITES` (``hf_vit``, ``dinov2``, ``bert``, ``llama``).
        head: ``nn.Linear(width, num_classes)``.
    """

    def __init__(self, backbone: nn.Module, num_classes: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.family = family_of_config(backbone.config)
        self.num_features = self.embed_dim = int(backbone.config.hidden_size)
        self.head = nn.Linear(self.num_features, num_classes)

    @property
    def config(self):
        return self.backbone.config

    @property
    def blocks(self) -> nn.ModuleList:
        """The backbone's layers (a property, so their parameters keep the backbone's names): ``layers`` (Llama,
        ViT) or ``encoder.layer`` (BERT, Dinov2)."""
        return self.backbone.layers if hasattr(self.backbone, "layers") else self.backbone.encoder.layer

    def reset_classifier(self, num_classes: int) -> None:
        self.head = nn.Linear(self.num_features, num_classes)

    def attention_kwargs(self, tokens: torch.Tensor) -> dict:
        """Nothing: the attention applied alone attends from every token to every other, as in the model."""
        return {}


class HFVisionTransformer(HFClassifier):
    """A classifier on a ``transformers`` ViTModel (no pooler) or Dinov2Model (see the module docstring).

    Args:
        backbone: The backbone, attention ``sdpa``.
        num_classes: Outputs of the new head.
        stats: ``(mean, std)`` the images are normalised with (the folder's image processor's), or None.

    Attributes:
        family: ``hf_vit`` or ``dinov2`` (:data:`plasticity.components.SITES`).
        processor_stats: ``stats``.
        pretrained_cfg: ``input_size`` ``(C, S, S)``: the side the images are resized to (the config's).
    """

    global_pool = "token"  # timm's name of class-token pooling (the linear probe records it)
    base_model_prefix = "backbone"  # where peft (LoRA) finds the transformers model that its weight renames scope to

    def __init__(self, backbone: nn.Module, num_classes: int, stats: tuple[list, list] | None = None) -> None:
        config = backbone.config
        if getattr(config, "use_swiglu_ffn", False):  # Dinov2-giant: mlp.weights_in/weights_out, no fc1/fc2
            raise ValueError("a Dinov2 with use_swiglu_ffn=True (SwiGLU feed-forward, Dinov2-giant) has no fc1/fc2 "
                             "component groups here. Fix: a Dinov2 small, base or large folder.")
        super().__init__(backbone, num_classes)
        self.processor_stats = stats
        self.pretrained_cfg = {"input_size": (int(config.num_channels), int(config.image_size), int(config.image_size))}

    @property
    def cls_token(self) -> nn.Parameter:
        return self.backbone.embeddings.cls_token

    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        """The final norm's tokens ``(B, 1 + patches, D)``."""
        return self.backbone(pixel_values=images).last_hidden_state

    def forward_head(self, tokens: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """The class token (``pre_logits``), or the head's logits on it."""
        return tokens[:, 0] if pre_logits else self.head(tokens[:, 0])

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(images))

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """The embedding-layer tokens, what enters the first block: patch projection, class token, positions."""
        return self.backbone.embeddings(images)


def processor_stats(folder: str | Path) -> tuple[list, list] | None:
    """``(image_mean, image_std)`` of the image processor saved in ``folder`` (``preprocessor_config.json``),
    or None when it has none."""
    path = Path(folder) / "preprocessor_config.json"
    saved = json.loads(path.read_text()) if path.is_file() else {}
    return (list(saved["image_mean"]), list(saved["image_std"])) if "image_mean" in saved else None

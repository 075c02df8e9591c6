"""One factory for timm ViTs: by name, from the hub or a local weights file, head reset to the task.

Also registers ``vit_micro_patch7_28``, a 6-block ViT for 28x28 images that the offline quickstart
pretrains on Fashion-MNIST as its stand-in for ViT-B/16 pretrained on ImageNet-21k.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import timm
import torch.nn as nn
from timm.models import register_model
from timm.models.vision_transformer import _create_vision_transformer

default_cfgs = {
    "vit_micro_patch7_28": {
        "url": "",
        "num_classes": 10,
        "input_size": (3, 28, 28),
        "mean": (0.5, 0.5, 0.5),
        "std": (0.5, 0.5, 0.5),
        "first_conv": "patch_embed.proj",
        "classifier": "head",
    }
}


@register_model
def vit_micro_patch7_28(pretrained: bool = False, **kwargs) -> nn.Module:
    """ViT-Micro/7 at 28x28: width 64, depth 6, 4 heads, MLP ratio 4 (0.3M parameters, 17 tokens)."""
    args = dict(img_size=28, patch_size=7, embed_dim=64, depth=6, num_heads=4)
    return _create_vision_transformer("vit_micro_patch7_28", pretrained=pretrained, **{**args, **kwargs})


class WeightsError(RuntimeError):
    """Pretrained weights that cannot be found or fetched."""


def check_model_name(name: str) -> None:
    """Raises ValueError naming close matches when timm does not know ``name``."""
    if timm.is_model(name):
        return
    arch = name.split(".")[0]
    close = difflib.get_close_matches(arch, timm.list_models(), n=5, cutoff=0.6)
    raise ValueError(
        f"model.name={name!r} is not a timm model. Close matches: {', '.join(close) or 'none'}. "
        f"Fix: model.name=<a name from timm.list_models('vit_*')>, e.g. "
        f"vit_base_patch16_224.orig_in21k (the paper's ViT-B/16)."
    )


def check_weights_file(weights_file: str | None) -> None:
    """Raises FileNotFoundError when a configured local weights file does not exist."""
    if weights_file and not Path(weights_file).is_file():
        raise FileNotFoundError(
            f"model.weights_file={weights_file!r} does not exist. Fix: point it at a .safetensors, "
            f".pth or .bin state dict (e.g. one written by task=pretrain), or set "
            f"model.weights_file=null."
        )


def create_model(
    name: str,
    num_classes: int,
    pretrained: bool = False,
    weights_file: str | None = None,
    **kwargs,
) -> nn.Module:
    """Creates a timm model and resets its classification head to ``num_classes`` outputs.

    Args:
        name: Any timm model name, with an optional pretrained tag
            (``vit_base_patch16_224.orig_in21k``).
        num_classes: Classes of the target dataset; the head is always newly initialised.
        pretrained: Load pretrained weights (from ``weights_file`` if given, else the hub).
        weights_file: Local state dict, loaded through timm's ``pretrained_cfg_overlay``
            (position and patch embeddings are resized when sizes differ).
        **kwargs: Architecture arguments passed to timm (``img_size``, ``drop_path_rate``...).

    Raises:
        ValueError: unknown model name.
        FileNotFoundError: ``weights_file`` does not exist.
        WeightsError: hub weights that cannot be fetched (offline machine, unknown tag).
    """
    check_model_name(name)
    check_weights_file(weights_file)
    if weights_file:
        pretrained = True
        kwargs["pretrained_cfg_overlay"] = dict(file=str(Path(weights_file).resolve()))
    try:
        model = timm.create_model(name, pretrained=pretrained, num_classes=0, **kwargs)
    except (OSError, RuntimeError) as err:
        if not pretrained or weights_file:
            raise
        raise WeightsError(
            f"could not fetch the pretrained weights of {name!r} from the Hugging Face hub ({err}). "
            f"Fix: download them where there is internet and set model.weights_file=<path>, "
            f"or set model.pretrained=false."
        ) from err
    model.reset_classifier(num_classes)
    return model


def image_size(net: nn.Module) -> int:
    """Side of the square input the model expects (its patch embedding's, else its pretrained cfg's)."""
    patch_embed = getattr(net, "patch_embed", None)
    if patch_embed is not None and getattr(patch_embed, "img_size", None):
        return int(patch_embed.img_size[0])
    return int(net.pretrained_cfg.get("input_size", (3, 224, 224))[-1])


def input_size(name: str, kwargs: dict | None = None) -> int:
    """Side of the model's square input without building it: ``kwargs["img_size"]``, else timm's config.

    Args:
        name: A timm model name (with or without its pretrained tag).
        kwargs: The architecture arguments of ``model.kwargs``.
    """
    img_size = (kwargs or {}).get("img_size")
    if img_size is not None:
        return int(img_size if isinstance(img_size, int) else img_size[0])
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(name)
    return int(cfg.input_size[-1]) if cfg is not None and cfg.input_size else 224

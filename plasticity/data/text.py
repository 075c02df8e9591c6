"""Text sets: raw texts, their corruptions, the model's token ids (cached once) and equal-length windows.

Like :mod:`~plasticity.data.corruptions`, this module imports no other module of the data package
(the text readers of :mod:`~plasticity.data.sources` build on it):

* :class:`TextSet`: raw texts and labels, what a text source reads; the split protocol and the split
  hash (:mod:`~plasticity.data.splits`) work on it;
* :func:`corrupt_texts`: :data:`TEXT_CORRUPTIONS` (typos, word drops, local word shuffles) at severity
  ``1..5``, applied to the raw texts before tokenisation, deterministic per (corpus, corruption,
  severity, example) on every machine and Python hash seed;
* :class:`TokenSet`: the token ids of the model's own tokenizer, int32 ``(N, max_length)``, right-padded
  with :data:`PAD` (``-1``: no real token id is negative; the model turns it into its attention mask);
* :func:`tokenized`: the token ids of every split, memory-mapped from a cache under the prepared root,
  made once (the tokenizer is only loaded then);
* :func:`windows`: equal-length token windows without padding, for the plasticity pairs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from plasticity.data.corruptions import check_severity
from plasticity.errors import did_you_mean
from plasticity.runs.io import atomic_path, read_json, write_json_atomic
from plasticity.text.hub import load_tokenizer, tokenizer_fingerprint

__all__ = ["PAD", "TEXT_CORRUPTIONS", "Rows", "TextSet", "TokenSet", "check_corruption", "check_max_length",
           "check_window", "corrupt_text", "corrupt_texts", "save_array", "text_seed", "token_cache_path", "tokenize",
           "tokenized", "window_rows", "windows"]

log = logging.getLogger(__name__)

PAD = -1
"""The padding id of a :class:`TokenSet` (never a real token id)."""

SPLITS = ("train", "val", "test")
VERSION = 1
"""The cache layout's version (recorded in its ``info.json``: a cache of another version is made again)."""


class Rows:
    """A dataclass of examples: each of its tuples and arrays (``labels`` among them) holds one row per
    example; a folder (a :class:`~pathlib.Path`) or None is shared by every row. The image sets of
    :mod:`~plasticity.data.sources` are ``Rows`` too."""

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, idx: np.ndarray):
        """The rows ``idx``, copied into memory."""
        return self._rows(lambda v: tuple(v[i] for i in idx) if isinstance(v, tuple) else np.ascontiguousarray(v[idx]))

    def head(self, n: int):
        """The first ``n`` rows (views: a memory map stays one)."""
        return self._rows(lambda v: v[:n])

    def _rows(self, take):
        return dataclasses.replace(self, **{f.name: take(v) for f in dataclasses.fields(self)
                                            if not isinstance(v := getattr(self, f.name), (Path, type(None)))})


@dataclass(frozen=True)
class TextSet(Rows):
    """Raw texts and their labels, in the corpus's canonical order.

    Attributes:
        texts: One string per example.
        labels: ``int64`` array ``(N,)``.
    """

    texts: tuple[str, ...]
    labels: np.ndarray = field(repr=False)


@dataclass(frozen=True)
class TokenSet(Rows):
    """Token ids of the model's own tokenizer and their labels.

    Attributes:
        ids: ``int32`` array ``(N, max_length)`` (in memory or memory-mapped): each example's first
            ``max_length`` tokens, the tokenizer's special tokens included ([CLS] ... [SEP] for BERT,
            whose truncated texts end with [SEP] too), right-padded with :data:`PAD`.
        labels: ``int64`` array ``(N,)``.
    """

    ids: np.ndarray
    labels: np.ndarray

    @property
    def max_length(self) -> int:
        return int(self.ids.shape[1])

    def lengths(self) -> np.ndarray:
        """Each example's number of real (non-:data:`PAD`) tokens, ``int64 (N,)``."""
        return (np.asarray(self.ids) != PAD).sum(axis=1).astype(np.int64)


# ----------------------------------------------------------------------------- corruptions

TEXT_CORRUPTIONS: tuple[str, ...] = ("typos", "word_drop", "word_shuffle")

_TYPO_RATE = (0.1, 0.2, 0.3, 0.45, 0.6)
"""Share of the words given one character edit (swap, deletion, insertion or substitution)."""
_DROP_RATE = (0.1, 0.2, 0.3, 0.4, 0.5)
"""Share of the words dropped."""
_SHUFFLE_SPAN = (2.0, 3.0, 4.0, 6.0, 8.0)
"""Word ``i`` is sorted by ``i + U(0, span)``: it moves fewer than ``span`` places (Lample et al., 2018)."""
_WORD = re.compile(r"(\S+)")  # captured: re.split keeps the words, between the whitespace around them
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def check_corruption(name: str) -> None:
    """Raise ValueError naming the choices (and the closest) unless ``name`` is a text corruption."""
    if name not in TEXT_CORRUPTIONS:
        close = did_you_mean(name, TEXT_CORRUPTIONS)
        hint = f" Did you mean {close[0]}?" if close else ""
        raise ValueError(f"unknown text corruption {name!r}.{hint} Choices: {', '.join(TEXT_CORRUPTIONS)}.")


def text_seed(corpus: str, corruption: str, severity: int, index: int) -> int:
    """The seed of one example's corruption: SHA-256 of the four values (never ``hash()``, which
    changes with ``PYTHONHASHSEED``), so every machine draws the same edits."""
    return int.from_bytes(hashlib.sha256(f"{corpus}|{corruption}|{severity}|{index}".encode()).digest()[:8], "little")


def _pick(u: float, n: int) -> int:
    """An index in ``0..n-1`` from a uniform draw ``u`` in ``[0, 1)``."""
    return min(int(u * n), n - 1)


def _typo(word: str, u: float) -> str:
    """One character edit of ``word``: an adjacent swap, a deletion, an insertion or a substitution.

    One uniform draw ``u`` picks the position, the edit and the letter (one of
    ``len(word) x 4 x 26`` equally likely choices).
    """
    i, rest = divmod(_pick(u, len(word) * 4 * len(_LETTERS)), 4 * len(_LETTERS))
    op, letter = rest // len(_LETTERS), _LETTERS[rest % len(_LETTERS)]
    if op == 0 and len(word) > 1:
        j = i if i + 1 < len(word) else i - 1  # swap with the next character (the last: with the one before)
        return word[:j] + word[j + 1] + word[j] + word[j + 2:]
    if op == 1 and len(word) > 1:  # deleting a one-character word would drop the word: substitute instead
        return word[:i] + word[i + 1:]
    if op == 2:
        return word[:i] + letter + word[i:]
    if letter == word[i].lower():  # a substitution always changes the character
        letter = _LETTERS[(_LETTERS.index(letter) + 1) % len(_LETTERS)]
    return word[:i] + letter + word[i + 1:]


def corrupt_text(text: str, name: str, severity: int, seed: int) -> str:
    """One text corrupted at one severity.

    Words are the maximal runs of non-whitespace characters; the whitespace between them is kept.

    * ``typos``: each word gets one character edit with probability 0.1, 0.2, 0.3, 0.45, 0.6;
    * ``word_drop``: each word is dropped with probability 0.1 .. 0.5 (one word always stays);
    * ``word_shuffle``: local shuffles: word ``i`` goes where ``i + U(0, s)`` sorts, ``s`` in
      2, 3, 4, 6, 8, so it moves fewer than ``s`` places.

    Args:
        text: The raw text.
        name: One of :data:`TEXT_CORRUPTIONS`.
        severity: Integer in ``1..5``; higher changes more words.
        seed: Seed of the draws (:func:`text_seed`); equal inputs and seed give equal outputs.

    Raises:
        ValueError: Unknown corruption or bad severity.
    """
    check_corruption(name)
    check_severity(severity)
    pieces = _WORD.split(text)  # [leading whitespace, word 0, whitespace after it, word 1, ...]
    words, gaps = pieces[1::2], pieces[2::2]
    if not words:
        return text
    # Only random() is drawn: Python guarantees its sequence for a seed across versions and machines.
    draw = random.Random(seed).random
    level = int(severity) - 1
    if name == "typos":
        new = [_typo(w, draw()) if draw() < _TYPO_RATE[level] else w for w in words]
    elif name == "word_drop":
        keep = [draw() >= _DROP_RATE[level] for _ in words]
        if not any(keep):
            keep[_pick(draw(), len(words))] = True
        new = [w if k else None for w, k in zip(words, keep)]
    else:
        keys = [i + draw() * _SHUFFLE_SPAN[level] for i in range(len(words))]
        new = [words[i] for i in sorted(range(len(words)), key=keys.__getitem__)]
    # A dropped word (None) takes the whitespace after it along; every other whitespace stays where it was.
    return pieces[0] + "".join(word + gap for word, gap in zip(new, gaps) if word is not None)


def corrupt_texts(texts: Sequence[str], corpus: str, name: str, severity: int) -> tuple[str, ...]:
    """Every text of a corpus corrupted, example ``i`` with the seed :func:`text_seed` of
    ``(corpus, name, severity, i)``.

    Args:
        texts: The corpus in its canonical order.
        corpus: The clean corpus's dataset name (e.g. ``text/rotten_tomatoes``).
        name: One of :data:`TEXT_CORRUPTIONS`.
        severity: Integer in ``1..5``.

    Raises:
        ValueError: Unknown corruption or bad severity (:func:`corrupt_text` checks them).
    """
    return tuple(corrupt_text(t, name, severity, text_seed(corpus, name, severity, i)) for i, t in enumerate(texts))


# ----------------------------------------------------------------------------- tokenisation


def check_max_length(value: object) -> None:
    """Raise ValueError unless ``dataset.max_length`` is an integer >= 2 (room for BERT's [CLS] and [SEP])."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 2:
        raise ValueError(
            f"dataset.max_length={value!r} must be an integer >= 2: the tokens kept per example, the tokenizer's "
            f"special tokens included (BERT's [CLS] and [SEP]). Fix: e.g. dataset.max_length=64 (the text sets' "
            f"default) or 128.")


def tokenize(texts: Sequence[str], tokenizer, max_length: int) -> np.ndarray:
    """Token ids of ``texts``: int32 ``(N, max_length)``, right-padded with :data:`PAD`.

    Args:
        texts: The raw texts.
        tokenizer: A ``transformers`` tokenizer (the model's own).
        max_length: Tokens kept per example, special tokens included (longer texts are truncated).
    """
    check_max_length(max_length)
    encoded = tokenizer(list(texts), truncation=True, max_length=int(max_length), add_special_tokens=True)
    ids = np.full((len(texts), int(max_length)), PAD, dtype=np.int32)
    for row, tokens in zip(ids, encoded["input_ids"]):
        row[:len(tokens)] = tokens
    return ids


def token_cache_path(root: str | Path, name: str, severity: int | None, split_hash: str, tokenizer: str,
                     max_length: int) -> Path:
    """``<root>/<name>[/severity_<s>]/<fingerprint>_len<max_length>_<split_hash>`` (every text set's
    name starts with ``text/``): one folder per tokenised version of a dataset's splits.

    Args:
        root: The prepared arrays' root (``DataSpec.prepared_root``).
        name: The dataset name.
        severity: The severity of a corrupted set (None: a clean one).
        split_hash: The splits' hash (the raw texts, labels and split indices).
        tokenizer: A text ``model.name``; its files' :func:`~plasticity.text.hub.tokenizer_fingerprint`
            is the key (two model names with one tokenizer share the cache).
        max_length: Tokens kept per example.
    """
    folder = Path(root) / name / ("" if severity is None else f"severity_{int(severity)}")  # Path / "": itself
    return folder / f"{tokenizer_fingerprint(tokenizer)}_len{int(max_length)}_{split_hash}"


def save_array(path: Path, array: np.ndarray) -> None:
    """Write ``array`` to the ``.npy`` file ``path`` atomically (concurrent writers of equal arrays are safe)."""
    with atomic_path(path) as tmp:
        np.save(tmp, array, allow_pickle=False)


def _open_cached(folder: Path, sizes: dict[str, int]) -> dict[str, np.ndarray] | None:
    """The cached ids of every split, memory-mapped; None when absent, incomplete or unreadable."""
    info = read_json(folder / "info.json")  # written after the arrays: its presence means they are complete
    if not info or info.get("sizes") != sizes or info.get("version") != VERSION:
        return None
    out = {}
    for split in SPLITS:
        try:  # a zero-row array cannot be memory-mapped
            ids = np.load(folder / f"{split}.npy", mmap_mode="r" if sizes[split] else None, allow_pickle=False)
            if ids.shape != (sizes[split], info["max_length"]) or ids.dtype != np.int32:
                raise ValueError(f"{split}.npy has {ids.dtype} {ids.shape}, not int32 ({sizes[split]}, "
                                 f"{info['max_length']})")
        except (OSError, ValueError, EOFError) as err:
            log.warning("token cache %s is unreadable (%s): tokenising again", folder, err)
            return None
        out[split] = ids
    return out


def tokenized(splits, folder: str | Path, tokenizer: str, max_length: int) -> dict[str, TokenSet]:
    """The :class:`TokenSet` of every split, from the cache ``folder`` (:func:`token_cache_path`) or
    tokenised once and written there; the tokenizer is loaded only then.

    A cache that cannot be written (a read-only prepared root) is logged and the ids kept in memory.

    Args:
        splits: The :class:`TextSet` splits (``train``, ``val`` and ``test`` attributes: a
            :class:`~plasticity.data.splits.Splits`).
        folder: The cache folder.
        tokenizer: A text ``model.name`` (:func:`~plasticity.text.hub.load_tokenizer`).
        max_length: Tokens kept per example.
    """
    folder = Path(folder)
    parts = {split: getattr(splits, split) for split in SPLITS}
    sizes = {split: len(parts[split]) for split in SPLITS}
    ids = _open_cached(folder, sizes)
    if ids is None:
        ids = {split: tokenize(parts[split].texts, load_tokenizer(tokenizer), max_length) for split in SPLITS}
        info = {"version": VERSION, "tokenizer": tokenizer, "max_length": int(max_length), "sizes": sizes}
        try:  # each split's ids, then info.json, each atomically (concurrent writers write equal files)
            for split, array in ids.items():
                save_array(folder / f"{split}.npy", array)
            write_json_atomic(folder / "info.json", info)
        except OSError as err:
            log.warning("could not cache the token ids in %s (%s): they stay in memory", folder, err)
    return {split: TokenSet(ids[split], parts[split].labels) for split in SPLITS}


# ----------------------------------------------------------------------------- windows


def window_rows(tokens: TokenSet, length: int, key: str = "dataset.window") -> np.ndarray:
    """The examples (row indices, ``int64``) with at least ``length`` real tokens, special tokens included.

    Args:
        tokens: A :class:`TokenSet`.
        length: Tokens per window, 1 .. the set's ``max_length``.
        key: The config key of ``length``, for the error messages.
    """
    check_window(length, tokens.max_length, key)
    return np.flatnonzero(tokens.lengths() >= length).astype(np.int64)


def windows(tokens: TokenSet, length: int, key: str = "dataset.window", rows: np.ndarray | None = None) -> np.ndarray:
    """Equal-length token windows without padding, for the plasticity pairs: ``int64 (M, length)``.

    The window of an example is its first ``length`` tokens (from its first token: [CLS] for BERT;
    SmolLM2's GGUF tokenizer adds no special token), taken from every example with at least
    ``length`` real tokens (:func:`window_rows` says which; ``len(result)`` how many). The first
    tokens, rather than a random crop, keep the positions the model saw in training and need no
    seed; shorter examples are left out rather than padded, so every pair compares two sequences
    the model reads whole.

    Args:
        tokens: A :class:`TokenSet`.
        length: Tokens per window, 1 .. the set's ``max_length``.
        key: The config key of ``length``, for the error messages.
        rows: Only these examples (None: all; :func:`plasticity.measure.disjoint`).

    Raises:
        ValueError: A bad length, or no example long enough (naming ``key`` and ``dataset.max_length``).
    """
    long_enough = window_rows(tokens, length, key)
    rows = long_enough if rows is None else np.intersect1d(long_enough, rows)
    if not len(rows):
        longest = int(tokens.lengths().max()) if len(tokens) else 0
        raise ValueError(
            f"{key}={length}: none of the {len(tokens)} examples has {length} real tokens (the longest has "
            f"{longest}; dataset.max_length={tokens.max_length} caps them, the texts are shorter). Fix: "
            f"{key}<={longest}, or a dataset with longer texts.")
    return np.asarray(tokens.ids[rows, :length], dtype=np.int64)


def check_window(length: object, max_length: int, key: str = "dataset.window") -> None:
    """Raise ValueError unless a pair window's ``length`` is an integer in ``1..max_length``.

    Args:
        length: Tokens per window.
        max_length: ``dataset.max_length``: no example keeps more tokens.
        key: The config key of ``length``, for the message.
    """
    if not isinstance(length, (int, np.integer)) or isinstance(length, bool) or length < 1:
        raise ValueError(f"{key}={length!r} must be a positive number of tokens. Fix: e.g. {key}=32.")
    if length > max_length:
        raise ValueError(f"{key}={length} exceeds dataset.max_length={max_length}: no example keeps "
                         f"that many tokens. Fix: {key}<={max_length}, or dataset.max_length>={length}.")

"""Plasticity (paper Definition 1): the average rate of change of each component, per block.

    P(f) = E_(x, y) [ ||f(x) - f(y)||_F / ||x - y||_F ]

over pairs of a reference image x (the pretraining distribution, ImageNet in the paper) and a
downstream image y. Two input modes:

- ``embedding`` (the paper's numbers, App. C.4): every module of every block is applied to the
  *embedding-layer tokens* (patch embedding + cls + position embedding) of x and y. LN1, MHA
  (qkv, softmax, proj; no LayerNorm before it), LN2 and FC1 (before the GELU) take those tokens
  directly; FC2 takes them zero-padded to its input width. No residuals. Norms run over the whole
  token matrix, CLS included; the denominator is the distance between the two token matrices.
- ``layer``: each module's own input and output in the model's real forward pass (hooks): LN1
  sees the residual stream, MHA sees LN1's output, FC2 the GELU output, and so on; the
  denominator is that module's own input distance.

Language transformers (:mod:`plasticity.text`) are measured the same way on pairs of token windows
of one length (no padding inside a pair): the embedding-layer tokens are what enters the first
layer (BERT: word + position + type embeddings and the embedding LayerNorm; Llama: the token
embeddings, its attention applied with the rotary positions 0..L-1 and the causal mask). A decoder's
windows start with its BOS token (:func:`with_bos`), so the attention sink is the same in x and y. Each group
is its :data:`~plasticity.components.SITES` function: BERT's MHA runs from the self-attention's
input to the output projection (its residual add and LayerNorm are LN2's: that norm feeds the
feed-forward); BERT's LN1 of layer i is the norm closing layer i-1 (layer 0: the embeddings' norm);
Llama's FC1 is the gate and up projections side by side.

Everything runs on the model's device: x and y go through one forward as a batch of 2B, the
per-pair norms are computed at once and folded into running statistics (Chan's parallel
mean/variance in float64 plus a log-spaced histogram), so memory does not grow with the number
of pairs and no activation outlives the module being measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from scipy import stats as scipy_stats

from plasticity.components import GROUPS, SITES, family_of, site_module

if TYPE_CHECKING:
    from plasticity.data import Splits

MODES = ("embedding", "layer")
PAIRINGS = ("sequential", "random")

HIST_RANGE = (-4.0, 4.0)  # log10 of the rate
HIST_BINS = 800  # 0.01 decades a bin: quantiles within 2.3 %


class _Caught(Exception):
    """Carries a module's output (``args[0]``) out of the forward pass it stops: nothing after it runs."""


def _stop_with_output(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
    raise _Caught(output)


def output_in_forward(model: nn.Module, module: nn.Module, inputs: torch.Tensor, name: str) -> torch.Tensor:
    """What ``module`` (``name`` in the error) outputs in ``model.forward_features(inputs)``, stopped there
    (a ``transformers`` layer's ``(tokens, ...)``: the tokens)."""
    handle = module.register_forward_hook(_stop_with_output)
    try:
        model.forward_features(inputs)
    except _Caught as found:
        return first(found.args[0])
    finally:
        handle.remove()
    raise RuntimeError(f"{type(model).__name__}.forward_features never ran {name}")


def embed_tokens(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """Embedding-layer tokens ``(B, n, d)``, what enters the first block: patch embedding, then
    cls (and register) tokens and position embedding, then ``norm_pre`` (identity in a standard
    ViT), taken from the model's own forward at ``norm_pre``'s output.

    timm's ViT and EVA build them in ``forward_features`` in that order, patch dropout between
    (the identity in eval mode, where every measurement runs, and in every model built here).
    A text model's are its :meth:`~plasticity.text.models.TextTransformer.embed` of token windows.
    """
    if family_of(model) != "vit":
        return model.embed(images)
    return output_in_forward(model, model.norm_pre, images, "norm_pre")


def first(output):
    """A module's output tensor (attention modules return ``(output, weights)``)."""
    return output[0] if isinstance(output, tuple) else output


def apply_module(model: nn.Module, block: int, group: str, tokens: torch.Tensor,
                 attention: dict | None = None) -> torch.Tensor:
    """Applies the group's function (its :class:`~plasticity.components.Site` in a ``family`` block)
    to embedding tokens (FC2: zero-padded to its width).

    For a plain ``nn.Linear`` FC2, the zero-padded product equals the product with the weight's
    first d input columns, computed without materialising the padded (4x wider) tokens.

    Args:
        attention: Keyword arguments of the attention module applied alone (Llama's rotary
            positions, :meth:`~plasticity.text.models.TextTransformer.attention_kwargs`).
    """
    site = SITES[family_of(model)][group]
    module = site_module(model, block, site.input)
    if group == "fc2" and type(module) is nn.Linear:  # FC2: the first d input columns of its weight
        return F.linear(tokens, module.weight[:, :tokens.shape[-1]], module.bias)
    if group == "fc2":
        return module(F.pad(tokens, (0, module.in_features - tokens.shape[-1])))
    if group == "mha":
        out = first(module(tokens, **(attention or {})))
        # chained (BERT's): from the self-attention's input to the output projection's output
        return site_module(model, block, site.outputs[0])(out) if site.outputs[0] != site.input else out
    return torch.cat([site_module(model, block, name)(tokens) for name in site.outputs], dim=-1)


def pair_distances(batch: torch.Tensor) -> torch.Tensor:
    """``||a_i - b_i||_F`` for a batch of 2B (first half a, second half b), accumulated in float32.

    The difference is taken in the batch's dtype (bf16 under autocast: no float32 copy of the
    activation is made), the norm is reduced in float32.
    """
    half = batch.shape[0] // 2
    return torch.linalg.vector_norm((batch[:half] - batch[half:]).flatten(1), dim=1, dtype=torch.float32)


def pair_rates(outputs: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """Per-pair rates of a module's ``outputs`` on its ``inputs``, a batch of 2B (first half x, second half y).

    Pairs with identical inputs (zero denominator) are not distinct pairs: they give NaN and are
    dropped by :class:`RunningStats`.
    """
    return _rates(pair_distances(outputs), pair_distances(inputs))


def _rates(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """``num / den``, NaN where ``den`` is 0."""
    return torch.where(den > 0, num / den, torch.full_like(num, float("nan")))


@dataclass
class RunningStats:
    """Streaming count, mean, variance and log-histogram of K series of rates, on one device.

    Memory is O(K x bins) whatever the number of pairs. ``update`` takes a ``(K, B)`` tensor.
    """

    keys: list[tuple[str, int]]
    device: torch.device | str = "cpu"

    def __post_init__(self) -> None:  # float64 count, mean and M2 (Chan's summaries), and histogram, per key
        k = len(self.keys)
        self.count, self.mean, self.m2 = (torch.zeros(k, dtype=torch.float64, device=self.device) for _ in range(3))
        self.hist = torch.zeros(k, HIST_BINS, dtype=torch.float64, device=self.device)

    def update(self, rates: torch.Tensor) -> None:
        """Folds a ``(K, B)`` batch of rates in (NaN entries are skipped)."""
        rates = rates.to(torch.float64)
        valid = ~torch.isnan(rates)
        n_b = valid.sum(dim=1).to(torch.float64)
        safe = torch.where(valid, rates, torch.zeros_like(rates))
        mean_b = safe.sum(dim=1) / n_b.clamp_min(1)
        m2_b = (torch.where(valid, rates - mean_b[:, None], torch.zeros_like(rates)) ** 2).sum(dim=1)
        total = self.count + n_b
        delta = mean_b - self.mean
        # Chan et al.'s merge of two (count, mean, M2) summaries: stable whatever the batch sizes
        self.mean = self.mean + delta * n_b / total.clamp_min(1)
        self.m2 = self.m2 + m2_b + delta**2 * self.count * n_b / total.clamp_min(1)
        self.count = total
        low, high = HIST_RANGE  # the log-histogram: each valid rate's bin in its key's row
        logs = torch.log10(safe.clamp_min(1e-30)).clamp(low, high - 1e-9)
        idx = ((logs - low) / (high - low) * HIST_BINS).long()
        offset = torch.arange(len(self.keys), device=idx.device)[:, None] * HIST_BINS
        self.hist.view(-1).scatter_add_(0, (idx + offset)[valid], torch.ones_like(logs)[valid])

    def summary(self, distinct: int | None = None) -> list[dict]:
        """One row per key: mean, sample std, 95% CI of the mean (Student t), quantiles, count.

        Args:
            distinct: The distinct (reference, downstream) pairs among those measured
                (:func:`distinct_pairs`). Given, ``ci95`` is the Student-t interval of the mean over
                the distinct pairs: a repeated pair carries no new information, so the interval uses
                ``n = min(distinct, count)`` (t(0.975, n-1) * std / sqrt(n)), not the count of
                measured pairs, and each row gets ``distinct_pairs`` (that n). None: every measured
                pair counts as distinct, no ``distinct_pairs`` field (as before).
        """
        count, mean = self.count.cpu().numpy(), self.mean.cpu().numpy()
        var = (self.m2.cpu().numpy() / np.maximum(count - 1, 1)).clip(min=0)
        hist = self.hist.cpu().numpy()
        rows = []
        for i, (group, block) in enumerate(self.keys):
            n, std = int(count[i]), float(np.sqrt(var[i])) if count[i] > 1 else float("nan")
            n_ci = n if distinct is None else min(int(distinct), n)
            # the Student-t 95% interval's half-width, t(0.975, n-1) * std / sqrt(n): NaN below 2 values
            half = float(scipy_stats.t.ppf(0.975, n_ci - 1) * std / math.sqrt(n_ci)) if n_ci >= 2 else float("nan")
            q05, q50, q95 = histogram_quantiles(hist[i], (0.05, 0.5, 0.95))
            rows.append(dict(group=group, block=block, mean=float(mean[i]) if n else float("nan"), std=std,
                             ci95_low=float(mean[i]) - half, ci95_high=float(mean[i]) + half, q05=q05, q50=q50,
                             q95=q95, n_pairs=n, **({} if distinct is None else {"distinct_pairs": n_ci})))
        return rows


def histogram_quantiles(counts: np.ndarray, qs: tuple[float, ...]) -> list[float]:
    """Quantiles of the rates from their log-spaced histogram (log-linear within a bin)."""
    total = counts.sum()
    if total == 0:
        return [float("nan")] * len(qs)
    edges = np.linspace(*HIST_RANGE, HIST_BINS + 1)
    cdf = np.concatenate([[0.0], np.cumsum(counts) / total])
    return [float(10 ** np.interp(q, cdf, edges)) for q in qs]


def pair_indices(n_ref: int, n_down: int, n_pairs: int, pairing: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the reference and downstream image of each pair.

    ``sequential`` pairs the k-th reference image with the k-th downstream image (each set cycled
    when it is smaller, as the official code); ``random`` draws both i.i.d. with ``seed``.
    """
    _check_pairing(pairing)
    k = np.arange(n_pairs)
    if pairing == "sequential":
        return k % n_ref, k % n_down
    rng = np.random.default_rng(seed)
    return rng.integers(0, n_ref, n_pairs), rng.integers(0, n_down, n_pairs)


def _check_pairing(pairing: str) -> None:
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing={pairing!r}; choices: {', '.join(PAIRINGS)}")


def pair_inputs(arrays, window: int | None = None, rows: np.ndarray | None = None) -> np.ndarray:
    """What pairs are drawn from: an image set's uint8 images ``(N, H, W, C)``, or a token set's
    windows ``(M, window)`` (:func:`plasticity.data.text.windows`: equal lengths, no padding inside a
    pair); ``rows``: of these examples only (None: all; :func:`disjoint`).

    Raises:
        ValueError: a token set without ``window`` (``dataset.window``), or none of its texts that long.
    """
    if getattr(arrays, "images", None) is not None:
        return arrays.images if rows is None else arrays.images[rows]
    from plasticity.data.text import windows

    if window is None:
        raise ValueError("text pairs need a window length. Fix: dataset.window=<tokens per pair window>, e.g. 32.")
    return windows(arrays, int(window), key="dataset.window", rows=rows)


def disjoint(ref: "Splits", down: "Splits", down_split: str = "test") -> tuple[np.ndarray | None, np.ndarray | None,
                                                                              str]:
    """The rows of the reference's test split and the downstream ``down_split`` to pair, and how pairs are formed.

    Two sets holding the same examples (a set and itself; a corrupted set and its clean source, e.g.
    ``text/bbc_news_c/word_drop`` and ``text/bbc_news``) would pair an example with its own copy: the
    k-th article with its word-dropped self. An example's identity is the list it comes from and its
    index there (:attr:`~plasticity.data.Splits.examples`); when the two sets share any, each example
    goes to one side only: the reference keeps the even indices, the downstream set the odd ones.

    Returns:
        ``(reference rows, downstream rows, how)``; the rows None when the sets share no example.
    """
    (ref_list, ref_ids), (down_list, down_ids) = ref.examples["test"], down.examples[down_split]
    if ref_list != down_list or not np.intersect1d(ref_ids, down_ids).size:
        return None, None, "independent examples"
    return (np.flatnonzero(ref_ids % 2 == 0), np.flatnonzero(down_ids % 2 == 1),
            f"disjoint examples of {ref_list}: the reference's even indices, the downstream set's odd ones")


def as_inputs(rows: np.ndarray) -> torch.Tensor:
    """Rows of :func:`pair_inputs` as a model input: uint8 images ``(B, H, W, C)`` -> ``(B, C, H, W)``,
    token windows ``(B, L)`` as int64."""
    tensor = torch.from_numpy(np.ascontiguousarray(rows))
    return tensor.permute(0, 3, 1, 2) if tensor.ndim == 4 else tensor.long()


def pair_batches(ref: np.ndarray, down: np.ndarray, indices: tuple[np.ndarray, np.ndarray], batch_size: int,
                 transform: Callable[[torch.Tensor], torch.Tensor] | None,
                 device: torch.device | str = "cpu") -> Iterator[torch.Tensor]:
    """Batches of 2B model inputs on ``device``: B reference inputs, then their B downstream
    partners, as :func:`measure` takes them.

    Args:
        ref: Reference :func:`pair_inputs` (uint8 images ``(N, H, W, C)`` or token windows ``(N, L)``).
        down: Downstream :func:`pair_inputs` (images ``(M, H', W', C')``; windows ``(M, L)``).
        indices: :func:`pair_indices` of the pairs.
        batch_size: Pairs per batch.
        transform: Applied to each image half on the device (the two sets may differ in size and
            channels); None for token windows (the model reads ids).
        device: Where the inputs go.
    """
    ri, di = indices
    apply = transform or (lambda x: x)
    for start in range(0, len(ri), batch_size):
        halves = (as_inputs(rows[i[start:start + batch_size]]) for rows, i in ((ref, ri), (down, di)))
        yield torch.cat([apply(h.to(device, non_blocking=True)) for h in halves])


def distinct_pairs(n_ref: int, n_down: int, n_pairs: int, pairing: str, seed: int = 0) -> int:
    """How many distinct (reference index, downstream index) pairs :func:`pair_indices` draws.

    ``sequential``: pair k is (k mod n_ref, k mod n_down), and pairs k and k' coincide exactly when
    k = k' mod n_ref and mod n_down, i.e. mod lcm(n_ref, n_down) (Chinese remainder theorem): the
    sequence repeats with period lcm, so ``min(n_pairs, lcm(n_ref, n_down))``. ``random``: the
    unique pairs among those actually drawn with ``seed`` (i.i.d. draws repeat by chance).
    """
    _check_pairing(pairing)
    if min(n_ref, n_down, n_pairs) <= 0:
        return 0
    if pairing == "sequential":
        return min(n_pairs, math.lcm(n_ref, n_down))
    ref, down = pair_indices(n_ref, n_down, n_pairs, pairing, seed)
    return int(np.unique(ref.astype(np.int64) * n_down + down).size)


def stat_keys(model: nn.Module, groups: tuple[str, ...] = GROUPS) -> list[tuple[str, int]]:
    """(group, block) for every group and block, the row order of every output."""
    return [(g, b) for g in groups for b in range(len(model.blocks))]


@torch.no_grad()
def embedding_rates(model: nn.Module, images: torch.Tensor, groups: tuple[str, ...] = GROUPS) -> torch.Tensor:
    """``(K, B)`` rates of every (group, block) on embedding tokens of a 2B batch (x first, y second)."""
    tokens = embed_tokens(model, images)
    den = pair_distances(tokens)  # every module's denominator: the token matrices' distance (App. C.4)
    attention = model.attention_kwargs(tokens) if family_of(model) != "vit" else None
    return torch.stack([_rates(pair_distances(apply_module(model, i, g, tokens, attention)), den)
                        for g in groups for i in range(len(model.blocks))])


class LayerHooks:
    """Forward hooks that turn each measured function's real input and output into pair rates.

    A site's input module gets a pre-hook (its input: the first positional argument, or
    ``hidden_states`` given by keyword as ``transformers`` layers do), each output module a hook; the
    rate is the distance of the outputs side by side (``sqrt(sum of squared distances)``) over the
    input distance.
    """

    def __init__(self, model: nn.Module, groups: tuple[str, ...] = GROUPS) -> None:
        # per (group, block): its input distance, the distances of its outputs in the forward pass
        self.keys, self.inputs, self.outputs, self.handles = stat_keys(model, groups), {}, {}, []
        for key in self.keys:
            site = SITES[family_of(model)][key[0]]

            def record_input(module: nn.Module, args: tuple, kwargs: dict, key=key) -> None:
                self.inputs[key] = pair_distances(args[0] if args else kwargs["hidden_states"])

            def record_output(module: nn.Module, args: tuple, output, key=key) -> None:
                self.outputs.setdefault(key, []).append(pair_distances(first(output)))

            self.handles.append(site_module(model, key[1], site.input).register_forward_pre_hook(record_input,
                                                                                               with_kwargs=True))
            self.handles += [site_module(model, key[1], name).register_forward_hook(record_output)
                             for name in site.outputs]

    def rates(self, model: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
        """``(K, B)`` rates of ``model``'s forward pass on ``inputs``, each over the function's own input distance."""
        model.forward_features(inputs)
        nums = [parts[0] if len(parts) == 1 else torch.stack(parts).square().sum(dim=0).sqrt()
                for parts in (self.outputs.pop(k) for k in self.keys)]
        return torch.stack([_rates(num, self.inputs.pop(k)) for num, k in zip(nums, self.keys)])

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


@torch.no_grad()
def measure(model: nn.Module, batches: Iterator[torch.Tensor], mode: str = "embedding",
            groups: tuple[str, ...] = GROUPS, on_rates: Callable[[torch.Tensor], None] | None = None) -> RunningStats:
    """Streams batches of 2B images (x then y, already transformed, on the model's device).

    Args:
        model: A timm ViT (measured in eval mode, then put back in the mode it was in).
        batches: Iterator of ``(2B, 3, S, S)`` tensors.
        mode: ``embedding`` or ``layer``.
        groups: Which groups to measure.
        on_rates: Called with each ``(K, B)`` rate batch (to save per-pair rates).

    Returns:
        The running statistics, keys in :func:`stat_keys` order.
    """
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}; choices: {', '.join(MODES)}")
    stats = RunningStats(stat_keys(model, groups), device=next(model.parameters()).device)
    hooks, was_training = LayerHooks(model, groups) if mode == "layer" else None, model.training
    model.eval()
    try:
        for images in batches:
            images = with_bos(model, images)
            rates = hooks.rates(model, images) if hooks else embedding_rates(model, images, groups)
            stats.update(rates)
            if on_rates is not None:
                on_rates(rates)
    finally:
        model.train(was_training)
        if hooks:
            hooks.remove()
    return stats


def with_bos(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Token windows of a decoder with its BOS token in front (images and encoder windows as they are).

    A decoder puts most of its attention, and a residual norm hundreds of times a word's, on the first
    position (the attention sink). With a BOS first in both x and y, that position is identical in the two
    (causal attention: it sees only itself), so it drops out of every distance in both modes.
    """
    bos = getattr(model, "bos_token_id", None)
    return ids if bos is None else torch.cat([ids.new_full((len(ids), 1), bos), ids], dim=1)


def ranking(rows: list[dict]) -> list[tuple[str, float]]:
    """Groups sorted by their mean plasticity over blocks, most plastic first."""
    groups = dict.fromkeys(r["group"] for r in rows)  # in first-seen order
    means = {g: float(np.mean([r["mean"] for r in rows if r["group"] == g])) for g in groups}
    return sorted(means.items(), key=lambda kv: -kv[1])

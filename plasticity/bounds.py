"""Upper bounds on the plasticity of ViT components (paper Sec. 4, Props. 1-4, App. B, Fig. 6).

Notation follows the paper: a sequence of ``n`` tokens is a matrix ``x`` in ``R^{d x n}`` whose
columns are tokens. timm stores tokens as rows (``(B, n, d)``), so a timm ``nn.Linear`` weight
``W`` of shape ``(out, in)`` acts as ``W x`` on column tokens and needs no transposition.

* Prop. 1 (LayerNorm): ``||gamma||_inf / sigma`` with ``sigma`` the smallest token standard
  deviation in the data.
* Prop. 2 (feedforward linear layer): ``||W||_2``.
* Prop. 3 (multi-head self-attention on ``B_r^n``):
  ``sum_h ||O^h||_2 ||V^h||_2 sqrt(3n + (12n + 3) r^4 ||A^h||_2^2)``, ``A^h = (Q^h)^T K^h / sqrt(k)``.
  This is App. B.3's ``sqrt(3) ||V^h||_2 sqrt(||A^h||_2^2 r^4 (4n + 1) + n)`` (Castin et al.,
  2024, Thm. 3.3) times ``||O^h||_2``, summed over heads.
* Prop. 4 (multi-head self-attention, images of energy at most ``E``):
  ``sum_h ||O^h||_2 ||V^h||_2 (sqrt(n) + alpha^2 E ||A^h||_2)``, ``alpha`` the spectral norm of
  the patch embedding.

All bounds are computed in float64 on the CPU from detached copies of the weights. Biases are not
part of any bound: the paper's modules (Sec. 2) have none, and biases cancel in ``f(x) - f(y)``
for LayerNorm and linear layers (and for the value/output biases of attention, since softmax rows
sum to one). The query bias is the one exception: it adds ``b_q^T K^h x_j`` to the logits, a term
Prop. 3/4 do not cover (timm initialises it to zero).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import torch
import torch.nn as nn

from plasticity.components import GROUPS, TEXT_FAMILIES, family_of, group_module
from plasticity.measure import embed_tokens



def _f64(t: torch.Tensor) -> torch.Tensor:
    """A detached float64 CPU copy of a tensor."""
    return t.detach().to(device="cpu", dtype=torch.float64)


def spectral_norm(matrix: torch.Tensor) -> torch.Tensor:
    """Largest singular value ``||M||_2`` of a matrix (or a batch of matrices), in float64."""
    return torch.linalg.matrix_norm(_f64(matrix), ord=2)


@dataclass(frozen=True, eq=False)
class Heads:
    """Per-head weights ``(Q^h, K^h, V^h, O^h)`` of a multi-head self-attention, column-token convention.

    Head ``h`` computes ``O^h V^h x softmax(...)`` with logits ``(Q^h x)^T K^h x / sqrt(k)``.

    Attributes:
        Q: Query weights, shape ``(H, k, d)``.
        K: Key weights, shape ``(H, k, d)``.
        V: Value weights, shape ``(H, k, d)``.
        O: Output weights, shape ``(H, d, k)``.
    """

    Q: torch.Tensor
    K: torch.Tensor
    V: torch.Tensor
    O: torch.Tensor  # noqa: E741  (the paper's name)

    @property
    def H(self) -> int:
        """Number of heads."""
        return self.Q.shape[0]

    @property
    def k(self) -> int:
        """Head dimension."""
        return self.Q.shape[1]

    @property
    def A(self) -> torch.Tensor:
        """``A^h = (Q^h)^T K^h / sqrt(k)``, shape ``(H, d, d)`` (the bilinear form of the logits)."""
        return self.Q.transpose(1, 2) @ self.K / math.sqrt(self.k)


def _split_rows(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Splits a ``(H*k, d)`` projection into ``(H, k, d)`` head blocks of consecutive rows."""
    return _f64(weight).reshape(num_heads, -1, weight.shape[-1])


def attention_heads(attn: nn.Module) -> Heads:
    """Per-head weight slices of a timm attention module, as float64 CPU tensors.

    Supports timm's ``Attention`` (fused ``qkv`` Linear of shape ``(3Hk, d)`` whose rows are
    ``[queries; keys; values]``, each ``H`` blocks of ``k`` rows) and EVA-style attention with split
    ``q_proj``/``k_proj``/``v_proj`` (``transformers``' ViT and Dinov2 too: ``o_proj``, ``num_attention_heads``),
    and BERT's (``self.{query,key,value}`` and ``output.dense``: the paper's MHA in a BERT layer).
    Head ``h`` reads columns ``[h*k, (h+1)*k)`` of ``proj``, so ``O^h = proj.weight[:, h*k:(h+1)*k]``. Biases
    are dropped (see the module docstring); so are QK-norm, RoPE and gating, which are outside the paper's setting.

    Args:
        attn: The attention module (``block.attn``), with ``num_heads`` and ``proj``.

    Raises:
        TypeError: if the module has neither a fused ``qkv`` nor split projections.
    """
    if getattr(attn, "qkv", None) is not None:
        return _heads(*_split_rows(attn.qkv.weight, 3 * attn.num_heads).chunk(3, dim=0), attn.proj)
    if getattr(attn, "q_proj", None) is not None:
        heads = getattr(attn, "num_heads", None) or attn.num_attention_heads  # timm's EVA, or transformers'
        return _heads(*(_split_rows(p.weight, heads) for p in (attn.q_proj, attn.k_proj, attn.v_proj)),
                      getattr(attn, "proj", None) or attn.o_proj)
    if hasattr(attn, "self"):  # BERT's attention: self.{query, key, value}, then its projection output.dense
        layers = (attn.self.query, attn.self.key, attn.self.value)
        return _heads(*(_split_rows(p.weight, attn.self.num_attention_heads) for p in layers), attn.output.dense)
    raise TypeError(f"{type(attn).__name__} has neither a fused `qkv` nor `q_proj`/`k_proj`/`v_proj` "
                    f"Linear layers; plasticity.bounds supports timm ViT/DeiT/BEiT/EVA attention.")


def _heads(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, output: nn.Linear) -> Heads:
    """:class:`Heads` of per-head ``(H, k, d)`` query/key/value blocks and the output projection, whose
    columns ``[h*k, (h+1)*k)`` are head ``h``'s."""
    O = _f64(output.weight).reshape(output.weight.shape[0], Q.shape[0], -1).permute(1, 0, 2)  # noqa: E741
    return Heads(Q=Q.contiguous(), K=K.contiguous(), V=V.contiguous(), O=O.contiguous())


def attention_norms(heads: Heads) -> torch.Tensor:
    """``||A^h||_2`` for every head, shape ``(H,)``, without forming the ``d x d`` matrices.

    With thin QR factorisations ``(Q^h)^T = U_Q R_Q`` and ``(K^h)^T = U_K R_K`` (``U`` with
    orthonormal columns), ``A^h = U_Q R_Q R_K^T U_K^T / sqrt(k)`` has the spectral norm of the
    ``k x k`` matrix ``R_Q R_K^T / sqrt(k)``.
    """
    R_Q = torch.linalg.qr(heads.Q.transpose(1, 2)).R
    R_K = torch.linalg.qr(heads.K.transpose(1, 2)).R
    return spectral_norm(R_Q @ R_K.transpose(1, 2)) / math.sqrt(heads.k)


def ln_bound(norm: nn.LayerNorm, sigma: float) -> float:
    """Prop. 1: ``P(f) <= ||gamma||_inf / sigma`` for a LayerNorm.

    The paper assumes every token in position ``i`` has the same std ``sigma_i`` and takes
    ``sigma = min_i sigma_i``; ``sigma`` is a (biased, as in LayerNorm) std over the ``d``
    entries of a token. The bound also holds without that assumption for any tokens whose std is at
    least ``sigma`` (token-wise normalisation is a radial projection onto a sphere, which is
    ``1/sigma``-Lipschitz outside the ball of std ``sigma``); LayerNorm's ``eps`` only lowers the
    rate. A LayerNorm without affine weight has ``gamma = 1``.

    Args:
        norm: The LayerNorm (``block.norm1`` or ``block.norm2``).
        sigma: Smallest token standard deviation (:attr:`TokenStats.sigma`), positive.
    """
    if not sigma > 0:
        raise ValueError(f"sigma must be positive, got {sigma}")
    return (1.0 if norm.weight is None else _f64(norm.weight).abs().max().item()) / sigma  # ||gamma||_inf / sigma


def fc_bound(linear: nn.Linear) -> float:
    """Prop. 2: ``P(f) <= ||W||_2``, the spectral norm of the linear layer's weight."""
    return spectral_norm(linear.weight).item()


def _value_output_norms(heads: Heads) -> torch.Tensor:
    """``||O^h||_2 ||V^h||_2`` for every head, shape ``(H,)``."""
    return spectral_norm(heads.O) * spectral_norm(heads.V)


def mha_bound(heads: Heads, n: int, r: float) -> float:
    """Prop. 3: ``sum_h ||O^h||_2 ||V^h||_2 sqrt(3n + (12n + 3) r^4 ||A^h||_2^2)``.

    Valid for sequences of ``n`` tokens in the ball ``B_r`` (every token norm at most ``r``).

    Args:
        heads: Per-head weights (:func:`attention_heads`).
        n: Sequence length.
        r: Token radius (:attr:`TokenStats.r_max` for the strict bound, :attr:`TokenStats.r_rms`
            for the paper's Fig. 6).
    """
    per_head = torch.sqrt(3 * n + (12 * n + 3) * r**4 * attention_norms(heads) ** 2)
    return (_value_output_norms(heads) * per_head).sum().item()


def mha_bound_embedding(heads: Heads, n: int, alpha: float, energy: float) -> float:
    """Prop. 4: ``sum_h ||O^h||_2 ||V^h||_2 (sqrt(n) + alpha^2 E ||A^h||_2)``.

    App. B.4 bounds ``||x||_F <= R = alpha sqrt(E)`` for tokens ``x_i = E_mat vec(p_i)`` of an image
    whose energy (sum of squared pixel intensities) is at most ``E``; ``alpha^2 E = R^2``. Note the
    proof's tokens omit the patch-embedding bias, the class token and the position embedding.

    Args:
        heads: Per-head weights (:func:`attention_heads`).
        n: Sequence length.
        alpha: Spectral norm of the patch embedding (:func:`patch_embed_norm`).
        energy: Largest image energy in the data (:attr:`TokenStats.energy`).
    """
    per_head = math.sqrt(n) + alpha**2 * energy * attention_norms(heads)
    return (_value_output_norms(heads) * per_head).sum().item()


class TokenStats:
    """Streaming statistics of embedding-layer tokens and images, in float64, constant memory.

    Feed it batches of tokens entering the first block (patch embedding, class token, position
    embedding: :func:`plasticity.measure.embed_tokens`) with the normalised images they come from. Accumulators
    stay on the device of the first batch.
    """

    def __init__(self) -> None:
        self._n: int | None = None
        self._count = 0

    @torch.no_grad()
    def update(self, tokens: torch.Tensor, images: torch.Tensor) -> None:
        """Adds a batch.

        Args:
            tokens: Row tokens, shape ``(B, n, d)``.
            images: The normalised images, shape ``(B, C, H, W)``.
        """
        if images is not None and images.ndim == 2:  # token windows: no image, no energy (Prop. 4 is for images)
            images = None
        if tokens.ndim != 3 or (images is not None and (images.ndim != 4 or tokens.shape[0] != images.shape[0])):
            raise ValueError(f"expected tokens (B, n, d) and images (B, C, H, W), got "
                             f"{tuple(tokens.shape)} and {tuple(images.shape)}")
        if self._n is not None and tokens.shape[1] != self._n:
            raise ValueError(f"sequence length changed from {self._n} to {tokens.shape[1]}")
        x = tokens.detach().to(torch.float64)
        sq_norms = x.pow(2).sum(-1)
        stds = x.std(-1, correction=0)  # biased, as LayerNorm normalises: Prop. 1's sigma
        # Prop. 4's E: the energy of the image the model sees (normalised), not of the raw pixels
        energies = (images.detach().to(device=x.device, dtype=torch.float64).pow(2).flatten(1).sum(1)
                    if images is not None else torch.full((1,), float("nan"), dtype=torch.float64, device=x.device))
        batch = (sq_norms.sum(), sq_norms.max(), stds.min(), energies.max())
        if self._n is not None:  # folded into what was seen: a sum, a max, a min and a max
            batch = (self._sum_sq + batch[0], torch.maximum(self._max_sq, batch[1]),
                     torch.minimum(self._min_std, batch[2]), torch.maximum(self._max_energy, batch[3]))
        self._n = tokens.shape[1]
        self._sum_sq, self._max_sq, self._min_std, self._max_energy = batch
        self._count += sq_norms.numel()

    def _seen(self) -> TokenStats:
        """``self``, once it has seen data."""
        if self._n is None:
            raise RuntimeError("TokenStats has seen no data; call update(tokens, images) first")
        return self

    @property
    def n(self) -> int:
        """Sequence length (tokens per image, class token included)."""
        return self._seen()._n

    @property
    def sigma(self) -> float:
        """Smallest token std: min over images and positions of the biased std of a token's ``d`` entries."""
        return self._seen()._min_std.item()

    @property
    def r_rms(self) -> float:
        """The paper's average radius (App. D.1): ``sqrt`` of the mean of ``||x_j||^2`` over all tokens."""
        return math.sqrt(self._seen()._sum_sq.item() / self._count)

    @property
    def r_max(self) -> float:
        """Largest token norm: the radius of the smallest ball ``B_r`` holding every token seen."""
        return math.sqrt(self._seen()._max_sq.item())

    @property
    def energy(self) -> float:
        """Largest image energy (sum of squared normalised pixel values over ``C, H, W``), Prop. 4's ``E``."""
        return self._seen()._max_energy.item()

    def summary(self) -> dict[str, float]:
        """All statistics as a dict (for logging)."""
        return {key: getattr(self, key) for key in ("n", "sigma", "r_rms", "r_max", "energy")}


@torch.no_grad()
def token_stats(model: nn.Module, batches: Iterable) -> TokenStats:
    """:class:`TokenStats` of a model's embedding tokens over batches of images.

    Args:
        model: A timm ViT.
        batches: Image tensors ``(B, C, H, W)`` or ``(images, labels, ...)`` tuples (a DataLoader),
            already normalised; moved to the model's device.
    """
    device = next(model.parameters()).device
    stats = TokenStats()
    for batch in batches:
        images = (batch[0] if isinstance(batch, (tuple, list)) else batch).to(device)
        stats.update(embed_tokens(model, images), images)
    return stats


def patch_embed_norm(model: nn.Module) -> float:
    """``alpha``: spectral norm of the patch embedding as a ``(d, C*P*P)`` matrix on flattened patches."""
    weight = (model.patch_embed.proj if family_of(model) == "vit" else
              model.backbone.embeddings.patch_embeddings.projection).weight  # transformers' ViT and Dinov2
    return spectral_norm(weight.reshape(weight.shape[0], -1)).item()


NOT_COVERED: dict[str, dict[str, str]] = {
    "bert": {
        "mha": "Prop. 4 needs a patch embedding and image energy: token embeddings are a lookup, not a linear map "
               "of the input (Prop. 3 holds, on the tokens' radius).",
    },
    "llama": {
        "ln1": "RMSNorm: Prop. 1 is proved for LayerNorm (centring, then scaling); RMSNorm does not centre, and its "
               "rate on tokens near the origin is not bounded by ||gamma||_inf / sigma.",
        "ln2": "RMSNorm: Prop. 1 is proved for LayerNorm (centring, then scaling); RMSNorm does not centre.",
        "mha": "Props. 3-4 cover softmax self-attention without positions; Llama's attention rotates queries and "
               "keys by position (RoPE), masks the future (causal) and shares keys/values across heads (GQA).",
    },
}
"""Family -> group -> why a proposition does not bound it (written beside the bounds of a text model; an
image family's blocks, timm's or ``transformers``' ViT and Dinov2, are the paper's: every bound holds).
BERT is post-LN: its LayerNorms are still LayerNorms (Prop. 1 holds for the function), but they
normalise the residual stream after each sublayer, not a sublayer's input."""


def block_bounds(model: nn.Module, stats: TokenStats) -> list[dict]:
    """Every bound of Sec. 4 for every block of a ViT, timm's or ``transformers``' (a text model: those that hold).

    BERT: Prop. 1 (its post-LN LayerNorms as functions, in the paper's roles: LN1 of layer i is the norm closing
    layer i-1, LN2 ``attention.output.LayerNorm``), Prop. 2 (``intermediate.dense``, ``output.dense``), Prop. 3
    (``attention.self`` + ``attention.output.dense`` as the paper's MHA, at the tokens' RMS and largest radius).
    Llama: Prop. 2 only (FC1: the stacked gate and up projections, one linear map; FC2: ``down_proj``); what is not
    bounded is :data:`NOT_COVERED`.

    Args:
        model: A timm ViT with ``blocks[i].{norm1, attn, norm2, mlp.fc1, mlp.fc2}``, or a text model.
        stats: Embedding-token statistics on the data of interest.

    Returns:
        Rows ``{"group", "block", "bound", "value"}``, per block in group order: ``ln1``/``ln2`` with
        ``prop1``, ``fc1``/``fc2`` with ``prop2``, ``mha`` with ``prop3_rms`` (``r = stats.r_rms``),
        ``prop3_max`` (``r = stats.r_max``) and ``prop4``.
    """
    family = family_of(model)
    alpha = patch_embed_norm(model) if family not in TEXT_FAMILIES else None  # a timm or transformers ViT: Prop. 4
    rows = []
    for i, block in enumerate(model.blocks):
        module = lambda group: group_module(model, group, i)  # noqa: E731
        if family == "llama":  # Prop. 2 only (NOT_COVERED): FC1 the stacked gate and up projections, one linear map
            stacked = torch.cat([_f64(block.mlp.gate_proj.weight), _f64(block.mlp.up_proj.weight)])
            values = {"fc1": {"prop2": spectral_norm(stacked).item()}, "fc2": {"prop2": fc_bound(block.mlp.down_proj)}}
        else:  # BERT's LayerNorms in the paper's roles (LN1 of layer i: the norm closing layer i-1)
            heads = attention_heads(block.attention if family == "bert" else module("mha"))
            values = {"ln1": {"prop1": ln_bound(module("ln1"), stats.sigma)},
                      "mha": {"prop3_rms": mha_bound(heads, stats.n, stats.r_rms),  # the paper's Fig. 6 radius
                              "prop3_max": mha_bound(heads, stats.n, stats.r_max)},  # every token seen in B_r: strict
                      "ln2": {"prop1": ln_bound(module("ln2"), stats.sigma)},
                      "fc1": {"prop2": fc_bound(module("fc1"))}, "fc2": {"prop2": fc_bound(module("fc2"))}}
        if alpha is not None:
            values["mha"]["prop4"] = mha_bound_embedding(heads, stats.n, alpha, stats.energy)
        rows += [{"group": g, "block": i, "bound": b, "value": v} for g in GROUPS for b, v in values.get(g, {}).items()]
    return rows

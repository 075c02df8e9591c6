"""Linear probing: frozen features of a pretrained ViT and a multinomial logistic regression on them.

The paper's linear-probing baseline (Table 6, last column), as the official code computes it:
the last block's output (the residual stream before the final norm), mean-pooled over every token
(CLS and register tokens included), L2-normalised per sample, standardised with the train split's
per-feature mean and standard deviation, then scikit-learn's ``LogisticRegression`` (multinomial,
L2 penalty, L-BFGS). Here the regression is fitted full-batch with ``torch.optim.LBFGS`` (strong
Wolfe line search) on the features' device, minimising sklearn's objective scaled by ``1/n``::

    mean_i CE(W x_i + b, y_i) + ||W||^2 / (2 C n)

(the same minimiser as ``sum_i CE + ||W||^2 / (2C)``; the intercept is not penalised), and it stops
like sklearn's ``lbfgs`` when the largest absolute gradient entry is at most ``tol``.

Example:
    >>> feats = extract_features(net, batches, "block_output", "mean")  # doctest: +SKIP
    >>> (xtr, xte), mean, std = l2_standardise(train_feats, test_feats)  # doctest: +SKIP
    >>> W, b, iterations = fit_logreg(xtr, ytr, C=1.0, max_iter=5000, tol=1e-4)  # doctest: +SKIP
    >>> accuracy(xte, yte, W, b)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
import torch.nn.functional as F

from plasticity.components import TEXT_FAMILIES, family_of
from plasticity.measure import output_in_forward

__all__ = ["FEATURES", "POOLS", "accuracy", "block_output", "extract_features", "fit_logreg", "grad_max",
           "l2_standardise", "logits", "loss", "pool_problem", "pool_tokens", "select_c"]

FEATURES = ("block_output", "pre_logits")
"""``block_output``: the last block's output tokens (before the final norm), pooled by ``pool``;
``pre_logits``: timm's ``forward_head(forward_features(x), pre_logits=True)`` (final norm, the
model's own pooling and ``fc_norm``)."""

POOLS = ("mean", "cls")
"""``mean``: the average over every token (CLS and register tokens included, as the official code);
``cls``: token 0."""


# ----------------------------------------------------------------------------------- features


def block_output(net: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The tokens the last block outputs, ``(B, T, D)``: the residual stream before the final norm.

    A forward hook on ``net.blocks[-1]`` catches them during ``net.forward_features`` (whatever
    the family does before its blocks: position embedding, register tokens, rope), which stops there.

    Raises:
        ValueError: The model has no ``blocks``.
    """
    blocks = getattr(net, "blocks", None)
    if blocks is None or len(blocks) == 0:
        raise ValueError(f"{type(net).__name__} has no `blocks`: task.features=block_output needs a timm ViT-like "
                         f"model. Fix: task.features=pre_logits.")
    return output_in_forward(net, blocks[-1], x, "its last block")  # the final norm does not run


def pool_tokens(tokens: torch.Tensor, pool: str) -> torch.Tensor:
    """``(B, T, D) -> (B, D)``: the mean over all tokens, or token 0 (``cls``)."""
    if pool == "mean":
        return tokens.mean(dim=1)
    if pool == "cls":
        return tokens[:, 0]
    raise ValueError(f"task.pool={pool!r}; choices: {', '.join(POOLS)}.")


def pool_problem(pool: str, model: str, text: bool, cls_token: bool = True) -> str | None:
    """The problem of ``task.pool=cls`` on a model without a class token (no text model has one), or None.

    Args:
        pool: ``task.pool``.
        model: The model as the message names it (``model.name='minilm_l6'``, or its class name).
        text: Whether it is a text model (:mod:`plasticity.text`).
        cls_token: Whether an image model has a class token.
    """
    if pool != "cls" or (cls_token and not text):
        return None
    why = (" is a text model: it has no class token to read (its features are pooled as its head pools them: the mean "
           "of the real tokens for an encoder, the last real token for a decoder)") if text else " has no class token"
    return f"task.pool=cls but {model}{why}. Fix: task.pool=mean."


@torch.inference_mode()
def extract_features(net: torch.nn.Module, images: Iterable[torch.Tensor], features: str = "block_output",
                     pool: str = "mean") -> torch.Tensor:
    """Features of every batch of model inputs, concatenated in order, as float32 on their device.

    Args:
        net: The frozen model (put it in eval mode; the caller picks the device and autocast).
        images: Batches of transformed images ``(B, 3, S, S)`` on the model's device.
        features: One of :data:`FEATURES`.
        pool: One of :data:`POOLS` (``block_output`` only; ``pre_logits`` pools as the model does).

    Returns:
        ``(N, D)`` float32.

    Raises:
        ValueError: Unknown ``features`` or ``pool``; ``pool=cls`` on a model without a class token.
    """
    if features not in FEATURES:
        raise ValueError(f"task.features={features!r}; choices: {', '.join(FEATURES)}.")
    text = family_of(net) in TEXT_FAMILIES  # a TextTransformer pools over its real tokens (plasticity.text.models)
    problem = pool_problem(pool, type(net).__name__, text, getattr(net, "cls_token", None) is not None)
    if features == "block_output" and problem:
        raise ValueError(problem)
    out = []
    for x in images:
        if features == "pre_logits":
            f = net.pre_logits(x) if text else net.forward_head(net.forward_features(x), pre_logits=True)
        elif text:  # mean over the real tokens (encoders) or the last real token (decoders): the head's pooling
            f = net.pool(block_output(net, x), x)
        else:
            f = pool_tokens(block_output(net, x), pool)
        out.append(f.float())
    if not out:
        raise ValueError("no images to extract features from")
    return torch.cat(out)


def l2_standardise(train: torch.Tensor, *others: torch.Tensor, eps: float = 1e-12
                   ) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """L2-normalises every sample, then standardises every set with the train set's statistics.

    The standardisation is scikit-learn's ``StandardScaler``: per-feature mean and population
    standard deviation (``ddof=0``) of the normalised train features; a constant feature keeps
    scale 1.

    Args:
        train: ``(N, D)`` train features.
        *others: Other sets (val, test) transformed with the train statistics.
        eps: Floor of a sample's norm.

    Returns:
        ``([train, *others] standardised, mean (D,), std (D,))``.
    """
    normed = [f / f.norm(dim=1, keepdim=True).clamp_min(eps) for f in (train, *others)]
    mean, std = normed[0].mean(dim=0), normed[0].std(dim=0, unbiased=False)
    std = torch.where(std > 0, std, torch.ones_like(std))
    return [(f - mean) / std for f in normed], mean, std


# ----------------------------------------------------------------------------------- regression


def logits(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``x W^T + b`` in the parameters' dtype: ``(N, D), (K, D), (K,) -> (N, K)``."""
    return x.to(W.dtype) @ W.T + b


def loss(x: torch.Tensor, y: torch.Tensor, W: torch.Tensor, b: torch.Tensor) -> float:
    """Mean cross-entropy (no penalty)."""
    return float(F.cross_entropy(logits(x, W, b), y.to(W.device)))


def accuracy(x: torch.Tensor, y: torch.Tensor, W: torch.Tensor, b: torch.Tensor) -> float:
    """Fraction of samples whose largest logit is the label."""
    return float((logits(x, W, b).argmax(dim=1) == y.to(W.device)).double().mean())


def fit_logreg(x: torch.Tensor, y: torch.Tensor, C: float = 1.0, max_iter: int = 5000, tol: float = 1e-4,
               num_classes: int | None = None, dtype: torch.dtype = torch.float64, history_size: int = 10
               ) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Multinomial logistic regression with sklearn's objective, full batch, by L-BFGS on ``x``'s device.

    Minimises ``mean_i CE(W x_i + b, y_i) + ||W||^2 / (2 C n)`` from zero (the intercept is not
    penalised) with ``torch.optim.LBFGS`` (strong Wolfe line search, ``history_size`` corrections
    like scipy's ``maxcor=10``). It stops when the largest absolute gradient entry is at most
    ``tol`` (sklearn's ``gtol``), when the loss stops changing, or after ``max_iter`` iterations
    (function evaluations are capped at ``max(2 max_iter, 15000)``, scipy's ``maxfun``).

    Args:
        x: ``(N, D)`` features.
        y: ``(N,)`` integer labels in ``[0, K)``.
        C: Inverse regularisation strength (sklearn's ``C``).
        max_iter: Most L-BFGS iterations.
        tol: Gradient tolerance (max-abs entry).
        num_classes: ``K`` (default ``y.max() + 1``).
        dtype: Dtype of the fit (float64 matches sklearn to about 1e-6).
        history_size: L-BFGS memory.

    Returns:
        ``(W (K, D), b (K,), iterations)``, detached, in ``dtype`` on ``x``'s device.
    """
    if not C > 0:
        raise ValueError(f"task.C={C!r} must be a finite positive number.")
    n, d = x.shape
    k = int(num_classes or int(y.max()) + 1)
    x1 = torch.cat([x.to(dtype), torch.ones(n, 1, dtype=dtype, device=x.device)], dim=1)  # bias column
    yd = y.to(x.device, torch.long)
    theta = torch.zeros(k, d + 1, dtype=dtype, device=x.device, requires_grad=True)
    opt = torch.optim.LBFGS([theta], lr=1.0, max_iter=max_iter, max_eval=max(2 * max_iter, 15000),
                            tolerance_grad=tol, tolerance_change=64 * torch.finfo(dtype).eps,
                            history_size=history_size, line_search_fn="strong_wolfe")
    reg = 0.5 / (C * n)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        value = F.cross_entropy(x1 @ theta.T, yd) + reg * theta[:, :d].pow(2).sum()
        value.backward()
        return value

    with torch.enable_grad():
        opt.step(closure)
    iterations = int(opt.state[theta].get("n_iter", 0))
    theta = theta.detach()
    return theta[:, :d].clone(), theta[:, d].clone(), iterations


def grad_max(x: torch.Tensor, y: torch.Tensor, W: torch.Tensor, b: torch.Tensor, C: float) -> float:
    """The largest absolute entry of the objective's gradient at ``(W, b)`` (0 at the optimum)."""
    n = x.shape[0]
    residual = torch.softmax(logits(x, W, b), dim=1)
    residual[torch.arange(n, device=W.device), y.to(W.device)] -= 1
    g_w = residual.T @ x.to(W.dtype) / n + W / (C * n)
    return float(torch.cat([g_w.flatten(), residual.mean(dim=0)]).abs().max())


def select_c(train_x: torch.Tensor, train_y: torch.Tensor, val_x: torch.Tensor, val_y: torch.Tensor,
             grid: Sequence[float], max_iter: int = 5000, tol: float = 1e-4, num_classes: int | None = None,
             dtype: torch.dtype = torch.float64) -> tuple[float, dict[float, float], dict[float, tuple]]:
    """Fits on train at every ``C`` of ``grid`` and picks the one with the best validation accuracy.

    Ties go to the smallest ``C`` (the strongest regularisation). Nothing is refitted: the chosen
    model is the one fitted on train alone, so the validation accuracy stays an honest score.

    Returns:
        ``(best C, {C: val accuracy}, {C: (W, b, iterations)})``.
    """
    fits, scores = {}, {}
    for C in sorted(float(c) for c in grid):
        fits[C] = fit_logreg(train_x, train_y, C, max_iter, tol, num_classes, dtype)
        scores[C] = accuracy(val_x, val_y, *fits[C][:2])
    best = max(scores, key=lambda c: (scores[c], -c))
    return best, scores, fits

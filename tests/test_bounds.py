"""Plasticity upper bounds (paper Sec. 4): head slices, each bound against measured rates, statistics."""

import math

import pytest
import torch
import torch.nn as nn
from timm.layers import Attention
from timm.models.eva import EvaAttention

from plasticity.measure import embed_tokens
from plasticity.bounds import (
    TokenStats,
    attention_heads,
    attention_norms,
    block_bounds,

    fc_bound,
    ln_bound,
    mha_bound,
    mha_bound_embedding,
    patch_embed_norm,

    spectral_norm,
    token_stats,
)
from plasticity.components import GROUPS
from plasticity.report.figures import plot_bounds
from tests.test_report import assert_figure


def rates(f, x, y):
    """``||f(x) - f(y)||_F / ||x - y||_F`` per pair, for batches of row-token sequences ``(B, n, d)``."""
    with torch.no_grad():
        return (f(x) - f(y)).flatten(1).norm(dim=1) / (x - y).flatten(1).norm(dim=1)


def in_ball(*shape, r, generator=None):
    """Random row tokens with norms spread over ``(0, r]``."""
    x = torch.randn(*shape, generator=generator)
    radius = r * torch.rand(*shape[:-1], 1, generator=generator).sqrt()
    return x / x.norm(dim=-1, keepdim=True) * radius


def reference_attention(heads, x, qkv_bias, proj_bias):
    """timm's attention rebuilt from the per-head slices: sum_h O^h (V^h x + b) softmax(logits)."""
    H, k = heads.H, heads.k
    b_q, b_k, b_v = qkv_bias.double().reshape(3, H, 1, k)
    x = x.double()
    q = x @ heads.Q.transpose(1, 2).unsqueeze(1) + b_q.unsqueeze(1)  # (H, B, n, k)
    key = x @ heads.K.transpose(1, 2).unsqueeze(1) + b_k.unsqueeze(1)
    v = x @ heads.V.transpose(1, 2).unsqueeze(1) + b_v.unsqueeze(1)
    probs = (q @ key.transpose(-1, -2) / math.sqrt(k)).softmax(-1)
    per_head = (probs @ v) @ heads.O.transpose(1, 2).unsqueeze(1)  # (H, B, n, d)
    return per_head.sum(0) + proj_bias.double()


@pytest.mark.parametrize("fused", [False, True])
def test_head_slices_reproduce_timm_attention(fused):
    torch.manual_seed(0)
    attn = Attention(64, num_heads=4, qkv_bias=True).eval()
    nn.init.normal_(attn.qkv.bias)
    nn.init.normal_(attn.proj.bias)
    attn.fused_attn = fused
    x = torch.randn(3, 17, 64)
    heads = attention_heads(attn)
    assert heads.Q.shape == heads.K.shape == heads.V.shape == (4, 16, 64)
    assert heads.O.shape == (4, 64, 16) and heads.Q.dtype == torch.float64
    expected = reference_attention(heads, x, attn.qkv.bias.detach(), attn.proj.bias.detach())
    with torch.no_grad():
        assert torch.allclose(attn(x).double(), expected, atol=1e-5)
    # logits are the paper's bilinear form x_i^T A^h x_j (without biases)
    assert torch.allclose(heads.A, heads.Q.transpose(1, 2) @ heads.K / 4.0)


def test_split_projections_eva_style():
    torch.manual_seed(1)
    attn = EvaAttention(32, num_heads=2, qkv_fused=False, scale_norm=False).eval()
    for layer in (attn.q_proj, attn.v_proj, attn.proj):
        nn.init.normal_(layer.bias)
    attn.fused_attn = False
    x = torch.randn(2, 5, 32)
    heads = attention_heads(attn)
    qkv_bias = torch.cat([attn.q_proj.bias, torch.zeros(32), attn.v_proj.bias]).detach()
    expected = reference_attention(heads, x, qkv_bias, attn.proj.bias.detach())
    with torch.no_grad():
        assert torch.allclose(attn(x).double(), expected, atol=1e-5)


def test_attention_norms_match_dense_matrices():
    torch.manual_seed(2)
    heads = attention_heads(Attention(48, num_heads=3))
    dense = torch.linalg.matrix_norm(heads.A, ord=2)
    assert torch.allclose(attention_norms(heads), dense, rtol=1e-10)


def test_prop2_linear_rates_below_spectral_norm():
    torch.manual_seed(3)
    fc = nn.Linear(64, 256)
    x, y = torch.randn(500, 17, 64), torch.randn(500, 17, 64)
    bound = fc_bound(fc)
    assert bound == pytest.approx(torch.linalg.svdvals(fc.weight.double())[0].item())
    assert rates(fc, x, y).max() <= bound
    # attained by the top right singular vector
    top = torch.linalg.svd(fc.weight.detach()).Vh[0]
    assert rates(fc, top.expand(1, 1, 64), torch.zeros(1, 1, 64)).item() == pytest.approx(bound, rel=1e-5)


def test_prop1_layernorm_rates_below_bound():
    torch.manual_seed(4)
    d, sigma = 64, 0.5
    norm = nn.LayerNorm(d, eps=1e-12)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(d) * 2)
        norm.bias.normal_()
    bound = ln_bound(norm, sigma)
    assert bound == pytest.approx(norm.weight.abs().max().item() / sigma)

    def tokens(b):  # per-token std in [sigma, 3 sigma], arbitrary means
        z = torch.randn(b, 17, d)
        z = (z - z.mean(-1, keepdim=True)) / z.std(-1, correction=0, keepdim=True)
        return z * sigma * (1 + 2 * torch.rand(b, 17, 1)) + torch.randn(b, 17, 1)

    x = tokens(400).double()
    far, near = tokens(400).double(), x + 1e-4 * torch.randn_like(x)
    norm = norm.double()
    assert rates(norm, x, far).max() <= bound
    assert rates(norm, x, near).max() <= bound
    assert rates(norm, x, -x).max() <= bound
    # nearly tight: a small move along the largest |gamma| coordinate, at std exactly sigma
    j = norm.weight.abs().argmax().item()
    a, b = (j + 1) % d, (j + 2) % d
    x0 = torch.zeros(1, 1, d, dtype=torch.float64)
    x0[..., a], x0[..., b] = 1.0, -1.0
    x0 = x0 / x0.std(-1, correction=0, keepdim=True) * sigma
    e = torch.zeros_like(x0)  # orthogonal to 1 and to x0: the direction LayerNorm stretches most
    e[..., j] = 1.0
    e = e - e.mean()
    assert rates(norm, x0, x0 + 1e-7 * e).item() == pytest.approx(bound, rel=2e-2)


def test_prop3_attention_rates_below_bound(micro_vit):
    micro_vit.eval()
    g = torch.Generator().manual_seed(5)
    n, d, r = 17, 64, 3.0
    for block in micro_vit.blocks:
        heads = attention_heads(block.attn)
        bound = mha_bound(heads, n, r)
        x = in_ball(256, n, d, r=r, generator=g)
        y = in_ball(256, n, d, r=r, generator=g)
        near = x * 0.999 + 1e-3 * in_ball(256, n, d, r=r, generator=g)  # still in B_r
        assert (near.norm(dim=-1) <= r + 1e-6).all()
        measured = torch.cat([rates(block.attn, x, y), rates(block.attn, x, near)])
        assert 0 < measured.max() <= bound


def test_prop3_formula_by_hand():
    torch.manual_seed(6)
    heads = attention_heads(Attention(32, num_heads=2))
    n, r = 10, 1.7
    expected = sum(
        torch.linalg.matrix_norm(heads.O[h], ord=2) * torch.linalg.matrix_norm(heads.V[h], ord=2)
        * math.sqrt(3) * torch.sqrt(torch.linalg.matrix_norm(heads.A[h], ord=2) ** 2 * r**4 * (4 * n + 1) + n)
        for h in range(2)
    ).item()  # App. B.3 form, Castin et al. Thm 3.3
    assert mha_bound(heads, n, r) == pytest.approx(expected, rel=1e-10)
    A = attention_norms(heads)
    alpha, energy = 2.0, 3.0
    expected4 = sum(
        (spectral_norm(heads.O[h]) * spectral_norm(heads.V[h])
         * (math.sqrt(n) + alpha**2 * energy * A[h])).item()
        for h in range(2)
    )
    assert mha_bound_embedding(heads, n, alpha, energy) == pytest.approx(expected4, rel=1e-12)


def test_prop4_patch_tokens_within_alpha_sqrt_energy(micro_vit):
    torch.manual_seed(7)
    images = torch.randn(8, 3, 28, 28)
    proj = micro_vit.patch_embed.proj
    with torch.no_grad():
        patch_tokens = nn.functional.conv2d(images, proj.weight, stride=proj.stride)  # no bias
    stats = TokenStats()
    stats.update(patch_tokens.flatten(2).transpose(1, 2), images)
    frob = patch_tokens.flatten(1).norm(dim=1)
    assert (frob <= patch_embed_norm(micro_vit) * math.sqrt(stats.energy) * (1 + 1e-6)).all()
    assert stats.energy == pytest.approx(images.double().pow(2).flatten(1).sum(1).max().item())


def test_token_stats_by_hand():
    # one image, two tokens in R^4: [3,-3,3,-3] (norm 6, std 3) and [2,0,1,1] (norm sqrt(6),
    # mean 1, std sqrt(0.5))
    tokens = torch.tensor([[[3.0, -3.0, 3.0, -3.0], [2.0, 0.0, 1.0, 1.0]]])
    images = torch.full((1, 1, 2, 2), 0.5)  # energy 4 * 0.25 = 1
    stats = TokenStats()
    stats.update(tokens, images)
    assert stats.n == 2
    assert stats.sigma == pytest.approx(math.sqrt(0.5))
    assert stats.r_max == pytest.approx(6.0)
    assert stats.r_rms == pytest.approx(math.sqrt((36 + 6) / 2))
    assert stats.energy == pytest.approx(1.0)
    with pytest.raises(ValueError, match="sequence length"):
        stats.update(torch.zeros(1, 3, 4), images)
    with pytest.raises(RuntimeError, match="no data"):
        TokenStats().sigma


def test_token_stats_streaming_matches_concatenation():
    torch.manual_seed(8)
    t1, t2 = torch.randn(5, 7, 16) * 3 + 1, torch.randn(3, 7, 16) * 2
    i1, i2 = torch.randn(5, 3, 8, 8), torch.randn(3, 3, 8, 8) * 2
    streamed, whole = TokenStats(), TokenStats()
    streamed.update(t1, i1)
    streamed.update(t2, i2)
    whole.update(torch.cat([t1, t2]), torch.cat([i1, i2]))
    assert streamed.summary() == pytest.approx(whole.summary(), rel=1e-12)
    tokens = torch.cat([t1, t2]).double()
    assert whole.r_rms == pytest.approx(tokens.pow(2).sum(-1).mean().sqrt().item())
    assert whole.r_max == pytest.approx(tokens.norm(dim=-1).max().item())
    assert whole.sigma == pytest.approx(tokens.std(-1, correction=0).min().item())


def test_block_bounds_and_plot(micro_vit, tmp_path):
    micro_vit.eval()
    torch.manual_seed(9)
    images = torch.randn(6, 3, 28, 28)
    stats = token_stats(micro_vit, [(images[:4], None), images[4:]])
    with torch.no_grad():  # timm's private _pos_embed only as an independent reference of the tokens
        reference = micro_vit._pos_embed(micro_vit.patch_embed(images))
    assert torch.allclose(embed_tokens(micro_vit, images), reference)
    assert stats.n == 17 and stats.r_rms <= stats.r_max

    rows = block_bounds(micro_vit, stats)
    names = {"ln1": {"prop1"}, "ln2": {"prop1"}, "fc1": {"prop2"}, "fc2": {"prop2"},
             "mha": {"prop3_rms", "prop3_max", "prop4"}}
    assert len(rows) == 2 * 7
    for i in range(2):
        block = {(r["group"], r["bound"]) for r in rows if r["block"] == i}
        assert block == {(g, b) for g in GROUPS for b in names[g]}
    assert all(isinstance(r["value"], float) and 0 < r["value"] < math.inf for r in rows)
    value = {(r["group"], r["block"], r["bound"]): r["value"] for r in rows}
    assert value[("mha", 0, "prop3_rms")] < value[("mha", 0, "prop3_max")]
    assert value[("fc1", 1, "prop2")] == pytest.approx(fc_bound(micro_vit.blocks[1].mlp.fc1))

    path = tmp_path / "fig" / "bounds.png"
    plot_bounds(rows, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
    assert_figure(path, ("tab:blue", "tab:red", "tab:cyan", "tab:orange", "tab:green"))  # every group's bounds

"""Plasticity measurement: hand computations, streaming vs naive, modes, pairing."""

import numpy as np
import pytest
import torch
import torch.nn as nn

from plasticity.measure import (
    RunningStats, apply_module, embed_tokens, embedding_rates, measure, pair_indices, pair_rates,
    ranking, stat_keys,
)


def two_halves(b=6, n=5, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2 * b, n, d, generator=g)


def test_identity_module_has_rate_one():
    x = two_halves()
    assert torch.allclose(pair_rates(nn.Identity()(x), x), torch.ones(6))


def test_linear_rate_is_the_hand_ratio_and_below_the_spectral_norm():
    torch.manual_seed(0)
    lin = nn.Linear(8, 8, bias=True)
    x = two_halves()
    rates = pair_rates(lin(x), x)
    w = lin.weight.detach()
    for i in range(6):
        diff = x[i] - x[6 + i]
        hand = torch.linalg.norm(diff @ w.T) / torch.linalg.norm(diff)
        assert rates[i].item() == pytest.approx(hand.item(), rel=1e-5)
    assert rates.max() <= torch.linalg.matrix_norm(w, ord=2) + 1e-5


def test_identical_inputs_are_not_a_distinct_pair():
    x = two_halves(b=2)
    x[2] = x[0]
    stats = RunningStats([("ln1", 0)])
    stats.update(pair_rates(x * 3, x)[None])
    assert int(stats.count[0]) == 1 and stats.mean[0].item() == pytest.approx(3.0)


def test_fc2_zero_padding_equals_the_first_d_input_columns(micro_vit):
    block = micro_vit.blocks[0]
    tokens = torch.randn(3, 17, 64)
    fc2 = block.mlp.fc2
    expected = tokens @ fc2.weight[:, :64].T + fc2.bias
    padded = fc2(torch.nn.functional.pad(tokens, (0, fc2.in_features - 64)))
    assert torch.allclose(padded, expected, atol=1e-5)
    assert torch.allclose(apply_module(block, "fc2", tokens), padded, atol=1e-5)


def test_streaming_statistics_equal_a_naive_stored_computation():
    g = torch.Generator().manual_seed(3)
    batches = [torch.rand(2, 7, generator=g) * 3 + 0.1 for _ in range(5)]
    stats = RunningStats([("a", 0), ("b", 1)])
    for batch in batches:
        stats.update(batch)
    every = torch.cat(batches, dim=1).double()
    rows = stats.summary()
    for i, row in enumerate(rows):
        assert row["mean"] == pytest.approx(every[i].mean().item(), rel=1e-12)
        assert row["std"] == pytest.approx(every[i].std().item(), rel=1e-10)
        assert row["n_pairs"] == 35
        assert row["q50"] == pytest.approx(every[i].median().item(), rel=0.03)
        assert row["ci95_low"] < row["mean"] < row["ci95_high"]


def test_embedding_mode_applies_each_module_to_the_embedding_tokens(micro_vit):
    micro_vit.eval()
    images = torch.randn(8, 3, 28, 28)
    rates = embedding_rates(micro_vit, images)
    tokens = embed_tokens(micro_vit, images)
    assert tokens.shape == (8, 17, 64)
    keys = stat_keys(micro_vit)
    mha_block1 = keys.index(("mha", 1))
    out = micro_vit.blocks[1].attn(tokens)
    hand = [(out[i] - out[4 + i]).norm() / (tokens[i] - tokens[4 + i]).norm() for i in range(4)]
    assert torch.allclose(rates[mha_block1], torch.stack(hand), rtol=1e-5)


def test_layer_and_embedding_modes_agree_on_block0_ln1_and_differ_elsewhere(micro_vit):
    micro_vit.eval()
    images = torch.randn(16, 3, 28, 28)
    emb = measure(micro_vit, iter([images]), mode="embedding").summary()
    lay = measure(micro_vit, iter([images]), mode="layer").summary()
    by = lambda rows: {(r["group"], r["block"]): r["mean"] for r in rows}  # noqa: E731
    emb, lay = by(emb), by(lay)
    assert lay[("ln1", 0)] == pytest.approx(emb[("ln1", 0)], rel=1e-5)
    for key in [("mha", 0), ("ln2", 0), ("fc2", 0), ("ln1", 1), ("fc1", 1)]:
        assert abs(lay[key] - emb[key]) > 1e-3 * emb[key]


def test_layer_mode_hooks_are_removed(micro_vit):
    measure(micro_vit, iter([torch.randn(4, 3, 28, 28)]), mode="layer")
    assert all(not m._forward_hooks for m in micro_vit.modules())


def test_pairing_is_sequential_or_reproducible_by_seed():
    ri, di = pair_indices(5, 3, 8, "sequential")
    assert ri.tolist() == [0, 1, 2, 3, 4, 0, 1, 2] and di.tolist() == [0, 1, 2, 0, 1, 2, 0, 1]
    a, b = pair_indices(100, 50, 20, "random", seed=7), pair_indices(100, 50, 20, "random", seed=7)
    c = pair_indices(100, 50, 20, "random", seed=8)
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    assert not np.array_equal(a[0], c[0])
    with pytest.raises(ValueError, match="sequential, random"):
        pair_indices(5, 5, 5, "shuffled")


def test_ranking_orders_groups_by_mean_over_blocks():
    rows = [dict(group="ln1", block=0, mean=0.5), dict(group="ln1", block=1, mean=0.7),
            dict(group="mha", block=0, mean=2.0), dict(group="mha", block=1, mean=1.0)]
    assert ranking(rows) == [("mha", 1.5), ("ln1", 0.6)]


def test_measured_plasticity_stays_below_the_bounds_of_each_block(micro_vit):
    from plasticity.bounds import block_bounds, token_stats

    micro_vit.eval()
    torch.manual_seed(5)
    batches = [torch.randn(32, 3, 28, 28) for _ in range(3)]
    measured = {(r["group"], r["block"]): r for r in measure(micro_vit, iter(batches)).summary()}
    bounds = {(r["group"], r["block"], r["bound"]): r["value"] for r in block_bounds(micro_vit, token_stats(micro_vit, batches))}
    for block in range(2):
        assert measured[("mha", block)]["mean"] < bounds[("mha", block, "prop3_max")]
        assert measured[("fc1", block)]["q95"] <= bounds[("fc1", block, "prop2")] * 1.03
        assert measured[("ln1", block)]["mean"] < bounds[("ln1", block, "prop1")]

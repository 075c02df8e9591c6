"""Plasticity measurement: hand computations, streaming vs naive, modes, pairing."""

import numpy as np
import pytest
import torch
import torch.nn as nn

from scipy import stats as scipy_stats

from plasticity.measure import (
    RunningStats, apply_module, distinct_pairs, embed_tokens, embedding_rates, measure, pair_indices,
    pair_rates, ranking, stat_keys,
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
    assert torch.allclose(apply_module(micro_vit, 0, "fc2", tokens), padded, atol=1e-5)


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


def test_embed_tokens_are_timms_embedding_bit_for_bit_and_leave_no_hook(micro_vit):
    micro_vit.eval()
    images = torch.randn(4, 3, 28, 28)
    with torch.no_grad():  # timm's private _pos_embed only as an independent reference of what enters block 0
        reference = micro_vit.norm_pre(micro_vit._pos_embed(micro_vit.patch_embed(images)))
        assert torch.equal(embed_tokens(micro_vit, images), reference)
    assert not micro_vit.norm_pre._forward_hooks


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


def test_sequential_pairs_repeat_with_the_period_lcm_of_the_two_set_sizes():
    # n_ref=4, n_down=6: pair k = (k % 4, k % 6); k and k+12 give the same pair, lcm(4, 6) = 12
    ref, down = pair_indices(4, 6, 30, "sequential")
    by_hand = [(k % 4, k % 6) for k in range(30)]
    assert list(zip(ref.tolist(), down.tolist())) == by_hand
    assert len(set(by_hand)) == 12 and by_hand[12] == by_hand[0] and by_hand[13] == by_hand[1]
    assert distinct_pairs(4, 6, 30, "sequential") == 12
    assert distinct_pairs(4, 6, 10, "sequential") == 10  # fewer pairs than the period: all distinct
    assert distinct_pairs(5, 3, 8, "sequential") == 8  # coprime sizes: period 15
    assert distinct_pairs(5, 3, 100, "sequential") == 15
    assert distinct_pairs(10, 10, 25, "sequential") == 10  # equal sets: the diagonal only
    assert distinct_pairs(3, 7, 0, "sequential") == 0


@pytest.mark.parametrize("n_ref, n_down, n_pairs, seed", [(4, 6, 30, 0), (5, 5, 200, 3), (100, 80, 500, 7)])
def test_random_distinct_pairs_are_the_unique_pairs_actually_drawn(n_ref, n_down, n_pairs, seed):
    ref, down = pair_indices(n_ref, n_down, n_pairs, "random", seed)
    drawn = set(zip(ref.tolist(), down.tolist()))
    assert distinct_pairs(n_ref, n_down, n_pairs, "random", seed) == len(drawn)
    assert len(drawn) <= min(n_pairs, n_ref * n_down)


def test_small_random_sets_repeat_pairs_and_unknown_pairings_are_refused():
    assert distinct_pairs(2, 2, 50, "random", seed=1) == 4  # only 4 pairs exist; 50 draws hit all
    with pytest.raises(ValueError, match="sequential, random"):
        distinct_pairs(5, 5, 5, "shuffled")


def test_the_ci_uses_the_distinct_pairs_not_the_repeated_count():
    g = torch.Generator().manual_seed(4)
    base = torch.rand(1, 12, generator=g, dtype=torch.float64) + 0.5
    stats = RunningStats([("mha", 0)])
    stats.update(torch.cat([base] * 2 + [base[:, :6]], dim=1))  # 30 pairs, 12 distinct (sequential 4 x 6)
    plain, = stats.summary()
    row, = stats.summary(distinct=12)
    values = torch.cat([base] * 2 + [base[:, :6]], dim=1)[0].numpy()
    mean, std = values.mean(), values.std(ddof=1)
    assert row["mean"] == pytest.approx(mean, rel=1e-12) and row["std"] == pytest.approx(std, rel=1e-10)
    half_12 = scipy_stats.t.ppf(0.975, 11) * std / np.sqrt(12)
    half_30 = scipy_stats.t.ppf(0.975, 29) * std / np.sqrt(30)
    assert row["ci95_high"] - row["mean"] == pytest.approx(half_12, rel=1e-9)
    assert row["mean"] - row["ci95_low"] == pytest.approx(half_12, rel=1e-9)
    assert row["n_pairs"] == 30 and row["distinct_pairs"] == 12
    # without distinct: unchanged, every pair counted, no distinct_pairs field
    assert plain["ci95_high"] - plain["mean"] == pytest.approx(half_30, rel=1e-9) and "distinct_pairs" not in plain
    assert row["ci95_high"] - row["ci95_low"] > 1.5 * (plain["ci95_high"] - plain["ci95_low"])
    # distinct >= count changes nothing but the field
    full, = stats.summary(distinct=30)
    assert full["ci95_low"] == pytest.approx(plain["ci95_low"]) and full["distinct_pairs"] == 30
    assert stats.summary(distinct=1000)[0]["distinct_pairs"] == 30


def test_one_distinct_pair_has_no_interval():
    stats = RunningStats([("ln1", 0)])
    stats.update(torch.tensor([[2.0, 2.0, 2.0, 3.0]]))
    row, = stats.summary(distinct=1)
    assert np.isnan(row["ci95_low"]) and np.isnan(row["ci95_high"]) and row["distinct_pairs"] == 1

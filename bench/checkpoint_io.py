"""What an atomic checkpoint costs: Lightning's checkpoint writer against the run's atomic one, and
what the training thread pays for it when it is written in the background.

    python bench/checkpoint_io.py                       # ViT-B/16 MHA's trainable size (28.4M + momentum)
    python bench/checkpoint_io.py --params 2e6 --repeats 9

Writes the same checkpoint (``--params`` fp32 weights plus as much SGD momentum, the loops' and the
generators' state) ``--repeats`` times with each writer, interleaved, into ``--dir`` (default: a
temporary folder on the disk that holds this repository's outputs), and prints the median seconds
of each, MB/s and the ratio atomic / Lightning. Lightning's ``TorchCheckpointIO`` writes the file in
place (a kill during the write leaves it half-written); ours writes a temporary file, fsyncs it and
renames it (:class:`plasticity.runs.checkpoint_io.AtomicCheckpointIO`): the ratio is the price of
``last.ckpt`` always being whole, paid once per validation. ``background``
(:class:`plasticity.runs.checkpoint_io.BackgroundCheckpointIO`, what a run uses) is timed on the
calling thread only (the copy to the CPU and the hand-over: what the training step waits for); each
of its writes is waited for before the next writer's, outside the timing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

# This file is named like a package module: keep its own folder off the import path.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, installed or not

import torch  # noqa: E402
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO  # noqa: E402

from plasticity.module import rng_states  # noqa: E402
from plasticity.runs.checkpoint_io import AtomicCheckpointIO, BackgroundCheckpointIO  # noqa: E402


def checkpoint(params: int) -> dict:
    """A finetuning checkpoint's shape: weights, one momentum buffer each, loops, generators."""
    weights = {f"net.blocks.{i}.attn.qkv.weight": torch.randn(params // 12) for i in range(12)}
    return {"global_step": 500, "state_dict": weights,
            "optimizer_states": [{"state": {i: {"momentum_buffer": w.clone()} for i, w in enumerate(weights.values())}}],
            "loops": {"fit_loop": {"state_dict": {"combined_loader": [{"epoch": 39, "consumed": 4}]}}},
            "rng_states": rng_states()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=float, default=28.4e6, help="trainable parameters (ViT-B/16 MHA: 28.4M)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=Path(__file__).resolve().parents[1] / "outputs")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    ckpt = checkpoint(int(args.params))
    size_mb = None
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        writers = {"lightning": TorchCheckpointIO(), "atomic": AtomicCheckpointIO(folder),
                   "background": BackgroundCheckpointIO(folder)}
        times: dict[str, list[float]] = {name: [] for name in writers}
        for _ in range(args.repeats):
            for name, writer in writers.items():
                path = Path(folder) / f"{name}.ckpt"
                start = time.perf_counter()
                writer.save_checkpoint(ckpt, path)
                times[name].append(time.perf_counter() - start)
                if name == "background":
                    writer.wait()
                size_mb = path.stat().st_size / 1e6
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(f"checkpoint {size_mb:.0f} MB ({args.params / 1e6:.1f}M params + momentum), {args.repeats} writes each, "
          f"interleaved, in {args.dir}")
    for name, median in medians.items():
        rate = "on the calling thread" if name == "background" else f"({size_mb / median:.0f} MB/s)"
        print(f"  {name:10s} median {median:.3f} s  {rate}  min {min(times[name]):.3f} s")
    print(f"  atomic / lightning: {medians['atomic'] / medians['lightning']:.2f}x; on the training thread, "
          f"background / atomic: {medians['background'] / medians['atomic']:.2f}x")


if __name__ == "__main__":
    main()

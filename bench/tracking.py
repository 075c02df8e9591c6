"""What W&B costs a run, and how fast its offline files are read back.

    python bench/tracking.py [--runs 5] [--steps 100]

Times whole ``launch.py`` processes on Fashion-MNIST (``./data``): the same finetuning run (the
quickstart's micro ViT, 2 blocks, ``--steps`` optimizer steps of 16 images) with ``logger=csv``
and with ``logger=wandb`` (offline), in turn (A B A B ...), so drift hits both alike; prints each
median and the paired ratio wandb / csv. Each run writes into a fresh folder (nothing is skipped).
Then reads every run file the wandb runs wrote with :func:`plasticity.tracking.runfile.read_run`
and prints records per second.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the package, not bench/plasticity.py


def run(cwd: Path, logger: str, steps: int) -> float:
    cmd = [sys.executable, str(ROOT / "launch.py"), "debug=tiny", f"paths.data_dir={ROOT / 'data'}",
           f"logger={logger}", f"task.max_steps={steps}", f"task.val_every={steps // 2}", "dataset.limit=2000"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    cwd.mkdir(parents=True)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def read_speed(root: Path) -> tuple[int, float]:
    from plasticity.compat import run_file_records
    from plasticity.tracking.runfile import run_files

    files = run_files(root)
    start = time.perf_counter()
    n = sum(1 for f in files for _ in run_file_records(f))
    return n, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"csv": [], "wandb": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for i in range(-1, args.runs):  # run -1 warms the file cache and .pyc files
            for logger in times:
                t = run(root / f"{logger}{i}", logger, args.steps)
                if i >= 0:
                    times[logger].append(t)
        n, seconds = read_speed(root)
    ratios = [w / c for w, c in zip(times["wandb"], times["csv"])]
    print(f"{'logger':<8} {'median s':>9} {'min s':>7} {'max s':>7}   ({args.steps} steps, {args.runs} runs each)")
    for name, values in times.items():
        print(f"{name:<8} {statistics.median(values):9.2f} {min(values):7.2f} {max(values):7.2f}")
    print(f"wandb / csv, paired: median {statistics.median(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f}); "
          f"extra seconds per run: {statistics.median(times['wandb']) - statistics.median(times['csv']):.2f}")
    print(f"run files read back: {n} records in {seconds:.3f} s ({n / max(seconds, 1e-9):,.0f} records/s)")


if __name__ == "__main__":
    main()

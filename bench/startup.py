"""Start-up time of the entry point and the time to check a whole paper grid without running it.

    python bench/startup.py [--runs 5]

Times, as whole processes (median of ``--runs``): ``launch.py --help``, ``launch.py --cfg job``,
the import of torch + timm + Lightning (what a start-up that imported them eagerly could not go
below, the yardstick of the ratios), and ``-m experiment=paper/finetune/cifar10
sweep.dry_run=true`` (84 jobs composed and validated: config, data files, weights, conflicts;
nothing created). Prints each median and its ratio to the heavy-import floor.
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
LAUNCH = [sys.executable, str(ROOT / "launch.py")]
COMMANDS = {
    "launch.py --help": LAUNCH + ["--help"],
    "launch.py --cfg job": LAUNCH + ["--cfg", "job"],
    "import torch, timm, lightning": [sys.executable, "-c", "import torch, timm, lightning"],
    "dry run, 84-job cifar10 grid": LAUNCH + ["-m", "experiment=paper/finetune/cifar10", "sweep.dry_run=true"],
}


def wall(cmd: list[str], cwd: str) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cwd:
        for cmd in COMMANDS.values():  # warm the file cache and the .pyc files
            wall(cmd, cwd)
        medians = {}
        for _ in range(args.runs):  # interleaved, so drift hits every command alike
            for name, cmd in COMMANDS.items():
                medians.setdefault(name, []).append(wall(cmd, cwd))
        created = list(Path(cwd).iterdir())
    floor = statistics.median(medians["import torch, timm, lightning"])
    print(f"{'command':<34} {'median s':>9} {'min s':>7} {'max s':>7} {'/ heavy import':>15}")
    for name, times in medians.items():
        median = statistics.median(times)
        print(f"{name:<34} {median:9.2f} {min(times):7.2f} {max(times):7.2f} {median / floor:15.2f}")
    print(f"files the dry runs left in the launch folder: {len(created)}")


if __name__ == "__main__":
    main()

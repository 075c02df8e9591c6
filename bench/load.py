"""How the pre-launch dry run and the report grow with the number of runs.

    python bench/load.py [--experiments 1,3,11,22] [--records 1000,3000,10000] [--profile DIR]

**Dry run.** The paper's grids (``experiment=paper/finetune/<dataset>`` for the 11 datasets, then
``paper/ablation/adamw/<dataset>``: 84 jobs each), each launched in this process as
``python launch.py -m experiment=<grid> sweep.dry_run=true`` (Hydra sweeps one grid per launch): the
launch's composition, then :class:`plasticity.sweep.PlanSweeper` composing, validating and inspecting
every job, the table printed (to nowhere). The config builds (Hydra compositions) are counted.

**Report.** A synthetic sweep of N finetuning records (11 datasets x 7 groups x 4 learning rates,
as many seeds as N needs; each run a ``result.json`` and a 100-step ``metrics.csv``), reported by
:func:`plasticity.report.write_report`; ``collect`` (reading the records) is timed on its own too.

Prints, per size, the seconds and the seconds per job or record, so the growth reads off the
last column (constant: linear). ``--profile DIR`` writes a cProfile file per size.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import random
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAUNCH = str(ROOT / "launch.py")
sys.path.insert(0, str(ROOT))  # the package, not bench/plasticity.py

DATASETS = ("cifar10", "cifar100", "cifar10_c/contrast", "cifar10_c/gaussian_noise", "cifar10_c/motion_blur",
            "cifar10_c/snow", "cifar10_c/speckle_noise", "domainnet/clipart", "domainnet/sketch", "flowers102", "pets")
EXPERIMENTS = tuple(f"paper/finetune/{d}" for d in DATASETS) + tuple(f"paper/ablation/adamw/{d}" for d in DATASETS)
GROUPS = ("ln1", "mha", "ln2", "fc1", "fc2", "all", "head")
LRS = (1e-3, 3e-3, 1e-2, 3e-2)


def profiled(path: Path | None, call):
    """``call()``, under cProfile writing to ``path`` when given."""
    if path is None:
        return call()
    profile = cProfile.Profile()
    try:
        return profile.runcall(call)
    finally:
        profile.dump_stats(str(path))


def dry_run(experiments: int) -> tuple[int, int, float]:
    """(jobs, config builds, seconds) of the dry runs of the first ``experiments`` paper grids."""
    import runpy

    from hydra._internal.config_loader_impl import ConfigLoaderImpl  # what every composition goes through
    from hydra.core.global_hydra import GlobalHydra

    compose, builds, jobs = ConfigLoaderImpl.load_configuration, [], 0

    def counted(*args, **kwargs):
        builds.append(1)
        return compose(*args, **kwargs)

    ConfigLoaderImpl.load_configuration = counted
    start = time.perf_counter()
    try:
        for name in EXPERIMENTS[:experiments]:
            sys.argv, out = [LAUNCH, "-m", f"experiment={name}", "sweep.dry_run=true"], io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):  # the dry run exits 0
                runpy.run_path(LAUNCH, run_name="__main__")
            GlobalHydra.instance().clear()
            jobs += int(re.search(r"dry run: (\d+) jobs,", out.getvalue()).group(1))
    finally:
        ConfigLoaderImpl.load_configuration = compose
    return jobs, len(builds), time.perf_counter() - start


def write_sweep(root: Path, n: int, steps: int = 100) -> None:
    """``n`` finetuning run folders under ``root/finetune`` (record and metrics.csv), seeds as needed."""
    rng = random.Random(0)
    cells = [(d, g, lr) for d in DATASETS for g in GROUPS for lr in LRS]
    for i in range(n):
        (d, g, lr), seed = cells[i % len(cells)], i // len(cells)
        run = root / "finetune" / d / "m" / g / f"sgd_lr_{lr}" / f"seed_{seed}"
        run.mkdir(parents=True)
        acc = 0.7 + 0.2 * rng.random()
        (run / "result.json").write_text(json.dumps(dict(
            task="finetune", dataset=d, model="m", component=g, optimizer="sgd", lr=lr, seed=seed, status="done",
            best_val_acc=acc, test_acc=acc - 0.01, best_step=steps, steps=steps, wall_s=1.0, trainable_params=100,
            params={"group": 100, "head": 10}, strategy={"all": "full", "head": "head"}.get(g, "group"))))
        rows = "".join(f"0,{s},2.0,0.1,1.5,,\n" + (f"0,{s},,,,1.7,0.5\n" if s % 10 == 0 else "") for s in range(steps))
        (run / "metrics.csv").write_text(f"epoch,step,train/loss,lr,grad_norm/{g},val/loss,val/acc\n" + rows)


def report(root: Path) -> tuple[float, float]:
    """(seconds to collect the records, seconds for the whole report) of the sweep under ``root``."""
    from plasticity.report import collect, write_report

    start = time.perf_counter()
    collect(root / "finetune")
    collected = time.perf_counter()
    write_report(root / "finetune")
    return collected - start, time.perf_counter() - collected


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiments", default="1,3,11,22",
                        help="how many paper grids (84 jobs each), comma-separated")
    parser.add_argument("--records", default="1000,3000,10000", help="report sizes, comma-separated")
    parser.add_argument("--profile", type=Path, default=None, help="write cProfile files here")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # the grids' outputs/ (nothing is created) and no data: every job reads "to run, data missing"
        print(f"{'dry run: grids':<16} {'jobs':>6} {'builds':>7} {'builds/job':>10} {'total s':>8} {'ms/job':>8}")
        for n in (int(x) for x in args.experiments.split(",") if x):
            out = args.profile / f"dry_{n}.prof" if args.profile else None
            jobs, builds, total = profiled(out, lambda: dry_run(n))
            print(f"{n:<16} {jobs:6d} {builds:7d} {builds / jobs:10.2f} {total:8.1f} {1000 * total / jobs:8.1f}")
        print(f"{'report: records':<16} {'write s':>8} {'collect s':>10} {'report s':>9} {'ms/record':>10}")
        for n in (int(x) for x in args.records.split(",") if x):
            root = Path(tmp) / f"sweep_{n}"
            start = time.perf_counter()
            write_sweep(root, n)
            written = time.perf_counter() - start
            out = args.profile / f"report_{n}.prof" if args.profile else None
            collected, reported = profiled(out, lambda: report(root))
            print(f"{n:<16} {written:8.1f} {collected:10.2f} {reported:9.1f} {1000 * reported / n:10.2f}")


if __name__ == "__main__":
    main()

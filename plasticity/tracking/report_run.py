"""``task=report logger=wandb``: the report of a sweep as one W&B run.

The run (job type ``report``) has the claims (C1..C5), Table 6, Table 1, the relative gain, the
strategies, plasticity against accuracy and, when present, the ranking through pretraining as
``wandb.Table``s, every figure of the report as a ``wandb.Image``, and ``runs.csv`` as an artifact
(type ``runs``). Its group is the sweep's: the ``<dataset>/<model>`` group its runs share (the sweep
directory's name when they span several), so W&B shows the report beside the runs it summarises.
Its id comes from the sweep directory: a rebuilt report updates the same W&B run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from plasticity.runs.io import read_csv

__all__ = ["TABLES", "log_report", "report_group"]

TABLES = ("claims", "table6", "table1", "relative_gain", "strategies", "plasticity_vs_accuracy", "pretraining_ranking")
"""The report's CSV files logged as tables (those that exist)."""


def read_rows(path: Path) -> list[dict[str, Any]]:
    """A CSV file's rows, numbers as floats where they parse, empty cells as None (``[]`` when missing)."""
    return [{k: _number(v) for k, v in row.items()} for row in read_csv(path)]


def _number(text: str) -> Any:
    if text == "":
        return None
    try:
        return float(text)
    except (TypeError, ValueError):
        return text


def report_group(runs: list[dict[str, Any]], sweep_dir: Path) -> str:
    """The W&B group of the sweep's runs: their shared ``<dataset>/<model>``, else the sweep's name."""
    groups = {f"{r.get('dataset')}/{r.get('model')}" for r in runs}  # logger.wandb.group in conf/logger/wandb.yaml
    return groups.pop() if len(groups) == 1 else sweep_dir.resolve().name


def log_report(cfg: DictConfig, report_dir: str | Path, sweep_dir: str | Path) -> str:
    """Logs the report in ``report_dir`` as one W&B run; returns its run id.

    Args:
        cfg: The report job's config (with ``logger=wandb``).
        report_dir: Where :func:`plasticity.report.write_report` wrote the report.
        sweep_dir: The sweep the report summarises.
    """
    import wandb

    from plasticity import run_id
    from plasticity.tracking.logger import open_run, table

    report_dir, sweep_dir = Path(report_dir), Path(sweep_dir)
    runs = read_rows(report_dir / "runs.csv")
    optimizer = cfg.task.get("optimizer")
    only = f":{optimizer}" if optimizer else ""  # one optimizer's report is a run of its own, as its folder
    key = f"report:{sweep_dir.resolve()}{only}"  # one W&B run per sweep (and filter): a rebuilt report updates it
    run = open_run(cfg, {"task": "report", "sweep_dir": str(sweep_dir.resolve())}, report_dir,
                   job_type="report", group=report_group(runs, sweep_dir), id=run_id(key),
                   name=f"report/{sweep_dir.resolve().name}{only}", tags=["report"])
    tables = {name: table(rows) for name in TABLES if (rows := read_rows(report_dir / f"{name}.csv"))}
    run.log(tables | {f"figures/{image.stem}": wandb.Image(str(image)) for image in sorted(report_dir.glob("*.png"))})
    run.summary.update({"runs": len(runs), "done": sum(r.get("status") == "done" for r in runs)})
    if runs:
        artifact = wandb.Artifact(f"runs-{run.id}", type="runs", description=f"every record under {sweep_dir}")
        artifact.add_file(str(report_dir / "runs.csv"))
        run.log_artifact(artifact)
    return run.id

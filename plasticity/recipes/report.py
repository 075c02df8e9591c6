"""``task=report``: the paper's tables and figures from a sweep's records (:mod:`plasticity.report`);
with ``logger=wandb`` also as one W&B run (:mod:`plasticity.tracking.report_run`)."""

from __future__ import annotations

import logging
from typing import Any

from omegaconf import DictConfig

from plasticity.recipes import register
from plasticity.recipes.base import SweepRecipe
from plasticity.tracking import wandb_enabled
from plasticity.validate import Problems

log = logging.getLogger(__name__)


@register
class Report(SweepRecipe):
    """Recipe of ``task=report``: reads every record under ``sweep_dir``, writes ``<sweep_dir>/report/``
    (``report_<optimizer>/`` with ``task.optimizer``: :func:`plasticity.report.writer.report_folder`)."""

    name = "report"

    @classmethod
    def validate(cls, cfg: DictConfig, p: Problems, local: bool = True) -> None:
        from plasticity.report import check_sweep_dir

        p.require(not (problem := check_sweep_dir(cfg.sweep_dir)), problem)

    def run(self) -> dict[str, Any]:
        from plasticity.report import write_report

        result = write_report(self.cfg.sweep_dir, self.cfg.task.select, out_dir=self.run_dir,
                              optimizer=self.cfg.task.optimizer)
        print(f"report: {result.path} ({result.runs} runs, {result.done} done, {len(result.problems)} problems)")
        headline(result.path.parent)
        if wandb_enabled(self.cfg):
            from plasticity.tracking.report_run import log_report

            log.info("report logged to W&B as run %s", log_report(self.cfg, self.run_dir, self.cfg.sweep_dir))
        return {"report": str(result.path), "sweep_dir": str(self.cfg.sweep_dir), "runs": result.runs,
                "problems": len(result.problems)}


def headline(out) -> None:
    """Prints the report's average accuracy per configuration (Table 6's last row; a configuration
    run on fewer targets than the others is named with its count) and the claims' verdicts, read
    back from the CSVs it wrote (nothing when they are absent)."""
    from pathlib import Path

    from rich.table import Table

    from plasticity.console import console
    from plasticity.report.claims import verdict_text
    from plasticity.report.tables import AVERAGE
    from plasticity.runs.io import read_csv

    con = console()
    average = [r for r in read_csv(Path(out) / "table6.csv") if r["dataset"] == AVERAGE]
    targets = {r["label"]: int(r["n_datasets"]) for r in average}  # the datasets each average is over
    n = max(targets.values(), default=0)
    if average:
        con.print(f"average test accuracy over the {n} targets (%): " + ", ".join(
            f"{r['label']} {float(r['mean']):.2f}" for r in average if targets.get(r["label"]) == n)
            + "".join(f"; {r['label']} {float(r['mean']):.2f} on {targets.get(r['label'], 0)}"
                      for r in average if targets.get(r["label"]) != n), highlight=False)
    claims = [r for r in read_csv(Path(out) / "claims.csv") if r.get("level") == "claim"]
    if claims:
        table = Table("claim", "verdict", "value", "p", "n", title="the paper's claims on this sweep (claims.csv)")
        number = lambda text: f"{float(text):.3g}" if text else "-"  # noqa: E731
        for r in claims:
            table.add_row(r["claim"], verdict_text(r), number(r["value"]), number(r["p_value"]), r["n"] or "-")
        con.print(table)

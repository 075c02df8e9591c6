"""The launch as a whole: every job checked before the first one runs, the dry run, the summary.

A Hydra callback (registered in ``conf/config.yaml``):

- ``on_run_start`` (a single run) and ``on_multirun_start`` (a sweep) validate every job's
  config, and its run directory against a finished run of another config, *before* Hydra
  creates any folder: one bad value in one job of an 84-job grid stops the launch with every
  problem listed, and nothing is written. A SLURM launch is checked in the launching process
  (the GPU itself is checked on the node).
- ``sweep.dry_run=true`` lists every job (run path, status, whether its data and weights exist)
  without creating a folder, loading a model or reading data beyond file headers.
- The plan is handed to the submitting launchers (:mod:`plasticity.launcher`, ``hydra/launcher=slurm``
  or ``local``) in this process: they submit only the jobs whose run is not done
  (:func:`submission_split`), and the dry run lists the same split.
- Each multirun job's record is journaled under ``<sweep dir>/.sweeps/<id>/``; the end of the
  sweep prints one row per job and exits non-zero naming the failed runs.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict
from rich.markup import escape

from plasticity.console import VARYING, console, job_overrides, print_config_tree, print_problems, results_table
from plasticity.runs.io import read_json, write_json_atomic
from plasticity.runs.ranks import is_rank_zero

log = logging.getLogger(__name__)
SWEEP_ID = "PLASTICITY_SWEEP_ID"
"""The sweep's id, inherited by the jobs (in-process, submitit local or SLURM)."""


def journal_dir(sweep_dir: str | Path, sweep_id: str) -> Path:
    return Path(sweep_dir) / ".sweeps" / sweep_id


def journal(sweep_dir: str | Path, num: int, record: dict, replace: bool = True) -> None:
    """Writes job ``num``'s record into the running sweep's journal (nothing outside a sweep).

    Args:
        sweep_dir: The sweep directory (``hydra.sweep.dir``).
        num: The job's number in the sweep.
        record: Its record (``result.json``'s content, or what the launcher knows of it).
        replace: False keeps a record the job already wrote.
    """
    sweep_id = os.environ.get(SWEEP_ID)
    if not sweep_id:
        return
    path = journal_dir(sweep_dir, sweep_id) / f"{num:06d}.json"
    if replace or not path.exists():
        write_json_atomic(path, record)


@dataclass
class Job:
    """One job of a launch, as the launcher will run it.

    Attributes:
        num: Its position in the sweep (Hydra's ``job.num``).
        overrides: Its command-line overrides.
        cfg: Its composed config (with the ``hydra`` node).
        run_dir: Its run directory.
        problems: Every problem found before compute.
        state: What its run directory holds (``new``, ``same``, ``resume``, ``running`` ...).
    """

    num: int
    overrides: list[str]
    cfg: DictConfig | None
    run_dir: Path | None = None
    problems: list[str] = field(default_factory=list)
    state: Any = None


# ----------------------------------------------------------------------------------- planning


def expand(config: DictConfig) -> list[list[str]]:
    """The overrides of each job of a multirun, as Hydra's basic sweeper expands them."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    params += list(config.hydra.overrides.task)
    overrides = OverridesParser.create().parse_overrides(params)
    return [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]


class Composer:
    """Composes job configs; jobs that differ only in values (``optimizer.lr=...``, ``seed=...``)
    share one composition of their config groups, then get their values set."""

    def __init__(self, config_name: str | None, choices: set[str]) -> None:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        self.config_name, self.choices = config_name, choices
        self.parser = OverridesParser.create()
        self.cache: dict[tuple[str, ...], DictConfig] = {}

    def compose(self, overrides: list[str]) -> DictConfig:
        from hydra import compose
        from hydra.core.override_parser.types import OverrideType

        groups, values = [], []
        for text, override in zip(overrides, self.parser.parse_overrides(overrides)):
            key = override.key_or_group
            if key.startswith("hydra.") or key == "hydra":
                continue
            plain = override.type == OverrideType.CHANGE and key not in self.choices and "/" not in key
            (values if plain else groups).append((text, override))
        key = tuple(text for text, _ in groups)
        if key not in self.cache:
            self.cache[key] = compose(self.config_name, overrides=list(key), return_hydra_config=True)
        cfg = self.cache[key].copy()
        for text, override in values:
            OmegaConf.update(cfg, override.key_or_group, override.value(), merge=True)
        with open_dict(cfg.hydra):
            cfg.hydra.overrides.task = overrides
        return cfg


def plan(config: DictConfig, config_name: str | None) -> list[Job]:
    """Every job of the multirun with its composed config and run directory. The launcher is the
    launch's (``hydra/launcher=...`` is a Hydra override, not a job's): each job's config gets it."""
    composer = Composer(config_name, set(config.hydra.runtime.choices.keys()))
    jobs = []
    for num, overrides in enumerate(expand(config)):
        try:
            cfg = composer.compose(overrides)
            with open_dict(cfg.hydra):
                cfg.hydra.launcher = config.hydra.launcher
            run_dir = Path(os.path.abspath(f"{cfg.hydra.sweep.dir}/{cfg.hydra.sweep.subdir}"))
            jobs.append(Job(num, overrides, cfg, run_dir))
        except Exception as err:  # a value that does not fit its key: reported with the others
            jobs.append(Job(num, overrides, None, problems=[f"{' '.join(overrides)}: {err}"]))
    return jobs


def launches_on_slurm(config: DictConfig) -> bool:
    return "slurm" in str(config.hydra.launcher.get("_target_", "")).lower()


SUBMITTING = "hydra_plugins.plasticity_launcher."
"""Where the launchers that submit only what is not done live (Hydra loads launchers only from there)."""
_PLANNED: dict[tuple[str, ...], Job] = {}


def submits(config: DictConfig) -> bool:
    """The launch goes through one of :mod:`plasticity.launcher`'s submitting launchers."""
    return str(config.hydra.launcher.get("_target_", "")).startswith(SUBMITTING)


def hand_over(jobs: list[Job]) -> None:
    """Keeps the checked plan for the launcher, which runs next in this process."""
    _PLANNED.clear()
    _PLANNED.update((tuple(job.overrides), job) for job in jobs)


def planned(overrides: list[str] | tuple[str, ...]) -> Job | None:
    """The checked job of these overrides (None when the sweep's plan does not hold it)."""
    return _PLANNED.get(tuple(overrides))


def is_done(job: Job | None) -> bool:
    """The job's run is finished (done or diverged) with the same config and ``sweep.skip_done`` is
    true: a submitting launcher leaves it out."""
    if job is None or job.cfg is None or getattr(job.state, "kind", None) != "same":
        return False
    return bool(job.cfg.sweep.get("skip_done", True))


def submission_split(jobs: list[Job]) -> tuple[list[Job], list[Job]]:
    """``(skipped, submitted)``: what a submitting launcher leaves out and what it submits."""
    return [job for job in jobs if is_done(job)], [job for job in jobs if not is_done(job)]


def split_line(skipped: int, submitted: int, dry: bool = False) -> str:
    """The line a submitting launcher prints (and the dry run, in the conditional)."""
    if dry:
        return f"would skip {skipped} done runs, submit {submitted}"
    return f"skipped {skipped} done runs, submitting {submitted}"


# ----------------------------------------------------------------------------------- checking


def check(job: Job, local: bool) -> Job:
    """Fills ``job.problems`` (config validation, then a conflict with a finished run) and ``job.state``."""
    from plasticity.recipes import get, validate
    from plasticity.runs.state import conflict_message, inspect_run

    if job.cfg is None:
        return job
    job.problems += validate(job.cfg, local=local)  # an unknown task is one of the problems
    if job.problems:
        return job
    recipe = get(job.cfg.task.name)
    if recipe.always_run:  # rebuilt at every launch: no state to inspect
        return job
    job.state = inspect_run(job.run_dir, job.cfg, recipe.sections)
    if job.state.kind == "conflict" and not job.cfg.sweep.get("overwrite", False):
        job.problems.append(conflict_message(job.run_dir, job.state))
    return job


def mark_validated(jobs: list[Job]) -> None:
    """Jobs that run in this process need not validate again."""
    from plasticity.validate import VALIDATED

    VALIDATED.update(str(job.run_dir) for job in jobs if job.run_dir is not None)


def stop_on_problems(jobs: list[Job]) -> None:
    bad = [job for job in jobs if job.problems]
    if not bad:
        return
    if len(jobs) == 1:
        print_problems(bad[0].problems)
        raise SystemExit(1)
    varying = varying_keys(jobs)
    lines = [f"job {job.num} ({job_overrides(job.overrides, varying)}): {p}" for job in bad for p in job.problems]
    print_problems(lines, header=f"{len(bad)} of {len(jobs)} jobs have")
    raise SystemExit(1)


# ----------------------------------------------------------------------------------- dry run


STATUS = {"new": "to run", "same": "done (skip)", "resume": "to resume", "failed": "failed (re-run)",
          "running": "running", "conflict": "conflict"}


def status_of(job: Job) -> str:
    """The job's row status in the dry run (a done run is re-run when ``sweep.skip_done=false``)."""
    kind = getattr(job.state, "kind", "")
    if kind == "same" and not is_done(job):
        return "done (re-run)"
    return STATUS.get(kind, "to run")


def dry_run(jobs: list[Job], started: float, submitting: bool = False) -> None:
    """Prints one row per job (run dir, status, data, weights, other problems), each missing input's
    message once, and a count per status; creates nothing.

    Args:
        jobs: The checked jobs.
        started: ``time.perf_counter()`` at the start of the checks.
        submitting: A submitting launcher would run them: also print its split (what it would skip
            and submit, :func:`submission_split`).
    """
    from rich.table import Table

    from plasticity.validate import inputs_status

    table = Table(title=f"dry run: {len(jobs)} jobs (nothing created, no model or data loaded)")
    for column in ("job", "run dir", "status", "data", "weights", "other problems"):
        table.add_column(column)
    counts: dict[str, int] = {}
    inputs: dict[str, None] = {}
    for job in jobs:
        data, weights = inputs_status(job.cfg) if job.cfg is not None else ("?", "?")
        missing = [text for text in (data, weights) if text not in ("ok", "hub", "random init", "?")]
        inputs.update(dict.fromkeys(missing))
        other = [p for p in job.problems if not any(p in text for text in missing)]
        status = "rejected" if other else status_of(job)
        counts[status] = counts.get(status, 0) + 1
        for name, text in (("data missing", data), ("weights unusable", weights)):
            counts[name] = counts.get(name, 0) + (text in missing)
        table.add_row(str(job.num), str(_relative(job.run_dir)), status, "ok" if data == "ok" else "MISSING",
                      weights if weights in ("ok", "hub", "random init") else "BAD", escape("; ".join(other)) or "-")
    con = console()
    con.print(table)
    for text in inputs:
        con.print(f"  - {text}", markup=False, highlight=False)
    todo = sum(counts.get(k, 0) for k in ("to run", "to resume", "failed (re-run)", "done (re-run)"))
    parts = [f"dry run: {len(jobs)} jobs, {todo} to run"] + [f"{k} {v}" for k, v in counts.items() if v and k != "to run"]
    con.print(" | ".join(parts + [f"checked in {time.perf_counter() - started:.1f} s"]), highlight=False)
    if submitting:
        skipped, submitted = submission_split(jobs)
        con.print(f"dry run: the launcher {split_line(len(skipped), len(submitted), dry=True)}", highlight=False)


def _relative(path: Path | None) -> Path | str:
    if path is None:
        return "?"
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def varying_keys(jobs: list[Job]) -> list[str]:
    """The override keys whose value is not the same in every job."""
    shared = {o for o in jobs[0].overrides if all(o in j.overrides for j in jobs)}
    return sorted({o.split("=", 1)[0] for job in jobs for o in job.overrides if o not in shared})


# ----------------------------------------------------------------------------------- callback


class SweepSummary(Callback):
    """Checks every job before any runs, journals multirun jobs, prints the sweep's summary."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        started = time.perf_counter()
        job = Job(0, list(config.hydra.overrides.task), config, Path(os.path.abspath(str(config.hydra.run.dir))))
        check(job, local=True)
        if config.sweep.get("dry_run", False):
            dry_run([job], started)
            raise SystemExit(0)
        stop_on_problems([job])
        mark_validated([job])

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        started = time.perf_counter()
        jobs = [check(job, local=not launches_on_slurm(config)) for job in plan(config, kwargs.get("config_name"))]
        if config.sweep.get("dry_run", False):
            dry_run(jobs, started, submitting=submits(config))
            raise SystemExit(0)
        stop_on_problems(jobs)
        mark_validated(jobs)  # the basic launcher runs the jobs in this process; others validate on their node
        hand_over(jobs)  # the submitting launchers leave out what is done
        self._print_plan(jobs)
        os.environ[SWEEP_ID] = uuid.uuid4().hex[:12]

    @staticmethod
    def _print_plan(jobs: list[Job]) -> None:
        """The config tree once (the first job's), then which keys vary across the jobs."""
        from plasticity.recipes import get, tree_sections

        first = jobs[0].cfg
        if first.get("print_config", True):
            print_config_tree(first, tree_sections(get(first.task.name)), title=f"config (job 0 of {len(jobs)})")
        varying = varying_keys(jobs)
        os.environ[VARYING] = ",".join(varying)
        console().print(f"{len(jobs)} jobs" + (f", varying {', '.join(varying)}" if varying else ""), highlight=False)

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        sweep_id = os.environ.get(SWEEP_ID)
        hydra_cfg = HydraConfig.get()
        if not sweep_id or hydra_cfg.mode != RunMode.MULTIRUN or not is_rank_zero():  # rank 0 journals a DDP run
            return
        if job_return.status == JobStatus.COMPLETED and isinstance(job_return.return_value, dict):
            record = job_return.return_value
        else:  # the task function itself raised: should not happen, recorded all the same
            record = {"status": "failed", "error": repr(job_return._return_value),
                      "run_dir": hydra_cfg.runtime.output_dir}
        journal(hydra_cfg.sweep.dir, hydra_cfg.job.num, record)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_id = os.environ.pop(SWEEP_ID, None)
        os.environ.pop(VARYING, None)
        _PLANNED.clear()
        if not sweep_id:
            return
        folder = journal_dir(config.hydra.sweep.dir, sweep_id)
        records = [r for p in sorted(folder.glob("*.json")) if (r := read_json(p))]
        con = console()
        con.print(results_table(records, title=f"sweep {sweep_id}: {len(records)} runs"))
        counts = {s: sum(r.get("status") == s for r in records) for s in ("done", "diverged", "failed", "running",
                                                                           "rejected")}
        skipped = sum(bool(r.get("skipped")) and r.get("status") != "running" for r in records)
        con.print(f"done {counts['done']} (skipped {skipped}) | diverged {counts['diverged']} | failed "
                  f"{counts['failed']} | running elsewhere {counts['running']} | rejected {counts['rejected']} | "
                  f"journal {folder}", highlight=False)
        failed = [r for r in records if r.get("status") in ("failed", "rejected")]
        for r in failed:
            con.print(f"[red]{r.get('status')}[/red] " + escape(f"{r.get('run_dir')}: {r.get('error')}"), highlight=False)
        if failed:
            raise SystemExit(1)

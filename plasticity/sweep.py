"""A multirun's jobs, what each run directory holds, and the sweep's journal and summary.

- :func:`plan` composes every job of a sweep from its overrides (:func:`expand`, in the order of
  Hydra's basic sweeper, which numbers the jobs) and :func:`inspect_job` reads its run directory. The
  pre-launch check (:mod:`plasticity.prelaunch`) and the submitting launchers
  (:mod:`plasticity.launcher`) both plan with them; :func:`submission_split` is what a submitting
  launcher leaves out (finished runs of the same config).
- :class:`SweepSummary` (a Hydra callback, registered in ``conf/config.yaml``) journals each job's
  record under ``<sweep dir>/.sweeps/<id>/`` and, when the sweep ends, prints one row per job and
  exits non-zero naming the failed runs.
"""

from __future__ import annotations

import itertools
import logging
import os
import pickle
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict
from rich.markup import escape

from plasticity.console import console, results_table
from plasticity.runs.io import read_json, write_json_atomic
from plasticity.runs.ranks import is_rank_zero

log = logging.getLogger(__name__)
# What the launching process hands its jobs. Through the environment because the jobs of a submitit
# launcher are other processes (local, or on SLURM nodes: sbatch exports the environment), which
# inherit it and nothing else; the basic launcher's in-process jobs read the same.
SWEEP_ID = "PLASTICITY_SWEEP_ID"
"""The sweep's id: where each job journals its record."""
VARYING = "PLASTICITY_SWEEP_VARYING"
"""The override keys that vary across the sweep's jobs: what each job's first line shows."""


@dataclass
class Job:
    """One job of a launch, as the launcher will run it.

    Attributes:
        num: Its position in the sweep (Hydra's ``job.num``).
        overrides: Its command-line overrides.
        cfg: Its composed config (with the ``hydra`` node); None when it does not compose.
        run_dir: Its run directory.
        problems: Every problem found before compute.
        state: What its run directory holds (a :class:`plasticity.runs.state.RunState`).
    """

    num: int
    overrides: list[str]
    cfg: DictConfig | None
    run_dir: Path | None = None
    problems: list[str] = field(default_factory=list)
    state: Any = None


# ----------------------------------------------------------------------------------- planning


def expand(config: DictConfig) -> list[list[str]]:
    """The overrides of each job of a multirun, in the order of Hydra's basic sweeper (hydra-core 1.3,
    ``BasicSweeper.split_arguments``), which gives the jobs their numbers.

    The sweeper's own ``params`` come first, then the command line's overrides; a later override of
    a key replaces an earlier one in the earlier one's place; the jobs are the product of the keys'
    values, the first key varying slowest.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    # resolve=False: an override's value is text for Hydra to parse (``seed=${oc.env:S}``), not ours to resolve.
    params += OmegaConf.to_container(config.hydra.overrides.task, resolve=False)
    values: dict[str, list[str]] = {}  # insertion-ordered: a replaced key keeps its first place, as in Hydra
    for override in OverridesParser.create().parse_overrides(params):
        key = override.get_key_element()
        if not override.is_sweep_override():
            values[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            values[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:  # interval sweeps are for optimising sweepers; Hydra's basic sweeper says the same
            raise HydraException(f"BasicSweeper does not support sweep type : {override.value_type.name}")
    return [list(job) for job in itertools.product(*values.values())]


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
            # A group choice (model=..., +experiment=...) or a key inside a group's package changes what
            # is composed; a plain value is set afterwards on a copy of the shared composition.
            plain = override.type == OverrideType.CHANGE and key not in self.choices and "/" not in key
            (values if plain else groups).append((text, override))
        key = tuple(text for text, _ in groups)
        if key not in self.cache:
            self.cache[key] = compose(self.config_name, overrides=list(key), return_hydra_config=True)
        # A pickle round trip is the same deep copy as DictConfig.copy(), three times faster (it skips
        # OmegaConf's per-node __deepcopy__): the dry run of a 1,848-job grid makes one per job.
        cfg = pickle.loads(pickle.dumps(self.cache[key]))
        for text, override in values:
            OmegaConf.update(cfg, override.key_or_group, override.value(), merge=True)
        with open_dict(cfg.hydra):
            cfg.hydra.overrides.task = overrides
        return cfg


def plan(config: DictConfig, overrides: Sequence[Sequence[str]] | None = None, first_num: int = 0) -> list[Job]:
    """Jobs with their composed config and run directory (nothing is read or written).

    Args:
        config: The launch's config (Hydra's, with the ``hydra`` node).
        overrides: Each job's overrides; None: every job of the sweep (:func:`expand`).
        first_num: The sweep number of the first job (a launcher's batch may start later).
    """
    composer = Composer(config.hydra.job.config_name, set(config.hydra.runtime.choices.keys()))
    jobs = []
    for num, job_overrides in enumerate(expand(config) if overrides is None else overrides, start=first_num):
        job_overrides = list(job_overrides)
        try:
            cfg = composer.compose(job_overrides)
            # hydra/launcher=... is an override of the launch, not of a job: each job runs under it (its
            # DDP check reads it).
            with open_dict(cfg.hydra):
                cfg.hydra.launcher = config.hydra.launcher
            run_dir = Path(os.path.abspath(f"{cfg.hydra.sweep.dir}/{cfg.hydra.sweep.subdir}"))
            jobs.append(Job(num, job_overrides, cfg, run_dir))
        except Exception as err:  # a value that does not fit its key: reported with the others
            jobs.append(Job(num, job_overrides, None, problems=[f"{' '.join(job_overrides)}: {err}"]))
    return jobs


def inspect_job(job: Job) -> Job:
    """Sets ``job.state``: what its run directory holds for its config (read only, no lock taken).

    A job that does not compose, names no task, or whose task is rebuilt at every launch
    (``always_run``) keeps ``state`` None.
    """
    from plasticity.recipes import get, names
    from plasticity.runs.state import inspect_run

    if job.cfg is None or job.cfg.task.get("name") not in names():
        return job
    recipe = get(job.cfg.task.name)
    if not recipe.always_run:
        job.state = inspect_run(job.run_dir, job.cfg, recipe.sections)
    return job


def is_done(job: Job) -> bool:
    """The job's run is finished (done or diverged) with the same config and ``sweep.skip_done`` is
    true: a submitting launcher leaves it out."""
    if job.cfg is None or getattr(job.state, "kind", None) != "finished":
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


def varying_keys(jobs: list[Job]) -> list[str]:
    """The override keys whose value is not the same in every job."""
    shared = {o for o in jobs[0].overrides if all(o in j.overrides for j in jobs)}
    return sorted({o.split("=", 1)[0] for job in jobs for o in job.overrides if o not in shared})


def sweep_varying() -> list[str] | None:
    """In a sweep's job: the keys that vary across the sweep (None outside a sweep)."""
    text = os.environ.get(VARYING)
    return None if text is None else text.split(",")


# ----------------------------------------------------------------------------------- journal


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
        write_json_atomic(path, record)  # atomic: the summary may read the folder while jobs still write


class SweepSummary(Callback):
    """Journals each multirun job's record, then prints the sweep's summary."""

    def __init__(self) -> None:
        self.sweep_id: str | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.sweep_id = uuid.uuid4().hex[:12]
        os.environ[SWEEP_ID] = self.sweep_id  # for the jobs, which may be other processes (see SWEEP_ID)

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        hydra_cfg = HydraConfig.get()
        # Runs in the job's process. Rank 0 alone journals a DDP run: the other ranks record nothing.
        if hydra_cfg.mode != RunMode.MULTIRUN or not is_rank_zero():
            return
        try:  # return_value re-raises what the task function raised (run_job records its own failures)
            record = job_return.return_value
        except Exception as err:
            record = err
        if not isinstance(record, dict):  # should not happen: recorded all the same
            record = {"status": "failed", "error": repr(record), "run_dir": hydra_cfg.runtime.output_dir}
        journal(hydra_cfg.sweep.dir, hydra_cfg.job.num, record)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        os.environ.pop(SWEEP_ID, None)  # a later launch in this process is another sweep
        if not self.sweep_id:
            return
        folder = journal_dir(config.hydra.sweep.dir, self.sweep_id)
        records = [r for p in sorted(folder.glob("*.json")) if (r := read_json(p))]
        con = console()
        con.print(results_table(records, title=f"sweep {self.sweep_id}: {len(records)} runs"))
        counts = {s: sum(r.get("status") == s for r in records) for s in ("done", "diverged", "interrupted", "failed",
                                                                           "running", "rejected")}
        skipped = sum(bool(r.get("skipped")) and r.get("status") != "running" for r in records)
        con.print(f"done {counts['done']} (skipped {skipped}) | diverged {counts['diverged']} | interrupted "
                  f"{counts['interrupted']} (relaunch to resume) | failed "
                  f"{counts['failed']} | running elsewhere {counts['running']} | rejected {counts['rejected']} | "
                  f"journal {folder}", highlight=False)
        failed = [r for r in records if r.get("status") in ("failed", "rejected", "interrupted")]
        for r in failed:
            con.print(f"[red]{r.get('status')}[/red] " + escape(f"{r.get('run_dir')}: {r.get('error')}"),
                      highlight=False)
        if failed:  # the launch's exit code says a run failed
            raise SystemExit(1)

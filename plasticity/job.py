"""The launch path, from the command line to ``Trainer.fit``, in five stages; this module is the last two.

1. **Compose** (Hydra, ``@hydra.main`` in ``launch.py``): an override that names no config key stops
   with the closest key (:func:`plasticity.cli.explain`, only when Hydra's composition failed).
2. **Plan** (:class:`plasticity.sweep.PlanSweeper` for a multirun, :class:`plasticity.prelaunch.RunCheck`
   for a single run, before Hydra creates any folder): each job composed once, validated once and,
   in a multirun, its run directory inspected once; any problem in any job stops the launch with
   all of them listed, nothing written. ``sweep.dry_run=true`` lists the jobs instead.
3. **Launch** (:mod:`plasticity.sweep`): the runs finished with the same config are left out; the
   others run in this process from their planned configs, or go out as one SLURM (or submitit
   local) job array, each keeping its number. The sweeper journals each job's record and prints
   the summary, exiting non-zero naming the failed runs.
4. **Own the run directory** (:func:`run_job`, in the job's process): lock it (a second launch of a
   run in progress says where it runs and touches nothing), confirm the plan's inspection (or
   inspect it: a single run, a job in another process, which also validates, with the device checks
   on a SLURM node), then skip a run finished with the same config, refuse to touch a finished or
   interrupted run of another config unless ``sweep.overwrite=true`` (which moves it aside), or
   resume an interrupted run of the same config. A rejected job writes nothing and removes the
   empty folder Hydra made for it. A non-zero rank of a DDP run takes no lock, inspects and writes
   nothing (:mod:`plasticity.runs.ranks`): it waits for rank 0's decision and runs stage 5 (from
   the same checkpoint) or stops.
5. **Run the recipe** (:func:`run_recipe_and_record`): ``config.yaml``, the started marker and
   ``launch.log``, then the recipe's ``run()`` (e.g. :meth:`plasticity.recipes.finetune.Finetune.fit`
   builds the model, data, module and trainer, announces rank 0's decision and calls ``Trainer.fit``).

Whatever happened, ``result.json`` is then written atomically: ``done``, ``diverged`` (NaN/inf loss),
``interrupted`` (a stop signal or storage that gave out, with the step reached: the relaunch resumes)
or ``failed`` (any other exception, with its message). In a multirun a failure is recorded and the
sweep goes on.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import signal
import socket
import time
import traceback
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from rich.markup import escape

from plasticity.console import console, job_overrides, print_config_tree, print_problems, run_line
from plasticity.errors import USER_ERRORS
from plasticity.runs import CONFIG_FILE, ERROR_FILE, RESULT_FILE, STARTED_FILE, RunLock, config_hash, write_json_atomic
from plasticity.runs.ranks import announce, await_decision, conclude, global_rank, is_rank_zero, num_nodes
from plasticity.runs.state import archive_run, clear_stale, confirm, conflict_message
from plasticity.runs.stop import INTERRUPTED, Interrupted, recording_signals, storage_fault
from plasticity.validate import model_modality

log = logging.getLogger(__name__)
LOG_FILE = "launch.log"


def setup_process(cfg: DictConfig) -> None:
    """Quiets known-harmless library notices that would bury the run's own output; sets torch's threads and
    matmul precision. For a process that runs a recipe."""
    import warnings

    import torch

    for message in (".*isinstance\\(treespec, LeafSpec\\).*", ".*overridden `on_after_batch_transfer`.*",
                    ".*does not have many workers.*", "Experiment logs directory .* exists and is not empty.*",
                    "Checkpoint directory .* exists and is not empty.*", ".*The `srun` command is available.*",
                    ".*`ModelCheckpoint\\(monitor=.*",):
        warnings.filterwarnings("ignore", message=message)
    harmless = ("litlogger", "GPU available:", "TPU available:", "HPU available:", "LOCAL_RANK:", "The `srun` command",
                "You are using a CUDA device", "Restoring states from the checkpoint", "Restored all states",
                "`Trainer.fit` stopped: `max_steps=", "Loaded model weights from the checkpoint",
                "Seed set to", "exists and is not empty", "Initializing distributed", "distributed_backend=",
                "All distributed processes registered")
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).handlers.clear()  # they propagate to the job's own handlers: no double lines
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero",
                 "lightning.pytorch.accelerators.cuda", "lightning.fabric.utilities.seed",
                 "lightning.fabric.utilities.distributed"):
        logging.getLogger(name).addFilter(lambda r: not any(h in r.getMessage() for h in harmless))
    torch.set_num_threads(int(cfg.threads or torch.get_num_threads()))  # threads: null keeps torch's
    torch.set_float32_matmul_precision(cfg.matmul_precision)


class RunLogHandler(logging.FileHandler):
    """``launch.log``'s handler: once its disk is full it drops lines silently (the console still
    shows them) instead of printing a traceback for every line, as logging does by default."""

    def handleError(self, record: logging.LogRecord) -> None:
        return  # the line is lost from launch.log only; the run's record says why it stopped


def remove_if_empty(run_dir: Path, stop: Path) -> None:
    """Removes ``run_dir`` and its parents up to (not including) ``stop`` while they are empty:
    the folders Hydra created for a job that was then rejected."""
    path, stop = run_dir.resolve(), stop.resolve()
    with contextlib.suppress(OSError):  # rmdir fails on a folder that holds anything: nothing but empty folders goes
        while path != stop and stop in path.parents:
            path.rmdir()
            path = path.parent


def reject(problems: list[str], run_dir: Path, multirun: bool, identity: dict) -> dict[str, Any]:
    """Prints every problem; nothing is written, the empty job folder goes away."""
    print_problems(problems)
    remove_if_empty(run_dir, Path(HydraConfig.get().sweep.dir if multirun else Path.cwd()))
    if not multirun:
        raise SystemExit(1)
    return {**identity, "run_dir": str(run_dir), "status": "rejected", "error": "; ".join(problems)}


def run_job(cfg: DictConfig, plan: Any = None) -> dict[str, Any]:
    """Runs the task of one job in its run directory (stages 4 and 5 of the module docstring).

    Args:
        cfg: The job's config.
        plan: Its planned :class:`plasticity.sweep.Job` (validated, run directory inspected), when the
            launcher runs it in the process that planned it.

    Returns:
        The job's record (also the Hydra job's return value; the sweep summary reads it).

    Raises:
        SystemExit: with code 1 when a single (non-multirun) job is rejected, conflicts or fails.
    """
    from plasticity.recipes import get, names, validate

    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    task = cfg.get("task", {}).get("name")
    recipe = get(str(task)) if task in names() else None  # an unknown task is rejected below
    identity = recipe.identity(cfg) if recipe else {"task": task}
    if recipe is not None and not is_rank_zero():
        return run_as_follower_rank(cfg, recipe, run_dir, identity)
    nodes = num_nodes(cfg)
    # Checked already by the plan, or (a single run) by RunCheck in this process.
    problems = validate(cfg, local=True) if multirun and plan is None else []
    lock = RunLock(run_dir)
    # Every stop is announced: ranks started beside this one (srun tasks) wait for a decision.
    if problems or not lock.acquire():  # no lock is taken for a rejected job
        announce(run_dir, "stop", num_nodes=nodes)
        return (reject(problems, run_dir, multirun, identity) if problems
                else skip_running(run_dir, identity, lock.holder))
    try:
        return decide_and_run(cfg, recipe, run_dir, identity, multirun, getattr(plan, "state", None))
    finally:
        try:
            conclude(run_dir, num_nodes=nodes)  # ranks still waiting (no training started) stop too
        except OSError as err:  # the disk gave out (the record says so); a later launch's ranks match by token
            log.warning("could not remove rank 0's decision file from %s (%s)", run_dir, err)
        lock.release()  # last: a launch that takes the lock next must not see this one's decision file go


def run_as_follower_rank(cfg: DictConfig, recipe, run_dir: Path, identity: dict) -> dict[str, Any]:
    """A non-zero rank of a distributed run: rank 0's decision, then the recipe, writing nothing.

    Rank 0 validated the same config, holds the lock and writes every record; this process runs
    the recipe's training and test alongside it (Lightning writes checkpoints and logs from rank 0
    only) and returns what it did, which no one records. A divergence, seen by every rank at the same
    step, ends it quietly; any other error ends the process with it (Lightning then stops the others).
    """
    decision = await_decision(run_dir)
    record = {**identity, "run_dir": str(run_dir), "status": "follower", "rank": global_rank()}
    if decision["action"] != "run":
        log.info("rank %d: rank 0 decided %s for %s", record["rank"], decision["action"], run_dir)
        return {**record, "skipped": True}
    setup_process(cfg)
    from plasticity.module import Diverged

    job = recipe(cfg, run_dir, resume=decision.get("resume"))  # rank 0's checkpoint: every rank resumes there
    try:
        job.run()
    except Diverged:  # every rank sees the same (all-reduced) loss; rank 0 records it
        return {**record, "diverged": True}
    return record


def skip_running(run_dir: Path, identity: dict, holder: dict) -> dict[str, Any]:
    """The run is in progress in another process (its lock's holder): say where, touch nothing."""
    where = ", ".join(f"{k} {v}" for k, v in holder.items()) or "another process"
    console().print(f"[yellow]running[/yellow] {run_dir}: in progress elsewhere ({where}); skipped, nothing touched",
                    highlight=False)
    return {**identity, "run_dir": str(run_dir), "status": "running", "holder": holder, "skipped": True}


def decide_and_run(cfg: DictConfig, recipe, run_dir: Path, identity: dict, multirun: bool,
                   planned: Any = None) -> dict[str, Any]:
    """Under the run's lock: skip, refuse, resume or run (``planned``: the plan's inspection)."""
    if recipe.always_run:  # rebuilt at every launch (report, prepare, inspect_data)
        return run_recipe_and_record(cfg, recipe, run_dir, identity, multirun)
    state = confirm(planned, run_dir, cfg, recipe.sections)
    if state.kind == "finished":
        if cfg.sweep.skip_done:
            log.info("skipping %s: already %s with this config (sweep.skip_done=true)", run_dir, state.record["status"])
            return {**state.record, "run_dir": str(run_dir), "skipped": True}
        log.warning("sweep.skip_done=false: the finished run moved to %s", archive_run(run_dir))
    elif state.kind == "conflict":
        if not cfg.sweep.overwrite:
            return reject([conflict_message(run_dir, state)], run_dir, multirun, identity)
        log.warning("sweep.overwrite=true: the earlier run moved to %s", archive_run(run_dir))
    elif state.kind == "failed" and state.diff:
        clear_stale(run_dir)  # what a failed run of another config left must not be resumed
    return run_recipe_and_record(cfg, recipe, run_dir, identity, multirun)


def open_run_dir(cfg: DictConfig, recipe, run_dir: Path, multirun: bool, chash: str) -> logging.Handler:
    """Writes the config and the started marker, opens ``launch.log``, prints what runs.

    Returns:
        The ``launch.log`` handler, for the caller to close when the run ends.
    """
    from plasticity.recipes import tree_sections

    OmegaConf.save(cfg, run_dir / CONFIG_FILE, resolve=True)
    hydra_cfg = HydraConfig.get()
    # The started marker: with no result.json beside it, the next launch knows the run was interrupted.
    write_json_atomic(run_dir / STARTED_FILE, {
        "config_hash": chash, "started": time.time(), "host": socket.gethostname(),
        "overrides": list(hydra_cfg.overrides.task)})
    handler = RunLogHandler(run_dir / LOG_FILE)
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    logging.getLogger().addHandler(handler)
    if multirun:  # the keys that vary across the sweep: an override the sweeper gives each job
        overrides = job_overrides(list(hydra_cfg.overrides.task), hydra_cfg.sweeper.get("varying"))
        console().print(f"[bold]job {hydra_cfg.job.num}[/bold] " + escape(f"{overrides} -> {run_dir}"), highlight=False)
    elif cfg.print_config:
        print_config_tree(cfg, tree_sections(recipe))
    return handler


def run_recipe_and_record(cfg: DictConfig, recipe, run_dir: Path, identity: dict, multirun: bool) -> dict[str, Any]:
    """Runs the recipe and writes ``result.json`` whatever happens, where the disk allows.

    A stop signal or storage that gives out records ``interrupted`` with the step reached (the
    relaunch resumes); a signal then ends the process with the signal's exit code, so a sweep
    stops with it.
    """
    setup_process(cfg)
    record: dict[str, Any] = {**identity, "modality": model_modality(cfg), "run_dir": str(run_dir)}
    chash = config_hash(cfg, recipe.sections)
    started = time.perf_counter()
    job, handler, stop = None, None, None
    with recording_signals() as received:
        try:
            handler = open_run_dir(cfg, recipe, run_dir, multirun, chash)
            job = recipe(cfg, run_dir)
            record.update(job.run())
            record["status"] = "done"
        except (Interrupted, SystemExit) as err:
            if isinstance(err, SystemExit) and not received:  # an exit no signal asked for is not ours to record
                raise
            stop = err  # SystemExit: submitit's requeue handler exits after SLURM's signal (noted first)
            # Every signal, in order: SLURM's time-limit USR2 (submitit requeues) is followed by its SIGTERM.
            why = f"stopped by {', then '.join(dict.fromkeys(signal.Signals(s).name for s in received))}"
            record.update(status=INTERRUPTED, error=why, **progress(job))
            log.warning("run interrupted (%s); a relaunch resumes it from its last checkpoint", why)
        except Exception as err:  # recorded, so the sweep goes on
            record.update(record_failure(err, run_dir, job))
        finally:
            if handler is not None:
                logging.getLogger().removeHandler(handler)  # the next job of an in-process sweep logs to its own file
                handler.close()
    record.update(wall_s=round(time.perf_counter() - started, 2), config_hash=chash)
    finish_wandb(record, cfg)
    write_record(run_dir, record)
    if record["status"] == "done":
        job.delete_checkpoints()  # after the record: a finished run is never left without one
    console().print(run_line(record), highlight=False)
    if stop is not None:
        raise stop if isinstance(stop, SystemExit) else SystemExit(stop.exit_code)
    if record["status"] in ("failed", INTERRUPTED) and not multirun:  # a single run that did not finish: exit 1
        raise SystemExit(1)
    return record


def record_failure(err: Exception, run_dir: Path, job) -> dict[str, Any]:
    """The record's fields for a run that raised ``err``: ``diverged``, ``interrupted`` (the
    storage gave out: one line naming the path and the cause) or ``failed`` (its traceback in
    ``error.log``)."""
    from plasticity.module import Diverged

    if isinstance(err, Diverged):
        log.warning("run diverged: %s", err)
        return {"status": "diverged", "error": str(err)}
    fault = storage_fault(err, run_dir)
    if fault is not None:  # the disk, not the run: nothing to debug, a relaunch with room resumes
        log.error("run stopped: %s. Fix: free space (or make %s writable), then relaunch: it resumes from the last "
                  "complete checkpoint.", fault, run_dir)
        return {"status": INTERRUPTED, "error": fault, **progress(job)}
    try:
        (run_dir / ERROR_FILE).write_text(traceback.format_exc())
    except OSError as write_err:
        log.error("could not write %s (%s)", run_dir / ERROR_FILE, write_err)
    if isinstance(err, USER_ERRORS):  # a bad input: its message says the fix, a traceback would bury it
        log.error("%s", err)
    else:
        log.exception("run failed")
    return {"status": "failed", "error": f"{type(err).__name__}: {err}"}


def progress(job) -> dict[str, Any]:
    """Where a stopped run got to (the recipe's ``progress``; empty before the recipe was built)."""
    report = getattr(job, "progress", None)
    return report() if callable(report) else {}


def write_record(run_dir: Path, record: dict[str, Any]) -> None:
    """``result.json``, atomically; on storage that gives out, one line saying it could not be written
    (the run then reads as interrupted: started, never recorded)."""
    try:
        if not run_dir.is_dir():  # deleted while the run went on: not made again for a record alone
            raise FileNotFoundError(errno.ENOENT, "the run folder vanished", str(run_dir))
        write_json_atomic(run_dir / RESULT_FILE, record)  # last: result.json present means the run ended
    except OSError as err:
        fault = storage_fault(err, run_dir) or f"{type(err).__name__}: {err}"
        console().print(f"[red]could not record the run[/red] in {escape(str(run_dir))}: {escape(fault)}",
                        highlight=False)


def finish_wandb(record: dict[str, Any], cfg: DictConfig) -> None:
    """Ends the process's W&B run (if any) with the job's outcome in its summary, so the next job
    of a multirun starts its own (:func:`plasticity.tracking.logger.finish`)."""
    import sys

    from plasticity.tracking import wandb_enabled

    if "wandb" in sys.modules or wandb_enabled(cfg):  # imported: a logger of this process may have a run open
        from plasticity.tracking.logger import finish

        finish(record, cfg)

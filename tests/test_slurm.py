"""launch.py on a real one-node SLURM with accounting (``slurm_cluster``, tests/slurm_cluster.py).

Every launch is ``python launch.py -m debug=tiny ... hydra/launcher=slurm`` as a subprocess with
``SLURM_CONF`` pointing at the test cluster; the jobs run this venv's Python (submitit's batch
script calls the launching interpreter). Covered: a grid as one job array (array parallelism 2,
then 1), a job requeued with ``scontrol requeue`` and a job past its time limit, both resuming to
the result of an uninterrupted run, a failing and a hard-killed job, and re-submission of only the
runs that are not done (with the dry run's split).

The jobs are CPU runs of a 2-block micro ViT; most of their time is Python's imports. One worker
owns the cluster: ``make test`` runs each test file on one pytest-xdist worker (``--dist loadfile``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest
import torch

from plasticity.runs.lock import lock_holder
from tests.slurm_cluster import PARTITION

ROOT = Path(__file__).resolve().parents[1]
LAUNCH_TIMEOUT_S = 420
GRID = ["component=ln1,mha", "seed=0,42"]
GRID_RUNS = [(c, s) for c in ("ln1", "mha") for s in (0, 42)]  # in the sweep's job order
# 160 train images / 16 = 10 steps an epoch; a validation and last.ckpt every 7 steps, so the first
# checkpoint (where the requeued job resumes) falls inside the first epoch; with augmentation (the
# generators' states are in the checkpoint). The interrupted jobs stop themselves (SIGSTOP) once that
# checkpoint is on the disk (HOLD) and are held there until their signal waits for them: the signal
# lands at step 7 however loaded the machine is, so 30 steps (two epoch ends after the resume) suffice.
LONG = ["component=fc1", "task.max_steps=30", "task.val_every=7", "task.batch_size=16",
        "task.micro_batch_size=16"]
HOLD = ["+callbacks.fault._target_=tests.faults.Kill", "+callbacks.fault.signal=STOP", "+callbacks.fault.at=checkpoint",
        "+callbacks.fault.step=7"]
SETUP_LINE = "setup line ran in job"
FAIL_MHA = ["+callbacks.fault._target_=tests.faults.Fail", "+callbacks.fault.component=${component.name}",
            "+callbacks.fault.fail_for=mha"]


def slurm_args(**keys) -> list[str]:
    """``hydra/launcher=slurm`` on the test node: 1 CPU, no GPU, 1 GB, one setup line."""
    keys = {"partition": PARTITION, "gpus_per_node": 0, "cpus_per_task": 1, "mem_gb": 1, "timeout_min": 60, **keys}
    return (["hydra/launcher=slurm", f'hydra.launcher.setup=["echo {SETUP_LINE} $SLURM_JOB_ID"]']
            + [f"hydra.launcher.{k}={v}" for k, v in keys.items()])


def command(data_dir: Path, *overrides: str, multirun: bool = True) -> list[str]:
    return [sys.executable, str(ROOT / "launch.py"), *(["-m"] if multirun else []), "debug=tiny",
            f"paths.data_dir={data_dir}", *overrides]


def launch(cluster, cwd: Path, data_dir: Path, *overrides: str, **keys) -> subprocess.CompletedProcess:
    """A SLURM multirun from ``cwd``, waited for."""
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run(command(data_dir, *slurm_args(**keys), *overrides), cwd=cwd, env=job_env(cluster),
                          capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S)


def start(cluster, cwd: Path, data_dir: Path, *overrides: str, slurm: bool = True, **keys) -> subprocess.Popen:
    """A launch in the background (output in ``cwd/launch.out``); without ``slurm`` a plain single run."""
    cwd.mkdir(parents=True, exist_ok=True)
    cmd = command(data_dir, *slurm_args(**keys), *overrides) if slurm else command(data_dir, *overrides,
                                                                                   multirun=False)
    with open(cwd / "launch.out", "w") as out:
        return subprocess.Popen(cmd, cwd=cwd, env=job_env(cluster), stdout=out, stderr=subprocess.STDOUT, text=True)


def job_env(cluster) -> dict[str, str]:
    return cluster.env(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", WANDB_MODE="offline")


def finish(proc: subprocess.Popen, cwd: Path) -> tuple[int, str]:
    proc.wait(timeout=LAUNCH_TIMEOUT_S)
    return proc.returncode, (cwd / "launch.out").read_text()


def run_dir(cwd: Path, component: str = "fc1", seed: int = 0) -> Path:
    return cwd / "outputs" / "finetune" / "fashion_mnist" / "vit_micro_patch7_28" / component / "sgd_lr_0.01" / f"seed_{seed}"


def result(path: Path) -> dict:
    return json.loads((path / "result.json").read_text())


def new_arrays(before: set[str], after: set[str]) -> dict[str, list[int]]:
    """The job arrays that appeared: array id -> its task numbers."""
    arrays: dict[str, list[int]] = {}
    for job in sorted(after - before):
        array, _, task = job.partition("_")
        arrays.setdefault(array, []).append(int(task) if task.isdigit() else -1)
    return {array: sorted(tasks) for array, tasks in arrays.items()}


def submitit_log(cwd: Path, job: str) -> str:
    """A job's submitit stdout and stderr, where the README says they are (``job``: ``<id>`` of a
    single job, ``<array id>_<task>`` in an array)."""
    folder = cwd / "outputs" / ".submitit" / job
    return "".join((folder / f"{job}_0_log.{ext}").read_text() for ext in ("out", "err"))


def holder(path: Path, timeout: float, proc: subprocess.Popen) -> dict | None:
    """The job process that holds ``path``'s run lock; None if the launch ended first or ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        found = lock_holder(path)
        if found and isinstance(found.get("pid"), int) and found.get("slurm_job"):
            return found
        time.sleep(0.05)
    return None


def proc_status(pid: int) -> str | None:
    """``/proc/<pid>/status`` (None: the process is gone)."""
    try:
        return Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return None


def stopped(status: str | None) -> bool:
    return status is not None and re.search(r"^State:\s*T", status, flags=re.M) is not None


def ranks(cluster, job: str) -> list[int]:
    """The PIDs of the job's ranks on this node (the tasks of its step 0, srun's)."""
    rows = [line.split() for line in cluster.run("scontrol", "listpids", job, check=False).splitlines()[1:]]
    return [int(row[0]) for row in rows if len(row) > 2 and row[2] == "0"]


def stopped_job(cluster, path: Path, proc: subprocess.Popen, seen: set[int]) -> tuple[dict, list[int]] | None:
    """The lock holder of run ``path`` and its job's ranks once every rank stopped itself (HOLD), a
    holder not in ``seen``; None if the launch ended first."""
    deadline = time.monotonic() + LAUNCH_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        found = lock_holder(path)
        if found and found.get("slurm_job") and found.get("pid") not in seen and stopped(proc_status(found["pid"])):
            pids = ranks(cluster, found["slurm_job"])
            if found["pid"] in pids and all(stopped(proc_status(pid)) for pid in pids):
                return found, pids
        time.sleep(0.05)
    return None


def waiting(pid: int, signum: int) -> bool:
    """``signum`` waits, undelivered, for the stopped process ``pid``, or it runs again (SLURM may
    continue a job before it signals it), or it is gone: nothing left to wait for."""
    status = proc_status(pid)
    if not stopped(status):
        return True
    masks = re.findall(r"^(?:SigPnd|ShdPnd):\s*([0-9a-f]+)$", status, flags=re.M)
    return any(int(mask, 16) & (1 << (signum - 1)) for mask in masks)


def hold(cluster, path: Path, proc: subprocess.Popen, signum: int, timeout_s: float, act=None,
         held: threading.Event | None = None) -> tuple[str | None, str | None]:
    """Holds the job of run ``path`` where its ranks stopped themselves (``held`` is set then): ``act(job)``,
    then continues them once ``signum`` waits for the run's process (it handles the signal at step 7).
    Each next part, resumed at step 7, stops there again and is continued at once. Returns the job and
    what went wrong (None: nothing), once the launch ended."""
    part = stopped_job(cluster, path, proc, set())
    if held is not None:
        held.set()
    if part is None:
        return None, "the launch ended before its job stopped at step 7"
    job, pid, note = part[0]["slurm_job"], part[0]["pid"], None
    if act is not None:
        act(job)
    deadline = time.monotonic() + timeout_s
    while not waiting(pid, signum) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not waiting(pid, signum):
        note = f"no {signal.Signals(signum).name} reached the job within {timeout_s:.0f} s"
    seen = set()
    while part is not None:
        seen.add(part[0]["pid"])
        for rank in part[1]:
            try:
                os.kill(rank, signal.SIGCONT)
            except ProcessLookupError:
                pass
        part = stopped_job(cluster, path, proc, seen)
    return job, note


def requeue(cluster):
    """``scontrol requeue <job>`` (a preemption)."""
    return partial(cluster.run, "scontrol", "requeue")


def weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]


def assert_same_run(a: Path, b: Path) -> None:
    """Two runs ended with the same metrics (every row, the interrupted parts' included) and the same
    trainable weights."""
    from plasticity.report.collect import read_metrics

    ra, rb = result(a), result(b)
    for key in ("best_val_acc", "test_acc", "test_loss", "best_step", "steps"):
        assert ra[key] == rb[key], key
    columns = ["train/loss", "val/acc", "lr"]
    ma, mb = read_metrics(a, columns)[0], read_metrics(b, columns)[0]
    for column in columns:
        assert ma[column][0].tolist() == mb[column][0].tolist() and ma[column][1].tolist() == mb[column][1].tolist()
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


# ------------------------------------------------------------------- the filter, without a cluster


@pytest.mark.parametrize("skip_done", [True, False])
def test_the_sweeper_hands_the_launcher_only_runs_not_done(tmp_path, capsys, skip_done):
    """The sweeper's launch in-process (the plan given, the launcher stubbed): the plan decides, the
    skipped job's record is returned, the others go to the launcher's run_plan with their numbers."""
    from hydra.core.utils import JobReturn, JobStatus
    from omegaconf import OmegaConf

    from plasticity import sweep
    from plasticity.runs.state import RunState

    cfg = OmegaConf.create({"sweep": {"skip_done": skip_done}})
    done = {"status": "done", "test_acc": 0.5, "component": "ln1"}
    plan = [sweep.Job(0, ["seed=0"], cfg, tmp_path / "a", state=RunState("finished", done)),
            sweep.Job(1, ["seed=1"], cfg, tmp_path / "b", state=RunState("new")),
            sweep.Job(2, ["seed=2"], cfg, tmp_path / "c", state=RunState("resume"))]
    submitted: list[tuple[int, list[str]]] = []

    class Launcher:
        def run_plan(self, todo, extra):
            submitted.extend((job.num, job.overrides + [extra]) for job in todo)
            returns = {job.num: JobReturn(status=JobStatus.COMPLETED) for job in todo}
            for num, ret in returns.items():
                ret.return_value = {"status": "done", "num": num}  # through the public setter
            return returns

    sweeper = sweep.PlanSweeper()
    sweeper.launcher = Launcher()
    returns = sweeper.launch(plan, "hydra.sweeper.varying=['seed']")
    if skip_done:
        assert "skipped 1 done runs, submitting 2" in capsys.readouterr().out
        assert submitted == [(1, ["seed=1", "hydra.sweeper.varying=['seed']"]),
                             (2, ["seed=2", "hydra.sweeper.varying=['seed']"])]
        assert returns[0].return_value == {**done, "run_dir": str(tmp_path / "a"), "skipped": True}
    else:
        assert "skipped 0 done runs, submitting 3" in capsys.readouterr().out
        assert [num for num, _ in submitted] == [0, 1, 2] and returns[0].return_value["num"] == 0
    assert [r.return_value.get("num") for r in returns[1:]] == [1, 2]


def test_a_signal_during_a_stop_is_noted_not_raised_mid_record():
    """SLURM's SIGTERM follows submitit's requeue on the time limit's SIGUSR2 (and a requeue's SIGTERM
    may come twice): once the run stops, a later signal is noted, so the stop is recorded whole."""
    from plasticity.runs.stop import Interrupted, recording_signals

    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: sys.exit(-1))  # submitit's requeue, then exit
    try:
        for first in (signal.SIGTERM, signal.SIGUSR2):
            with recording_signals() as received:
                with pytest.raises((Interrupted, SystemExit)):
                    os.kill(os.getpid(), first)
                os.kill(os.getpid(), signal.SIGTERM)  # while the first stop is recorded: noted only
            assert received == [first, signal.SIGTERM]
    finally:
        signal.signal(signal.SIGUSR2, previous)


# ----------------------------------------------------------------------------- one finished grid


@dataclass
class Grid:
    cwd: Path
    proc: subprocess.CompletedProcess
    arrays: dict[str, list[int]]


@pytest.fixture(scope="module")
def finished_grid(slurm_cluster, data_dir, tmp_path_factory) -> Grid:
    """The 2 x 2 grid launched once as a job array (2 tasks at a time), shared by the tests below."""
    cwd = tmp_path_factory.mktemp("grid")
    before = slurm_cluster.job_ids()
    proc = launch(slurm_cluster, cwd, data_dir, *GRID, array_parallelism=2)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert slurm_cluster.wait_idle() == ""  # the jobs wrote their results; now their processes have ended
    return Grid(cwd, proc, new_arrays(before, slurm_cluster.job_ids()))


@pytest.mark.slow
def test_grid_runs_as_one_job_array(finished_grid, slurm_cluster):
    grid = finished_grid
    assert "skipped 0 done runs, submitting 4" in grid.proc.stdout
    records = [result(run_dir(grid.cwd, c, s)) for c, s in GRID_RUNS]
    assert [(r["status"], r["component"], r["seed"]) for r in records] == [("done", c, s) for c, s in GRID_RUNS]
    assert "done 4 (skipped 0) | diverged 0 | interrupted 0 (relaunch to resume) | failed 0" in grid.proc.stdout
    assert all(f"{100 * r['test_acc']:.2f}" in grid.proc.stdout for r in records)  # the summary table
    ((array, tasks),) = grid.arrays.items()  # one array, four tasks, all completed
    assert tasks == [0, 1, 2, 3]
    assert {row["State"] for t in tasks for row in slurm_cluster.accounting(f"{array}_{t}")} == {"COMPLETED"}
    script = (grid.cwd / "outputs" / ".submitit" / array / f"{array}_submission.sh").read_text()
    assert "#SBATCH --array=0-3%2" in script and "#SBATCH --partition=debug" in script
    for task, (component, seed) in enumerate(GRID_RUNS):  # logs: <sweep dir>/.submitit/<array>_<task>/
        log = submitit_log(grid.cwd, f"{array}_{task}")
        assert SETUP_LINE in log and f"job {task} component={component} seed={seed}" in log
        assert f"done  best val {100 * records[task]['best_val_acc']:.2f}%" in log


@pytest.mark.slow
def test_relaunching_a_finished_grid_submits_nothing(finished_grid, slurm_cluster, data_dir):
    grid = finished_grid
    mtimes = {run: (run_dir(grid.cwd, *run) / "result.json").stat().st_mtime_ns for run in GRID_RUNS}
    logs = sorted(p.name for p in (grid.cwd / "outputs" / ".submitit").iterdir())
    jobs = slurm_cluster.job_ids()
    again = launch(slurm_cluster, grid.cwd, data_dir, *GRID, array_parallelism=2)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "skipped 4 done runs, submitting 0" in again.stdout
    assert "done 4 (skipped 4)" in again.stdout and again.stdout.count("done (skipped)") == 4
    assert slurm_cluster.job_ids() == jobs and slurm_cluster.queued() == ""  # no job at all
    assert sorted(p.name for p in (grid.cwd / "outputs" / ".submitit").iterdir()) == logs
    assert mtimes == {run: (run_dir(grid.cwd, *run) / "result.json").stat().st_mtime_ns for run in GRID_RUNS}
    rerun = launch(slurm_cluster, grid.cwd, data_dir, *GRID, "sweep.skip_done=false", "sweep.dry_run=true")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "the launcher would skip 0 done runs, submit 4" in rerun.stdout and "done (re-run) 4" in rerun.stdout


@pytest.mark.slow
def test_half_finished_grid_submits_only_the_missing_runs(finished_grid, slurm_cluster, data_dir, tmp_path):
    grid = finished_grid
    shutil.copytree(grid.cwd / "outputs", tmp_path / "outputs", ignore=shutil.ignore_patterns(".submitit", ".sweeps"))
    missing = [GRID_RUNS[1], GRID_RUNS[2]]  # jobs 1 and 2 of the sweep
    for run in missing:
        shutil.rmtree(run_dir(tmp_path, *run))
    kept = {run: (run_dir(tmp_path, *run) / "result.json").stat().st_mtime_ns for run in GRID_RUNS if run not in missing}
    dry = launch(slurm_cluster, tmp_path, data_dir, *GRID, "sweep.dry_run=true", array_parallelism=1)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "dry run: 4 jobs, 2 to run | done (skip) 2" in dry.stdout
    assert "the launcher would skip 2 done runs, submit 2" in dry.stdout
    before = slurm_cluster.job_ids()
    proc = launch(slurm_cluster, tmp_path, data_dir, *GRID, array_parallelism=1)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "skipped 2 done runs, submitting 2" in proc.stdout and "done 4 (skipped 2)" in proc.stdout
    ((array, tasks),) = new_arrays(before, slurm_cluster.job_ids()).items()
    assert tasks == [0, 1]  # one array of the two missing runs
    script = (tmp_path / "outputs" / ".submitit" / array / f"{array}_submission.sh").read_text()
    assert "#SBATCH --array=0-1%1" in script
    first, second = (slurm_cluster.accounting(f"{array}_{t}")[-1] for t in tasks)
    assert first["State"] == second["State"] == "COMPLETED"
    assert second["Start"] >= first["End"]  # array parallelism 1: one after the other
    for task, (num, (component, seed)) in enumerate(zip((1, 2), missing)):  # each keeps its sweep number
        assert f"job {num} component={component} seed={seed}" in submitit_log(tmp_path, f"{array}_{task}")
        again, original = result(run_dir(tmp_path, component, seed)), result(run_dir(grid.cwd, component, seed))
        assert again["status"] == "done" and (again["best_val_acc"], again["test_acc"]) == (
            original["best_val_acc"], original["test_acc"])
    assert kept == {run: (run_dir(tmp_path, *run) / "result.json").stat().st_mtime_ns for run in kept}


# ----------------------------------------------------------------- requeue: preemption, time limit


@dataclass
class Interrupted:
    """The same 30-step run three ways, each launched from ``root/<name>``: ``reference``
    (uninterrupted, no SLURM), ``preempted`` (``scontrol requeue`` at its first checkpoint) and
    ``timed_out`` (past a 1-minute time limit)."""

    root: Path
    outcomes: dict[str, tuple[int, str]] = field(default_factory=dict)
    jobs: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    def run(self, name: str) -> Path:
        return run_dir(self.root / name)


@pytest.fixture(scope="module")
def interrupted(slurm_cluster, data_dir, tmp_path_factory) -> Interrupted:
    """The time-limited job first; once it is stopped past its first checkpoint (waiting for its
    signal), the other two run beside it."""
    state = Interrupted(tmp_path_factory.mktemp("interrupted"))
    # A 1-minute limit with the signal 1 s before it: slurmctld checks every 30 s and signals when
    # the limit is within signal_delay_s + 30 s, so USR2 comes 29-59 s after the start (room for
    # Python's imports and the first checkpoint) and at least 30 s before the job is killed.
    procs = {"timed_out": start(slurm_cluster, state.root / "timed_out", data_dir, *LONG, *HOLD, timeout_min=1,
                                signal_delay_s=1, max_num_timeout=3)}
    held = threading.Event()

    def drive(name: str, *args, **kwargs) -> None:
        state.jobs[name], note = hold(slurm_cluster, state.run(name), procs[name], *args, **kwargs)
        if note:
            state.notes[name] = note

    drivers = [threading.Thread(target=drive, args=("timed_out", signal.SIGUSR2, 150), kwargs={"held": held})]
    drivers[0].start()
    held.wait(timeout=LAUNCH_TIMEOUT_S)
    procs["preempted"] = start(slurm_cluster, state.root / "preempted", data_dir, *LONG, *HOLD)
    procs["reference"] = start(slurm_cluster, state.root / "reference", data_dir, *LONG, slurm=False)
    drivers.append(threading.Thread(target=drive, args=("preempted", signal.SIGTERM, 60, requeue(slurm_cluster))))
    drivers[1].start()
    for thread in drivers:
        thread.join()
    state.outcomes = {name: finish(proc, state.root / name) for name, proc in procs.items()}
    return state


def only_job(cwd: Path) -> str:
    """The one job (or array task) a launch submitted: its folder's name under ``.submitit``."""
    (job,) = [p.name for p in (cwd / "outputs" / ".submitit").iterdir() if p.is_dir()]
    return job


@pytest.mark.slow
def test_requeued_job_resumes_to_the_uninterrupted_result(interrupted, slurm_cluster):
    assert interrupted.outcomes["reference"][0] == 0, interrupted.outcomes["reference"][1][-3000:]
    code, out = interrupted.outcomes["preempted"]
    assert code == 0, out[-3000:]
    assert "preempted" not in interrupted.notes, interrupted.notes
    assert re.search(r"\bRestarts=1\b", slurm_cluster.show(interrupted.jobs["preempted"]))  # requeued once
    run = interrupted.run("preempted")
    record = result(run)
    assert record["status"] == "done" and record["resumed"] is True, "the run ended before the requeue landed"
    log = (run / "launch.log").read_text()
    assert "run interrupted (stopped by SIGTERM)" in log  # the requeue's SIGTERM was recorded, then resumed
    assert "resuming an interrupted run from step 7 of 30" in log  # the checkpoint inside the first epoch
    assert (run / "metrics.part0.csv").is_file()  # the same run directory: the first part's metrics kept
    assert "done 1 (skipped 0)" in out
    assert_same_run(interrupted.run("reference"), run)


@pytest.mark.slow
def test_job_past_its_time_limit_is_requeued_and_finishes(interrupted, slurm_cluster):
    code, out = interrupted.outcomes["timed_out"]
    assert code == 0, out[-3000:]
    assert "timed_out" not in interrupted.notes, interrupted.notes
    info = slurm_cluster.show(interrupted.jobs["timed_out"])
    assert "TimeLimit=00:01:00" in info and re.search(r"\bRestarts=[1-3]\b", info)
    log = submitit_log(interrupted.root / "timed_out", only_job(interrupted.root / "timed_out"))
    assert "Caught signal SIGUSR2" in log and "this job is timed-out" in log  # submitit's requeue
    run = interrupted.run("timed_out")
    record = result(run)
    assert record["status"] == "done" and record["resumed"] is True
    log = (run / "launch.log").read_text()
    # Noted, then handed to submitit, which requeued; SLURM's SIGTERM may follow before the exit ends.
    assert "run interrupted (stopped by SIGUSR2" in log
    assert "resuming an interrupted run from step" in log
    assert_same_run(interrupted.run("reference"), run)


# ------------------------------------------------------------------------- failures and hard kills


@pytest.mark.slow
def test_failed_and_killed_jobs_are_recorded_and_the_others_finish(slurm_cluster, data_dir, tmp_path):
    # mha: fails inside its job (tests/faults.py). fc1: its job step is killed with SIGKILL while it
    # runs (stopped first, so that it cannot finish before). ln1: done.
    broken = run_dir(tmp_path, "mha")
    proc = start(slurm_cluster, tmp_path, data_dir, "component=ln1,mha,fc1", *FAIL_MHA, array_parallelism=3)
    killed = holder(run_dir(tmp_path, "fc1"), LAUNCH_TIMEOUT_S, proc)
    assert killed is not None, (tmp_path / "launch.out").read_text()[-3000:]
    os.kill(killed["pid"], signal.SIGSTOP)
    # The step, not the job: ``scancel --signal=KILL <job>`` is a plain cancel (SIGTERM, which
    # submitit ignores, and SIGKILL only after KillWait), after which a short run may still finish.
    slurm_cluster.run("scancel", "--signal=KILL", f"{killed['slurm_job']}.0")
    code, out = finish(proc, tmp_path)  # returns: the killed job does not hang the sweep
    assert code == 1, out[-3000:]
    assert result(run_dir(tmp_path, "ln1"))["status"] == "done"
    bad = result(broken)
    assert bad["status"] == "failed" and "injected failure" in bad["error"]
    assert not (run_dir(tmp_path, "fc1") / "result.json").exists()
    assert "done 1 (skipped 0) | diverged 0 | interrupted 0 (relaunch to resume) | failed 2" in out
    assert f"failed {run_dir(tmp_path, 'fc1')}: job " in out.replace("\n", "")
    (journal,) = (tmp_path / "outputs" / ".sweeps").iterdir()
    record = json.loads((journal / "000002.json").read_text())
    assert record["status"] == "failed" and record["component"] == "fc1"
    assert f"job {record['job_id']} ended without a result (state FAILED" in record["error"]
    assert f"{record['job_id']}_0_log.err" in record["error"]  # names the job's logs
    assert {row["State"] for row in slurm_cluster.accounting(record["job_id"])} == {"FAILED"}


# ------------------------------------------------------------------ one run as 2 ranks through srun

DDP_ENV = ("LOCAL_RANK", "NODE_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PLASTICITY_RANK0_DECISION")
# 160 train images: 10 global steps of 16 an epoch, last.ckpt every 7 steps (inside an epoch); both
# ranks stop themselves there (HOLD) until the requeue's SIGTERM waits. No augmentation: one
# process draws crops for 16 images where each of 2 ranks draws for its 8 (other crops, same order).
DDP_RUN = ["component=fc1", "task.max_steps=30", "task.val_every=7", "task.batch_size=16", "dataset.augment=false"]


@pytest.mark.slow
def test_ddp_job_runs_as_two_srun_ranks_and_resumes_after_a_requeue(slurm_cluster, data_dir, tmp_path, monkeypatch):
    """``hydra.launcher.tasks_per_node=2``: srun starts 2 ranks, Lightning's SLURM environment joins
    them (gloo); the job is requeued past its first checkpoint and ends like one process with the
    same global batch (micro-batch 8 on each of 2 ranks against 16 on one: were rank 1 not in the
    gradient all-reduce, rank 0 would see half the batches and the weights would differ)."""
    for name in DDP_ENV:
        monkeypatch.delenv(name, raising=False)
    reference = start(slurm_cluster, tmp_path / "one", data_dir, *DDP_RUN, "task.micro_batch_size=16", slurm=False)
    ddp = start(slurm_cluster, tmp_path / "ddp", data_dir, *DDP_RUN, *HOLD, "task.micro_batch_size=8", "trainer=cpu",
                "trainer.devices=2", "trainer.strategy=ddp", tasks_per_node=2, cpus_per_task=1)
    job, note = hold(slurm_cluster, run_dir(tmp_path / "ddp"), ddp, signal.SIGTERM, 60, requeue(slurm_cluster))
    code, out = finish(ddp, tmp_path / "ddp")
    assert note is None and code == 0, (note, out[-3000:])
    assert finish(reference, tmp_path / "one")[0] == 0
    assert re.search(r"\bRestarts=1\b", slurm_cluster.show(job))
    job = only_job(tmp_path / "ddp")
    folder = tmp_path / "ddp" / "outputs" / ".submitit" / job
    rank1 = (folder / f"{job}_1_log.out").read_text() + (folder / f"{job}_1_log.err").read_text()
    assert "global_rank=1(2)" in rank1 and "creating model" in rank1  # srun's second task built the model
    assert "done  best val" in (folder / f"{job}_0_log.out").read_text() and "done  best val" not in rank1
    run, one = run_dir(tmp_path / "ddp"), run_dir(tmp_path / "one")
    record = result(run)
    assert record["status"] == "done" and record["resumed"] is True and "done 1 (skipped 0)" in out
    assert sorted(p.name for p in run.glob("result.json")) == ["result.json"] and not (run / ".ranks.json").exists()
    expected = result(one)
    for key in ("best_val_acc", "test_acc", "best_step", "steps"):
        assert record[key] == expected[key], key
    assert record["test_loss"] == pytest.approx(expected["test_loss"], rel=1e-5)
    wa, wb = weights(run), weights(one)
    assert wa.keys() == wb.keys() and all(torch.allclose(wa[k], wb[k], rtol=1e-4, atol=1e-6) for k in wa)

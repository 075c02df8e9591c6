"""plasticity.compat against the libraries' own code: each test names the version it was checked
against and fails, naming what to re-read, when the library's behaviour changes."""

from importlib.metadata import version

from omegaconf import OmegaConf

# ------------------------------------------------------------------ Hydra


def test_expand_orders_jobs_like_hydras_basic_sweeper():
    """sweep.expand (public API only) gives the jobs, and so their numbers, in the order of Hydra's
    basic sweeper (private ``BasicSweeper.split_arguments``, checked against hydra-core 1.3.8)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from plasticity.sweep import expand

    params = {"model": "a,b", "seed": "1,2"}  # hydra.sweeper.params come before the command line
    task = ["component=ln1,mha", "+extra=choice(x,y)", "optimizer.lr=0.1", "task.steps=range(1,4)", "seed=5,6"]
    config = OmegaConf.create({"hydra": {"sweeper": {"params": params}, "overrides": {"task": task}}})
    parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()] + task)
    hydra_jobs = [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]
    assert expand(config) == hydra_jobs, (
        f"hydra-core {version('hydra-core')} orders a sweep's jobs differently from plasticity.sweep.expand "
        f"(checked against 1.3.8): re-read hydra/_internal/core_plugins/basic_sweeper.py")


# ------------------------------------------------------------------ hydra-submitit-launcher


class RecordingExecutor:
    """Stands for submitit.AutoExecutor: records what a launcher asks of it."""

    calls: list = []

    def __init__(self, **init):
        self.calls.append(("init", init))

    def update_parameters(self, **params):
        self.calls.append(("params", params))

    def map_array(self, fn, *columns):
        jobs = list(zip(*columns))
        self.calls.append(("map", fn, [job[:4] for job in jobs], [type(job[4]) for job in jobs]))
        return [FinishedJob(num) for _, _, num, _, _ in jobs]


class FinishedJob:
    def __init__(self, num):
        self.job_id, self.num = f"id_{num}", num

    def results(self):
        return [self.num]


def test_submit_array_submits_like_the_plugins_launch(tmp_path, monkeypatch):
    """compat.submit_array builds the executor and each job's arguments as hydra-submitit-launcher's
    own ``launch`` does (checked against 1.2.0), for jobs numbered from 5."""
    import submitit
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher

    from plasticity.compat import submit_array

    monkeypatch.setattr(submitit, "AutoExecutor", RecordingExecutor)
    launcher = SlurmLauncher(submitit_folder=str(tmp_path / ".submitit"), partition="debug", max_num_timeout=3,
                             timeout_min=60, tasks_per_node=2, array_parallelism=2, setup=["echo hi"],
                             additional_parameters={"mail_type": "END"})
    launcher.config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path / "sweep"), "mode": "750"}}})
    overrides = [["seed=0"], ["seed=1", "component=mha"]]
    RecordingExecutor.calls = []
    assert launcher.launch(overrides, initial_job_idx=5) == [5, 6]
    theirs, RecordingExecutor.calls = RecordingExecutor.calls, []
    handles = submit_array(launcher, [(5, overrides[0]), (6, overrides[1])])
    assert [h.job_id for h in handles] == ["id_5", "id_6"]
    assert RecordingExecutor.calls == theirs, (
        f"hydra-submitit-launcher {version('hydra-submitit-launcher')} submits differently from "
        f"plasticity.compat.submit_array (checked against 1.2.0): re-read its submitit_launcher.py launch()")
    assert oct((tmp_path / "sweep").stat().st_mode & 0o777) == "0o750"

"""plasticity.compat against the libraries' own code: each test names the version it was checked
against and fails, naming what to re-read, when the library's behaviour changes."""

import json
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


# ------------------------------------------------------------------ wandb-workspaces


class Uploaded(Exception):
    """Stops ``Workspace.save()`` at the server call, with the view it was about to upload."""


def test_workspace_json_is_the_view_save_uploads_and_from_url_reads(monkeypatch):
    """compat.workspace_json is the view ``Workspace.save()`` uploads, and workspace_from_json gives the workspace
    ``Workspace.from_url`` makes of that view (both public, checked against wandb-workspaces 0.4.13); no server."""
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws
    from wandb_workspaces.workspaces import internal

    from plasticity.compat import workspace_from_json, workspace_json

    panel = wr.LinePlot(title="t", x="trainer/global_step", y=["val/acc"], groupby=wr.Config("component.name"))
    workspace = ws.Workspace(name="w", entity="team", project="p", sections=[ws.Section(name="s", panels=[panel])],
                             runset_settings=ws.RunsetSettings(filters=[ws.Config("model.value.name") == "m"]))

    def upsert(view):
        raise Uploaded(view.model_dump_json(by_alias=True, exclude_none=True, exclude={"name"}))

    monkeypatch.setattr(internal, "upsert_view2", upsert)
    changed = (f"wandb-workspaces {version('wandb-workspaces')} saves or loads a workspace differently from "
               f"plasticity.compat (checked against 0.4.13): re-read wandb_workspaces/workspaces/interface.py "
               f"(Workspace.save, Workspace.from_url)")
    try:
        workspace.save()
    except Uploaded as saved:  # save() names a new view just before uploading it: compare all but the name
        text = json.loads(workspace_json(workspace))
        assert {k: v for k, v in text.items() if k != "name"} == json.loads(str(saved)), changed
    else:
        raise AssertionError(changed)
    monkeypatch.setattr(internal.View, "from_name", lambda entity, project, name: internal.View.model_validate_json(
        workspace_json(workspace)))
    from_url = ws.Workspace.from_url("https://wandb.ai/team/p?nw=abc")
    assert workspace_json(workspace_from_json(workspace_json(workspace))) == workspace_json(from_url), changed

"""plasticity.compat against the libraries' own code: each test names the version it was checked
against and fails, naming what to re-read, when the library's behaviour changes."""

import json
import os
import struct
import subprocess
import sys
import zlib
from importlib.metadata import version

import pytest
from omegaconf import OmegaConf

# ------------------------------------------------------------------ Hydra


def test_plan_sweeper_numbers_jobs_like_hydras_basic_sweeper():
    """PlanSweeper numbers the jobs with Hydra's basic sweeper's split_arguments, from a private module
    (compat.basic_sweeper, checked against hydra-core 1.3.8): the sweeper Hydra registers."""
    from hydra.core.config_store import ConfigStore

    from plasticity.compat import basic_sweeper
    from plasticity.sweep import PlanSweeper

    changed = (f"hydra-core {version('hydra-core')} moved or changed its basic sweeper (checked against 1.3.8): "
               f"re-read hydra/_internal/core_plugins/basic_sweeper.py")
    sweeper = basic_sweeper()  # importing its module registers its config (alone, nothing else has yet)
    registered = ConfigStore.instance().load("hydra/sweeper/basic.yaml").node._target_
    assert registered == f"{sweeper.__module__}.{sweeper.__name__}", changed
    # params first; a later override of a key replaces the earlier one in its place; the first key varies slowest
    jobs = PlanSweeper.job_lists({"model": "a,b", "seed": "1,2"}, ["component=ln1,mha", "seed=5", "lr=0.1"])
    assert jobs == [[f"model={m}", "seed=5", f"component={c}", "lr=0.1"] for m in "ab" for c in ("ln1", "mha")], changed


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


# ------------------------------------------------------------------ wandb


def frame(records, block=32 * 1024):
    """LevelDB-log framing as W&B writes it (the reader's inverse, written from the format)."""
    out = bytearray(b":W&B" + struct.pack("<HB", 0xBEE1, 0))
    for payload in records:
        first = True
        while True:
            space = block - len(out) % block
            if space < 7:
                out += b"\0" * space
                continue
            chunk, payload = payload[:space - 7], payload[space - 7:]
            kind = (1 if first else 4) if not payload else (2 if first else 3)
            out += struct.pack("<IHB", zlib.crc32(chunk, zlib.crc32(bytes([kind]))), len(chunk), kind) + chunk
            first = False
            if not payload:
                break
    return bytes(out)


def test_run_file_records_reassembles_records_across_blocks_and_detects_corruption(tmp_path):
    from wandb.proto import wandb_internal_pb2 as pb

    from plasticity.compat import run_file_records

    small, big = pb.Record(num=1), pb.Record(num=2)
    big.history.item.add(key="x", value_json='"' + "y" * 76_800 + '"')  # first, middle and last chunks
    path = tmp_path / "run-x.wandb"
    path.write_bytes(frame([r.SerializeToString() for r in (small, big, small)]))
    assert list(run_file_records(path)) == [small, big, small]
    broken = bytearray(path.read_bytes())
    broken[40_000] ^= 0xFF
    path.write_bytes(bytes(broken))
    with pytest.raises(ValueError, match="corrupt chunk"):
        list(run_file_records(path))
    path.write_bytes(b"PK\x03\x04")
    with pytest.raises(ValueError, match="not a W&B run file"):
        list(run_file_records(path))


def test_run_file_records_read_the_run_file_wandb_writes(tmp_path):
    """compat.run_file_records reads the file an offline wandb run writes (checked against wandb 0.31.0)."""
    from plasticity.tracking.runfile import read_run, run_files

    script = ("import wandb; run = wandb.init(project='p', config={'a': 1, 'b': {'c': 'd'}}, tags=['t']); "
              "run.log({'x': 2.5}); run.summary['y'] = 3; run.finish()")
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true"}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=120, capture_output=True)
    run = read_run(run_files(tmp_path)[0])
    changed = (f"wandb {version('wandb')} writes run files plasticity.compat.run_file_records reads differently "
               f"(checked against 0.31.0): re-read wandb/proto/wandb_internal.proto and the run file writer")
    assert (run.project, run.tags, run.config["a"], run.config["b"]) == ("p", ["t"], 1, {"c": "d"}), changed
    assert run.column("x") == [2.5] and run.summary["y"] == 3 and run.exit_code == 0, changed


def test_netrc_api_key_is_wandbs_own_lookup(tmp_path, monkeypatch):
    from plasticity.compat import netrc_api_key

    netrc = tmp_path / "netrc"
    netrc.write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    changed = (f"wandb {version('wandb')} finds netrc keys differently from plasticity.compat.netrc_api_key "
               f"(checked against 0.31.0): re-read wandb/sdk/lib/wbauth/wbnetrc.py")
    assert netrc_api_key("https://api.wandb.ai") == "k" * 40, changed
    assert netrc_api_key("https://wandb.example.org") is None, changed


# ------------------------------------------------------------------ timm


@pytest.mark.parametrize("family", ["eva", "beit"])
def test_route_qkv_through_forward_calls_the_qkv_linear_with_the_same_output(family):
    """compat.route_qkv_through_forward makes BEiT/EVA attention with q_bias call ``qkv``'s forward, the same
    function (checked against timm 1.0.31); restore_qkv undoes it."""
    import torch
    from timm.models import beit, eva

    from plasticity.compat import restore_qkv, route_qkv_through_forward

    torch.manual_seed(0)
    if family == "eva":
        attention = eva.EvaAttention(dim=8, num_heads=2, qkv_bias=True, scale_norm=False).eval()
    else:
        attention = beit.Attention(dim=8, num_heads=2, qkv_bias=True).eval()
    torch.nn.init.normal_(attention.q_bias)
    calls = []
    attention.qkv.register_forward_hook(lambda *_: calls.append(1))
    x = torch.randn(2, 5, 8)
    plain = attention(x)
    changed = (f"timm {version('timm')}: {family} attention no longer routes through qkv's forward with "
               f"qkv_bias_separate (checked against 1.0.31): re-read timm/models/{family}.py")
    assert not calls and route_qkv_through_forward(attention), changed
    torch.testing.assert_close(attention(x), plain)
    assert calls == [1] and not route_qkv_through_forward(attention), changed  # switched once
    restore_qkv(attention)
    attention(x)
    assert calls == [1], changed


# ------------------------------------------------------------------ lightning


def test_wandb_logger_privates_anonymous_left_out_and_run_started(monkeypatch, tmp_path):
    """compat.without_anonymous drops the argument Lightning's WandbLogger passes to wandb.init, and
    compat.run_started says whether its run started (checked against lightning 2.6.6)."""
    import wandb
    from lightning.pytorch.loggers import WandbLogger

    from plasticity.compat import run_started, without_anonymous

    calls = []
    monkeypatch.setattr(wandb, "run", None)
    monkeypatch.setattr(wandb, "init", lambda **kwargs: calls.append(kwargs) or object())
    logger = without_anonymous(WandbLogger(project="p", save_dir=str(tmp_path)))
    changed = (f"lightning {version('lightning')}: WandbLogger keeps its wandb.init arguments or its run differently "
               f"(checked against 2.6.6): re-read lightning/pytorch/loggers/wandb.py")
    assert not run_started(logger), changed
    logger.experiment
    assert run_started(logger) and len(calls) == 1, changed
    assert calls[0]["project"] == "p" and "anonymous" not in calls[0], changed

"""task=dashboard: the paper's panels as a W&B workspace, built offline, round-tripped through its
JSON, pushed later; and every key its panels read is a key real runs log."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from plasticity.tracking import dashboard as dash
from plasticity.tracking.runfile import read_run, run_files
from tests import forklaunch
from tests.fixtures import write_fashion_mnist

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ["Accuracy", "Gradient norms", "Plasticity during training", "Validation loss",
            "Learning rate and components"]
MODEL = "vit_micro_patch7_28"


def env(**extra):
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", **extra}


def no_key_env(tmp_path):
    """An environment with no W&B API key: none in the environment, an empty netrc."""
    (tmp_path / "netrc").write_text("")
    out = env(NETRC=str(tmp_path / "netrc"), HOME=str(tmp_path))
    out.pop("WANDB_API_KEY", None)
    return out


def launch(cwd, *overrides, multirun=False, timeout=120, environ=None):
    cmd = [sys.executable, str(ROOT / "launch.py"), *(["-m"] if multirun else []), *overrides]
    if environ is None:  # the one environment most launches share: forked from a process that imported once
        return forklaunch.run(cmd, cwd=cwd, env=env(), timeout=timeout)
    return subprocess.run(cmd, cwd=cwd, env=environ, capture_output=True, text=True, timeout=timeout)


def view(ws):
    return json.loads(dash.spec_json(ws))["spec"]["section"]


def panels(ws):
    return [p for s in view(ws)["panelBankConfig"]["sections"] for p in s["panels"]]


def filters(ws):
    """{(section, name): value} of the runset's filter leaves."""
    return {(f["key"]["section"], f["key"]["name"]): f["value"] for f in view(ws)["runSets"][0]["filters"]["filters"]}


def write_record(sweep, component="mha"):
    run = sweep / "finetune" / "fashion_mnist" / MODEL / component / "sgd_lr_0.01" / "seed_0"
    run.mkdir(parents=True)
    (run / "result.json").write_text(json.dumps({"task": "finetune", "dataset": "fashion_mnist", "model": MODEL,
                                                 "component": component, "lr": 0.01, "seed": 0, "status": "done"}))
    return sweep


def test_module_import_loads_neither_wandb_nor_torch():
    code = ("import sys, plasticity.tracking.dashboard, plasticity.recipes.dashboard; "
            "print(sorted(m for m in ('wandb', 'wandb_workspaces', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env(), capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_workspace_builds_offline_and_its_json_round_trips(tmp_path):
    ws = dash.build_workspace("plasticity", None, "paper panels")
    spec = dash.spec_json(ws)
    (tmp_path / "workspace.json").write_text(spec)
    assert dash.spec_json(dash.load_spec(tmp_path / "workspace.json")) == spec
    section = view(ws)
    assert [s["name"] for s in section["panelBankConfig"]["sections"]] == SECTIONS
    assert section["settings"]["xAxis"] == "trainer/global_step"
    assert section["runSets"][0]["grouping"] == [{"section": "config", "name": "run.value.component"}]
    kinds = {p["viewType"] for p in panels(ws)}
    assert {"Run History Line Plot", "Bar Chart", "Parallel Coordinates Plot"} <= kinds
    for panel in panels(ws):
        if panel["viewType"] != "Parallel Coordinates Plot":  # every chart groups runs by component
            assert panel["config"]["groupBy"] == "run.value.component", panel
        if panel["viewType"] == "Run History Line Plot":
            assert panel["config"]["xAxis"] == "trainer/global_step"
    parallel = next(p for p in panels(ws) if p["viewType"] == "Parallel Coordinates Plot")
    assert [c["accessor"] for c in parallel["config"]["columns"]] == [
        "config:optimizer.value.name", "config:optimizer.value.lr", "config:run.value.component",
        "summary:best_val_acc", "summary:test_acc"]
    regexes = {p["config"].get("metricRegex") for p in panels(ws)}
    assert "^grad_norm/(ln1|mha|ln2|fc1|fc2)$" in regexes and "^plasticity/(ln1|mha|ln2|fc1|fc2)$" in regexes
    metrics = {m for p in panels(ws) for m in p["config"].get("metrics", [])}
    assert {"val/acc", "val/loss", "summary_metrics.test_acc", "plasticity/mha"} <= metrics
    colors = view(ws)["customRunColors"]  # the paper's colours per component
    assert any("run.value.component" in k and "mha" in k and v == "#d62728" for k, v in colors.items())


def test_runset_filters_name_the_dataset_model_and_group():
    ws = dash.build_workspace("plasticity", "team", "w", dataset="cifar10_c/snow", model="vit_base_patch16_224",
                              group="cifar10_c/snow/vit_base_patch16_224")
    assert filters(ws) == {("config", "dataset.value.name"): "cifar10_c/snow",
                           ("config", "model.value.name"): "vit_base_patch16_224",
                           ("run", "group"): "cifar10_c/snow/vit_base_patch16_224", ("run", "jobType"): "finetune"}
    assert {("config", "dataset.name"), ("config", "model.name"), ("run", "group")} <= dash.panel_keys(ws)
    assert filters(dash.build_workspace("plasticity", "team", "w")) == {("run", "jobType"): "finetune"}
    assert json.loads(dash.spec_json(ws))["entity"] == "team"


def test_panel_keys_are_dotted_config_and_plain_metric_keys():
    keys = dash.panel_keys(dash.build_workspace("plasticity", None, "w"))
    assert {("config", "run.component"), ("config", "optimizer.lr"), ("config", "optimizer.name"),
            ("summary", "test_acc"), ("summary", "best_val_acc"), ("history", "val/acc"),
            ("history", "trainer/global_step")} <= keys
    assert not any(".value" in key for _, key in keys)


def test_lora_on_mha_and_full_mha_are_two_groups_of_the_dashboard():
    """The panels group by the run's configuration tag, which a LoRA run's W&B config holds apart from
    full MHA's (both have component.name=mha)."""
    from tests.test_config import composed

    from plasticity.recipes import get
    from plasticity.tracking.logger import run_config

    values = []
    for overrides in (["component=mha"], ["component=mha", "adapter=lora"]):
        cfg = composed(*overrides)
        config = run_config(cfg, get("finetune").identity(cfg), "/tmp/run")
        values.append(nested(config, dash.GROUP_BY))
    assert values == ["mha", "mha_lora_r8"]


def test_offline_is_decided_at_once_and_push_needs_a_key(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert dash.offline_reason() == "WANDB_MODE=offline"
    spec = tmp_path / "workspace.json"
    spec.write_text(dash.spec_json(dash.build_workspace("plasticity", None, "w")))
    for key, value in no_key_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE")
    assert not dash.has_credentials() and dash.offline_reason().startswith("no W&B API key")
    with pytest.raises(dash.DashboardError, match="wandb login"):
        dash.push(spec)
    with pytest.raises(dash.DashboardError, match="does not exist"):
        dash.push(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"not": "a view"}')
    with pytest.raises(dash.DashboardError, match="bad.json is not a W&B workspace spec"):
        dash.load_spec(tmp_path / "bad.json")


def test_push_saves_fills_the_entity_keeps_the_view_id_and_is_bounded_in_time(tmp_path, monkeypatch):
    from wandb_workspaces.workspaces import Workspace, interface

    spec = tmp_path / "workspace.json"
    spec.write_text(dash.spec_json(dash.build_workspace("plasticity", None, "w")))
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    saved = []

    def save(self):
        saved.append(self.entity)
        object.__setattr__(self, "_internal_name", "nw-1")
        object.__setattr__(self, "_internal_id", "id-1")
        return self

    monkeypatch.setattr(Workspace, "save", save)
    # The URL is the library's own (Workspace.url), W&B's documented <app>/<entity>/<project>?nw=<view> for the
    # entity given to push and the spec's project; only the app's address is given, as no login is at hand.
    monkeypatch.setattr(interface, "get_app_url", lambda api: "https://wandb.ai")
    monkeypatch.setattr(interface.wandb, "Api", lambda: None)
    assert dash.push(spec, entity="team") == "https://wandb.ai/team/plasticity?nw=1"
    assert saved == ["team"]
    written = json.loads(spec.read_text())  # a second push updates the same view
    assert (written["entity"], written["name"], written["id"]) == ("team", "nw-1", "id-1")
    monkeypatch.setattr(Workspace, "save", lambda self: __import__("time").sleep(30))
    with pytest.raises(dash.DashboardError, match=r"did not finish in 0.5 s \(no network\?\)"):
        dash.push(spec, timeout_s=0.5)


def test_push_command_fails_fast_without_a_key_and_names_the_fix(tmp_path):
    spec = tmp_path / "workspace.json"
    spec.write_text(dash.spec_json(dash.build_workspace("plasticity", None, "w")))
    proc = subprocess.run([sys.executable, "-m", "plasticity.tracking.dashboard", "push", str(spec)], cwd=ROOT,
                          env=no_key_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "wandb login" in proc.stderr and dash.push_command(spec) in proc.stderr


def test_missing_keys_names_what_no_run_logs(tmp_path):
    class Run:
        config = {"component": {"name": "mha"}, "optimizer": {"lr": 0.01}}
        summary = {"test_acc": 0.5}

        def history_keys(self):
            return {"val/acc", "grad_norm/mha"}

    keys = {("history", "val/acc"), ("history", "val/loss"), ("regex", "^grad_norm/(ln1|mha)$"),
            ("regex", "^plasticity/"), ("config", "optimizer.lr"), ("config", "optimizer.name"),
            ("summary", "test_acc"), ("run", "group")}
    missing = dash.missing_keys(keys, [Run()])
    assert len(missing) == 3
    assert all(any(k in m for m in missing) for k in ("'val/loss'", "'^plasticity/'", "'optimizer.name'"))


def test_task_dashboard_writes_the_spec_and_prints_the_push_command(tmp_path):
    sweep = write_record(tmp_path / "sweep")
    proc = launch(tmp_path, "task=dashboard", f"sweep_dir={sweep}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    spec = sweep / "dashboard" / "workspace.json"
    ws = dash.load_spec(spec)
    assert [s.name for s in ws.sections] == SECTIONS
    assert filters(ws)[("config", "dataset.value.name")] == "fashion_mnist"  # the sweep's one dataset
    assert filters(ws)[("config", "model.value.name")] == MODEL
    assert dash.push_command(spec) in proc.stdout and "WANDB_MODE=offline" in proc.stdout
    record = json.loads((sweep / "dashboard" / "result.json").read_text())
    assert record["status"] == "done" and record["url"] is None and record["workspace_json"] == str(spec)
    assert record["panels"] == sum(len(s.panels) for s in ws.sections)


@pytest.mark.parametrize("override, message", [
    ("task.online=maybe", "task.online='maybe' must be auto or true or false"),
    ("task.online=true", "task.online=true but there is no W&B API key"),
    ("task.project=''", "task.project=''"),
])
def test_bad_input_exits_1_naming_the_key_and_writes_nothing(tmp_path, override, message):
    sweep = write_record(tmp_path / "sweep")
    proc = launch(tmp_path, "task=dashboard", f"sweep_dir={sweep}", override, environ=no_key_env(tmp_path))
    assert proc.returncode == 1
    assert message in proc.stdout + proc.stderr and "Fix:" in proc.stdout + proc.stderr
    assert not (sweep / "dashboard").exists()


def test_a_sweep_dir_without_runs_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = launch(tmp_path, "task=dashboard", f"sweep_dir={tmp_path / 'empty'}")
    assert proc.returncode == 1
    assert "has no runs under it" in proc.stderr and "Fix: sweep_dir=" in proc.stderr
    assert not (tmp_path / "empty" / "dashboard").exists()


@pytest.mark.slow
def test_every_panel_key_is_a_key_real_runs_log(tmp_path):
    data = write_fashion_mnist(tmp_path / "data", n_train=200, n_test=100)
    proc = launch(tmp_path, "debug=tiny", f"paths.data_dir={data}", "logger=wandb", "callbacks=plasticity",
                  "callbacks.plasticity.reference=fashion_mnist", "callbacks.plasticity.every_n_steps=2",
                  "callbacks.plasticity.n_pairs=16", "callbacks.plasticity.batch_size=16", "component=ln1,mha",
                  multirun=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = [read_run(p) for p in run_files(tmp_path / "outputs")]
    assert len(runs) == 2
    ws = dash.build_workspace("plasticity", None, "w", dataset="fashion_mnist", model=MODEL,
                              group=f"fashion_mnist/{MODEL}")
    keys = dash.panel_keys(ws)
    logged = set().union(*(r.history_keys() for r in runs))
    unlogged = sorted(k for kind, k in keys if kind == "history" and k not in logged)
    unmatched = sorted(p for kind, p in keys if kind == "regex" and not any(re.search(p, k) for k in logged))
    no_summary = sorted(k for kind, k in keys if kind == "summary" and not any(k in r.summary for r in runs))
    no_config = sorted(k for kind, k in keys if kind == "config" and not all(nested(r.config, k) for r in runs))
    assert unlogged == [], f"panels read history keys no run logs: {unlogged}"
    assert unmatched == [], f"regex panels match no logged key: {unmatched}"
    assert no_summary == [], f"panels read summary keys no run has: {no_summary}"
    assert no_config == [], f"panels and filters read config keys the runs lack: {no_config}"
    for run in runs:  # the runset's filters keep these runs
        assert nested(run.config, "dataset.name") == "fashion_mnist" and nested(run.config, "model.name") == MODEL
        assert run.group == f"fashion_mnist/{MODEL}" and run.job_type == "finetune"
    assert dash.missing_keys(keys, runs) == []
    board = launch(tmp_path, "task=dashboard", "sweep_dir=outputs")
    assert board.returncode == 0, board.stderr[-3000:]
    assert "logged by none" not in board.stdout + board.stderr


def nested(config, dotted):
    node = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node

"""The W&B workspace of the paper's panels, as code (wandb-workspaces), saved online or kept as JSON.

:func:`build_workspace` lays out what the paper shows, for the runs of one project:

- **Accuracy**: test accuracy (the checkpoint of the best validation accuracy) and best validation
  accuracy per component group (bars, mean and standard deviation over the runs of a group), the
  validation accuracy curves and the logged ``test/acc``;
- **Gradient norms**: ``grad_norm/<group>`` of the finetuned group, of the head and final norm, and
  per block, against ``trainer/global_step``;
- **Plasticity during training**: ``plasticity/<group>`` of every group (``callbacks=plasticity``)
  and the measurement's share of the wall time;
- **Validation loss**: ``val/loss``, with ``train/loss`` and the learning rate beside it;
- **Learning rate and components**: a parallel-coordinates panel of ``optimizer.name``,
  ``optimizer.lr``, the configuration (``run.component``), ``best_val_acc`` and ``test_acc``.

Every panel groups runs by their configuration, ``run.component`` (the record's component tag:
``mha`` and LoRA on MHA, ``mha_lora_r8``, are two groups; coloured as in the paper's figures), and the runset
keeps the finetuning runs of one dataset and model (``dataset.name``, ``model.name``, optionally a
W&B group). Building needs no network: :func:`spec_json` writes the workspace as JSON,
:func:`load_spec` reads it back, and :func:`push` saves it to W&B later
(``python -m plasticity.tracking.dashboard push <workspace.json>``). :func:`panel_keys` lists the
metric and config keys the panels read, so a test can check them against what runs really log.

Example:
    >>> ws = build_workspace("plasticity", "my-team", "cifar10", dataset="cifar10_c/snow")  # doctest: +SKIP
    >>> Path("workspace.json").write_text(spec_json(ws))                                     # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import sys
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable
from urllib.parse import urlparse

from plasticity.compat import netrc_api_key
from plasticity.compat import workspace_json as spec_json  # the workspace as W&B's view JSON (load_spec reads it)
from plasticity.components import COLORS, GROUPS, label
from plasticity.tracking import STEP_METRIC

if TYPE_CHECKING:
    from wandb_workspaces.workspaces import Workspace

    from plasticity.tracking.runfile import RunFile

__all__ = ["DashboardError", "PanelKey", "build_workspace", "has_credentials", "load_spec",
           "missing_keys", "offline_reason", "panel_keys", "push", "push_command", "spec_json"]

GROUP_BY = "run.component"
"""The configuration tag of the run's record (``mha``, ``mha_lora_r8``, ``mha+fc1_b8-11``), not
``component.name``, which is ``mha`` for LoRA on MHA and full MHA alike."""
DEFAULT_HOST = "https://api.wandb.ai"
PUSH_TIMEOUT_S = 60.0
REACH_TIMEOUT_S = 3.0
OFFLINE_MODES = ("offline", "disabled", "dryrun")

PanelKey = tuple[str, str]
"""``(kind, key)`` a panel reads: kind ``history`` (a logged metric), ``regex`` (a pattern over
logged metrics), ``summary``, ``config`` (dotted, e.g. ``component.name``) or ``run`` (a run
attribute such as its group)."""


class DashboardError(ValueError):
    """The workspace cannot be saved or read; the message names the cause and the fix."""


# ----------------------------------------------------------------------------------- building


def build_workspace(project: str, entity: str | None, name: str, dataset: str | None = None,
                    model: str | None = None, group: str | None = None, job_type: str | None = "finetune",
                    groups: Iterable[str] = GROUPS) -> "Workspace":
    """The paper's panels as a W&B workspace (built offline; nothing is sent).

    Args:
        project: The W&B project of the runs (``logger.wandb.project``).
        entity: The W&B entity (user or team); None or empty: filled in with the API key's default
            entity when pushed.
        name: The workspace's display name.
        dataset: Keep only runs with this ``dataset.name`` (None: every dataset).
        model: Keep only runs with this ``model.name`` (None: every model).
        group: Keep only runs of this W&B group (``<dataset>/<model>`` by default; None: any).
        job_type: Keep only runs of this W&B job type (the task name; None: any).
        groups: The component groups whose curves get panels.

    Returns:
        A ``wandb_workspaces.workspaces.Workspace``.
    """
    import wandb_workspaces.workspaces as ws
    from matplotlib.colors import to_hex

    groups = tuple(groups)
    return ws.Workspace(
        name=name, entity=entity or "", project=project,
        sections=[ws.Section(name=title, panels=panels, is_open=True) for title, panels in sections(groups).items()],
        settings=ws.WorkspaceSettings(x_axis=STEP_METRIC, max_runs=100, group_by_prefix="first"),
        runset_settings=ws.RunsetSettings(
            filters=_filters(dataset, model, group, job_type), groupby=[ws.Config(GROUP_BY)],
            group_colors={g: to_hex(c) for g, c in COLORS.items()}))  # W&B takes hex, not tab:red


def _filters(dataset: str | None, model: str | None, group: str | None, job_type: str | None) -> list:
    """Runset filters; nested config keys spelled as W&B stores a nested dict (``a.value.b``)."""
    import wandb_workspaces.workspaces as ws

    wanted = [(ws.Config("dataset.value.name"), dataset), (ws.Config("model.value.name"), model),
              (ws.Metric("Group"), group), (ws.Metric("JobType"), job_type)]
    return [key == value for key, value in wanted if value not in (None, "")]  # unset: no filter


def sections(groups: tuple[str, ...]) -> dict[str, list]:
    """Section name -> its panels, in the workspace's order. Every panel but the parallel coordinates groups
    runs by component (mean and standard deviation); ``groups``: the component groups whose curves get panels.

    - Accuracy: test and best validation accuracy per component (bars), the validation accuracy curves.
    - Gradient norms before clipping: the finetuned group's, the head's and final norm's, per block.
    - Plasticity during training: P(f) of each group (``callbacks=plasticity``), all groups, and its cost.
    - Validation loss, with the training loss and the learning-rate schedule.
    - Learning rate and components: one parallel-coordinates panel, optimizer, lr, configuration -> accuracy.
    """
    import wandb_workspaces.reports.v2 as wr

    grouped = dict(groupby=wr.Config(GROUP_BY), groupby_aggfunc="mean", groupby_rangefunc="stddev")

    def line(title: str, y: list[str] | None = None, regex: str | None = None, **kwargs: Any):
        return wr.LinePlot(title=title, x=STEP_METRIC, y=y or [], metric_regex=regex, **grouped, **kwargs)

    def bars(title: str, metric: Any):
        return wr.BarPlot(title=title, metrics=[metric], orientation="v", **grouped)

    any_group = "(" + "|".join(re.escape(g) for g in groups) + ")"
    column = wr.ParallelCoordinatesPlotColumn
    return {
        "Accuracy": [bars("Test accuracy (best-validation checkpoint)", wr.SummaryMetric("test_acc")),
                     bars("Best validation accuracy", wr.SummaryMetric("best_val_acc")),
                     line("Validation accuracy", ["val/acc"]), bars("test/acc (logged at the end)", "test/acc")],
        "Gradient norms": [
            line("Gradient norm of the finetuned group", regex=f"^grad_norm/{any_group}$", log_y=True),
            line("Gradient norm of the head and final norm", regex="^grad_norm/(head|final_norm)$", log_y=True),
            line("Gradient norm per block", regex=f"^grad_norm/{any_group}/block_\\d+$", log_y=True)],
        "Plasticity during training": [line(f"Plasticity of {label(g)}", [f"plasticity/{g}"]) for g in groups] + [
            line("Plasticity of every group", regex=f"^plasticity/{any_group}$"),
            line("Plasticity measurement: share of the wall time", ["plasticity/cost"])],
        "Validation loss": [line("Validation loss", ["val/loss"]), line("Training loss", ["train/loss"]),
                            line("Learning rate", ["lr"])],
        "Learning rate and components": [wr.ParallelCoordinatesPlot(
            title="Learning rate, component and accuracy", columns=[
            column(wr.Config("optimizer.name"), display_name="optimizer"),
            column(wr.Config("optimizer.lr"), display_name="lr", log=True),
            column(wr.Config(GROUP_BY), display_name="configuration"),
            column(wr.SummaryMetric("best_val_acc"), display_name="best val acc"),
            column(wr.SummaryMetric("test_acc"), display_name="test acc")])],
    }


# ----------------------------------------------------------------------------------- the spec


def load_spec(path: str | Path) -> "Workspace":
    """The workspace saved by :func:`spec_json` in ``path``.

    Raises:
        DashboardError: the file is missing or is not a workspace spec; the message names the file.
    """
    from pydantic import ValidationError

    from plasticity.compat import workspace_from_json

    path = Path(path)
    try:
        return workspace_from_json(path.read_text())
    except FileNotFoundError:
        raise DashboardError(f"{path} does not exist. Fix: python launch.py task=dashboard sweep_dir=<sweep dir> "
                             f"writes <sweep dir>/dashboard/workspace.json.") from None
    except (ValidationError, ValueError) as err:
        raise DashboardError(f"{path} is not a W&B workspace spec ({type(err).__name__}: {str(err)[:300]}). "
                             f"Fix: rebuild it with python launch.py task=dashboard.") from None


def panel_keys(ws: "Workspace") -> set[PanelKey]:
    """Every key the workspace's panels and runset read, as ``(kind, key)`` (see :data:`PanelKey`),
    from the objects :func:`build_workspace` made, config keys dotted as runs log them (``a.b``)."""
    from wandb_workspaces.expr import string_to_filterexpr_list

    keys = {key for section in ws.sections for panel in section.panels for key in _keys_of_panel(panel)}
    filters = string_to_filterexpr_list(ws.runset_settings.filters)  # the runset keeps them as one expression
    return keys | {_key(g) for g in ws.runset_settings.groupby} | {_key(f.key) for f in filters}


def _keys_of_panel(panel: Any) -> set[PanelKey]:
    """A parallel-coordinates panel's columns; a bar chart's metrics or a line plot's x, y and regex; the grouping."""
    if hasattr(panel, "columns"):
        return {_key(c.metric) for c in panel.columns}
    keys = {_key(m) for m in getattr(panel, "metrics", None) or [panel.x, *panel.y]}
    if getattr(panel, "metric_regex", None):
        keys.add(("regex", panel.metric_regex))
    return keys | {_key(panel.groupby)}


def _key(metric: Any) -> PanelKey:
    """A panel's or the runset's metric as ``(kind, key)``: a string is a logged metric; a filter on a run
    attribute has W&B's name for it (``Group`` -> ``group``); a config key in W&B's nested spelling
    (``a.value.b``, the runset filters') becomes the dotted key."""
    import wandb_workspaces.reports.v2 as wr

    if isinstance(metric, str):
        return "history", metric
    if isinstance(metric, wr.SummaryMetric):
        return "summary", metric.name
    if getattr(metric, "section", "config") == "run":  # only the runset's keys (wandb_workspaces.expr) have one
        return "run", metric.to_key().name
    return "config", metric.name.replace(".value.", ".")


def missing_keys(keys: Iterable[PanelKey], runs: Iterable["RunFile"]) -> list[str]:
    """What the panels read that none of ``runs`` logs, one message each (empty: all logged).

    Run attributes (``run`` keys, such as the group) are left out: every run has them.
    """
    runs = list(runs)
    history = set().union(*(r.history_keys() for r in runs)) if runs else set()
    summary = {k for r in runs for k in r.summary}
    has = {"history": history.__contains__, "summary": summary.__contains__,
           "regex": lambda p: any(re.search(p, k) for k in history),
           "config": lambda k: any(_has_config(r.config, k) for r in runs)}
    return [f"{kind} key {key!r} is read by a panel but logged by none of the {len(runs)} runs"
            for kind, key in sorted(keys) if kind in has and not has[kind](key)]


def _has_config(config: dict, dotted: str) -> bool:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return dotted in config  # a flat dotted key
        node = node[part]
    return True


# ----------------------------------------------------------------------------------- online


def host_url() -> str:
    """The W&B server (``WANDB_BASE_URL``, W&B's cloud by default)."""
    return os.environ.get("WANDB_BASE_URL") or DEFAULT_HOST


def has_credentials() -> bool:
    """An API key is at hand: ``WANDB_API_KEY``, an identity token file, or the netrc entry of the
    server (read by wandb's own lookup). Nothing is sent."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    try:
        return bool(netrc_api_key(host_url()))
    except Exception:  # an unreadable netrc or another wandb layout: no usable key
        return False


def offline_reason(timeout_s: float = REACH_TIMEOUT_S) -> str | None:
    """Why the workspace cannot be saved now, or None when it can; decided within ``timeout_s`` s.

    Offline when ``WANDB_MODE`` is offline or disabled, when no API key is at hand
    (:func:`has_credentials`), or when the server does not accept a TCP connection in time (name
    lookup included, so a machine without a network never hangs here). Nothing is sent.
    """
    mode = os.environ.get("WANDB_MODE", "").strip().lower()
    if mode in OFFLINE_MODES:
        return f"WANDB_MODE={mode}"
    if not has_credentials():
        return "no W&B API key (WANDB_API_KEY unset, no netrc entry)"
    url = urlparse(host_url())
    port = url.port or (443 if url.scheme == "https" else 80)
    connect = lambda: socket.create_connection((url.hostname, port), timeout=timeout_s).close()  # noqa: E731
    try:
        _bounded(connect, timeout_s + 0.5, "connect")  # the socket's timeout does not bound the name lookup
    except Exception as err:
        return f"{url.hostname}:{port} cannot be reached ({type(err).__name__})"
    return None


def _bounded(call: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """``call()`` in a daemon thread; its result, its exception, or TimeoutError after ``timeout_s``."""
    future: Future = Future()

    def target() -> None:
        try:
            future.set_result(call())
        except BaseException as err:  # handed to the caller
            future.set_exception(err)

    # daemon: a call that never returns (a hung connection) does not keep the process alive
    thread = threading.Thread(target=target, name=f"dashboard-{what}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"{what} did not finish in {timeout_s:g} s")
    return future.result()


def push_command(path: str | Path) -> str:
    """The one command that saves a workspace spec to W&B later."""
    return f"python -m plasticity.tracking.dashboard push {Path(path).resolve()}"


def push(spec_path: str | Path, entity: str | None = None, timeout_s: float = PUSH_TIMEOUT_S) -> str:
    """Saves the workspace spec in ``spec_path`` to W&B and returns its URL.

    The saved view's id is written back into the spec, so pushing again updates the same view.

    Args:
        spec_path: A ``workspace.json`` written by ``task=dashboard`` (:func:`spec_json`).
        entity: Save under this entity (None: the spec's, else the API key's default entity).
        timeout_s: Give up after this many seconds (no network, a server that does not answer).

    Raises:
        DashboardError: no API key, no answer in time, or W&B refused the workspace; the message
            names the cause and the fix.
    """
    from plasticity.runs.io import write_text_atomic

    again = f"then run: {push_command(spec_path)}"
    ws = load_spec(spec_path)
    if not has_credentials():
        raise DashboardError(f"no W&B API key for {host_url()} (WANDB_API_KEY unset, no netrc entry). Fix: "
                             f"wandb login (or export WANDB_API_KEY=<key>), {again}")
    try:
        _bounded(lambda: _save(ws, entity), timeout_s, f"saving the workspace to {host_url()}")
        url = _bounded(lambda: ws.url, timeout_s, "reading the workspace URL")
    except DashboardError:
        raise
    except TimeoutError as err:
        raise DashboardError(f"{err} (no network?). Fix: run it where {host_url()} can be reached; {again}") from None
    except Exception as err:
        raise DashboardError(f"W&B did not save the workspace of {spec_path}: {type(err).__name__}: {err}. Fix: "
                             f"check the entity {ws.entity!r} and project {ws.project!r} (and your access to "
                             f"them), {again}") from None
    write_text_atomic(spec_path, spec_json(ws))  # now with the view's id: pushing again updates that view
    return url


def _save(ws: "Workspace", entity: str | None) -> None:
    """Fills in the entity (the given one, else the spec's, else the API key's default), saves."""
    import wandb

    ws.entity = entity or ws.entity or wandb.Api().default_entity or ""
    if not ws.entity:
        raise DashboardError("no W&B entity: the spec has none and the API key has no default entity. Fix: "
                             "pass --entity <team or user> (or task.entity=<team or user>)")
    ws.save()


# ----------------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    """``python -m plasticity.tracking.dashboard push <workspace.json> [--entity E] [--timeout S]``.

    Returns:
        0 with the URL printed; 1 with the problem and its fix on stderr.
    """
    parser = argparse.ArgumentParser(prog="python -m plasticity.tracking.dashboard",
                                     description="Save a workspace spec written by task=dashboard to W&B.")
    commands = parser.add_subparsers(dest="command", required=True)
    cmd = commands.add_parser("push", help="save <workspace.json> to W&B and print its URL")
    cmd.add_argument("spec", help="the workspace.json written by task=dashboard")
    cmd.add_argument("--entity", default=None, help="W&B entity (default: the spec's, else your default)")
    cmd.add_argument("--timeout", type=float, default=PUSH_TIMEOUT_S, help="seconds before giving up")
    args = parser.parse_args(argv)
    try:
        url = push(args.spec, args.entity, args.timeout)
    except DashboardError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(url)
    return 0


if __name__ == "__main__":
    sys.exit(main())

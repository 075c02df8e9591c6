"""Where plasticity relies on a library's behaviour that has no public API, each in one section.

Every section names the library version it was checked against; ``tests/test_compat.py`` compares
it with the library's own code and fails, naming the section, when that behaviour changes.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# ------------------------------------------------------------------ hydra-submitit-launcher 1.2.0


def submit_array(launcher: Any, jobs: list[tuple[int, list[str]]]) -> list[Any]:
    """Submits ``jobs`` (``(sweep number, overrides)``) as one job array through a set-up
    hydra-submitit-launcher launcher, each job keeping its number; returns submitit's job handles.

    The plugin's public ``launch`` does the same but numbers its jobs consecutively and waits for every
    result, raising at the first job that ended without one: :mod:`plasticity.launcher` leaves done
    jobs out and records a killed job as failed. Executor, parameters, sweep folder and the arguments
    of the launcher's ``__call__`` (run on the node) are those of the plugin's ``launch``.
    """
    import submitit
    from hydra.core.singleton import Singleton
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf

    cluster, params = launcher._EXECUTOR, launcher.params  # "slurm" | "local": the plugin's class attribute
    # max_num_timeout and the folder go to the executor's constructor, not to update_parameters.
    executor = submitit.AutoExecutor(cluster=cluster, folder=params["submitit_folder"],
                                     **{f"{cluster}_{k}": v for k, v in params.items() if k == "max_num_timeout"})
    shared = set(OmegaConf.structured(BaseQueueConf).keys())  # keys every cluster takes; others get the prefix
    executor.update_parameters(**{k if k in shared else f"{cluster}_{k}": v for k, v in params.items()
                                  if k not in ("submitit_folder", "max_num_timeout")})
    sweep_dir = Path(str(launcher.config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    if "mode" in launcher.config.hydra.sweep:
        os.chmod(sweep_dir, mode=int(str(launcher.config.hydra.sweep.mode), 8))
    # The launcher's __call__(overrides, job_dir_key, job_num, job_id, singleton_state), on the node.
    state = Singleton.get_state()
    args = [(list(overrides), "hydra.sweep.dir", num, f"job_id_for_{num}", state) for num, overrides in jobs]
    handles = executor.map_array(launcher, *zip(*args))
    for (num, _), handle in zip(jobs, handles):
        log.info("job %d -> %s %s", num, cluster, handle.job_id)
    return handles


# ------------------------------------------------------------------ wandb-workspaces 0.4.13


def workspace_json(workspace: Any) -> str:
    """The workspace as W&B's saved-view JSON, what ``Workspace.save()`` uploads, without a server.

    wandb-workspaces saves a workspace only online (``save``) and reads one only from its URL
    (``from_url``); both go through the private ``Workspace._to_model`` / ``_from_model`` and the
    ``internal.View`` model, which :func:`workspace_from_json` reads back.
    """
    return workspace._to_model().model_dump_json(by_alias=True, exclude_none=True)


def workspace_from_json(text: str) -> Any:
    """The ``wandb_workspaces.workspaces.Workspace`` of a view written by :func:`workspace_json`.

    Raises:
        pydantic.ValidationError, ValueError: ``text`` is not a saved view.
    """
    from wandb_workspaces.workspaces import Workspace, internal

    return Workspace._from_model(internal.View.model_validate_json(text))

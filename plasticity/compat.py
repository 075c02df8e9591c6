"""Where plasticity relies on a library's behaviour that has no public API, each in one section.

Every section names the library version it was checked against; ``tests/test_compat.py`` compares
it with the library's own code and fails, naming the section, when that behaviour changes.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from pathlib import Path
from typing import Any, Iterator

log = logging.getLogger(__name__)

# ------------------------------------------------------------------ hydra-core 1.3.8


def basic_sweeper() -> type:
    """Hydra's basic sweeper, in a private module: its ``split_arguments`` orders and numbers a sweep's
    jobs (:class:`plasticity.sweep.PlanSweeper`, whose ``params`` come first as in its ``sweep``)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return BasicSweeper


# ------------------------------------------------------------------ hydra-submitit-launcher 1.2.0


def submit_array(launcher: Any, jobs: list[tuple[int, list[str]]]) -> list[Any]:
    """Submits ``jobs`` (``(sweep number, overrides)``) as one job array through a set-up
    hydra-submitit-launcher launcher, each job keeping its number; returns submitit's job handles.

    The plugin's public ``launch`` does the same but numbers its jobs consecutively and waits for every
    result, raising at the first job that ended without one: :mod:`plasticity.sweep` leaves done
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


# ------------------------------------------------------------------ wandb 0.31.0


def netrc_api_key(host: str) -> str | None:
    """The API key the netrc file (``$NETRC``, else ``~/.netrc``) holds for the W&B server ``host``,
    found as wandb itself finds it (its private ``wandb.sdk.lib.wbauth``), or None."""
    from wandb.sdk.lib.wbauth import read_netrc_auth

    return read_netrc_auth(host=host)


RUN_FILE_HEADER = 7
"""Bytes of a run file's header, and of each chunk's."""


def run_file_records(path: str | Path) -> Iterator[Any]:
    """Every ``wandb_internal_pb2.Record`` of a W&B run file (``run-<id>.wandb``), in order.

    wandb has no public reader of these files. Their framing is LevelDB's log: a 7-byte file header
    (``:W&B``, a 2-byte magic, a version byte), then 32 KiB blocks of chunks, each with a 7-byte
    header (crc32 of the type byte and the payload as little-endian uint32, payload length uint16,
    type uint8: 1 full, 2 first, 3 middle, 4 last); a block's tail shorter than a header is padding.

    Raises:
        ValueError: the header is not W&B's, or a chunk's checksum does not match (a corrupt file).
    """
    from wandb.proto import wandb_internal_pb2 as pb

    data, block, header, pos, pending = Path(path).read_bytes(), 32 * 1024, RUN_FILE_HEADER, RUN_FILE_HEADER, b""
    if not data.startswith(b":W&B"):
        raise ValueError(f"{path} is not a W&B run file: it does not start with b':W&B'")
    while pos + header <= len(data):
        space = block - pos % block
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + header]) if space >= header else (0, 0, 0)
        if kind == 0 and length == 0:  # a block's trailer or zero padding up to the next block
            pos += space
            continue
        chunk = data[pos + header:pos + header + length]
        if zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != crc:
            raise ValueError(f"{path}: corrupt chunk at byte {pos} (checksum mismatch)")
        pos += header + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):  # full, or the last chunk of a record
            record = pb.Record()
            record.ParseFromString(pending)
            yield record


# ------------------------------------------------------------------ timm 1.0.31


def route_qkv_through_forward(attention: Any) -> bool:
    """Makes BEiT/EVA attention with ``q_bias`` call its ``qkv`` Linear's forward (``self.qkv(x) + bias``)
    instead of ``F.linear(x, self.qkv.weight, bias)``, which would skip an adapter wrapping ``qkv``.

    timm's ``qkv_bias_separate`` switch, a constructor argument read at every forward, does that.
    Returns whether it was switched (undo with :func:`restore_qkv`)."""
    if getattr(attention, "q_bias", None) is None or getattr(attention, "qkv_bias_separate", None) is not False:
        return False
    attention.qkv_bias_separate = True
    return True


def restore_qkv(attention: Any) -> None:
    """Undoes :func:`route_qkv_through_forward` (the attention's own ``F.linear`` again)."""
    attention.qkv_bias_separate = False


# ------------------------------------------------------------------ lightning 2.6.6


def without_anonymous(logger: Any) -> Any:
    """Lightning's ``WandbLogger`` with no ``anonymous`` argument for ``wandb.init`` (returned).

    It always passes one (None by default; its private ``_wandb_init``), which wandb 0.31 deprecates
    with a warning and otherwise ignores."""
    logger._wandb_init.pop("anonymous", None)
    return logger


def run_started(logger: Any) -> bool:
    """Whether a Lightning ``WandbLogger`` has started (or attached to) its W&B run: its public
    ``experiment`` would start one, so its private ``_experiment`` is read."""
    return logger._experiment is not None

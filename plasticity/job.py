"""One Hydra job: check the config, run the task, record the outcome; never lose what is done.

Every job owns a deterministic directory (``outputs/<task>/<dataset>/<model>/<component>/
lr_<lr>/seed_<seed>``) and ends with a ``result.json`` written atomically, whatever happened:
``done``, ``diverged`` (NaN/inf loss) or ``failed`` (any other exception, with its message).
A job whose record says done (or diverged) for the same config returns at once. In a multirun a
failure is recorded and the sweep goes on; the sweep summary exits non-zero at the end.
"""

from __future__ import annotations

import logging
import shutil
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from plasticity.analysis import Bounds, Plasticity
from plasticity.config import ConfigError, check
from plasticity.console import print_config_tree
from plasticity.data import DataError
from plasticity.finetune import CHECKPOINT_DIR, Finetune
from plasticity.models import WeightsError
from plasticity.module import Diverged
from plasticity.prepare import InspectData, Prepare
from plasticity.pretrain import Pretrain
from plasticity.report import Report
from plasticity.results import RESULT_FILE, config_hash, identity, read_json, read_result, write_json_atomic

log = logging.getLogger(__name__)
# Known-harmless notices that would bury the run's own output.
warnings.filterwarnings("ignore", message=".*isinstance\\(treespec, LeafSpec\\).*")
warnings.filterwarnings("ignore", message=".*overridden `on_after_batch_transfer`.*")
warnings.filterwarnings("ignore", message=".*does not have many workers.*")
warnings.filterwarnings("ignore", message="Experiment logs directory .* exists and is not empty.*")
logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(
    lambda record: "litlogger" not in record.getMessage()
)


TASKS = {"finetune": Finetune, "pretrain": Pretrain, "plasticity": Plasticity, "bounds": Bounds, "report": Report,
         "prepare": Prepare, "inspect_data": InspectData}
FINISHED = ("done", "diverged")
RUN_FILE = "run.json"
# Errors whose message says everything: no traceback needed.
USER_ERRORS = (ConfigError, DataError, WeightsError, FileNotFoundError)


def prepare_run_dir(run_dir: Path, chash: str) -> None:
    """Marks the run as started; stale checkpoints of a different config are removed."""
    started = read_json(run_dir / RUN_FILE)
    if started and started.get("config_hash") != chash:
        shutil.rmtree(run_dir / CHECKPOINT_DIR, ignore_errors=True)
        (run_dir / "metrics.csv").unlink(missing_ok=True)
    write_json_atomic(run_dir / RUN_FILE, {"config_hash": chash, "started": time.time()})


def run_job(cfg: DictConfig) -> dict[str, Any]:
    """Runs the task of one job and writes its ``result.json``.

    Returns:
        The result record (also the Hydra job's return value).

    Raises:
        SystemExit: with code 1 when a single (non-multirun) job fails.
    """
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    torch.set_num_threads(int(cfg.get("threads") or torch.get_num_threads()))
    torch.set_float32_matmul_precision(cfg.get("matmul_precision", "highest"))
    record: dict[str, Any] = {**identity(cfg), "run_dir": str(run_dir)}
    chash = config_hash(cfg)
    previous = read_result(run_dir)
    if cfg.sweep.get("dry_run", False):
        status = previous.get("status") if previous and previous.get("config_hash") == chash else "to run"
        log.info("dry run: %s (%s)", run_dir, status)
        return {**record, "status": status, "dry_run": True}
    if cfg.sweep.skip_done and previous and previous.get("status") in FINISHED and not cfg.task.get("always_run"):
        if previous.get("config_hash") == chash:
            log.info("skipping %s: already %s (sweep.skip_done=true)", run_dir, previous["status"])
            return {**previous, "skipped": True}
        log.warning("re-running %s: its record was made with a different config", run_dir)
    if cfg.get("print_config", True):
        print_config_tree(cfg)
    OmegaConf.save(cfg, run_dir / "config.yaml", resolve=True)
    start = time.perf_counter()
    try:
        check(cfg, tuple(TASKS))
        prepare_run_dir(run_dir, chash)
        record.update(TASKS[cfg.task.name](cfg, run_dir).run())
        record["status"] = "done"
    except Diverged as err:
        log.warning("run diverged: %s", err)
        record.update(status="diverged", error=str(err))
    except Exception as err:  # recorded, so the sweep goes on
        record.update(status="failed", error=f"{type(err).__name__}: {err}")
        (run_dir / "error.log").write_text(traceback.format_exc())
        if isinstance(err, USER_ERRORS):
            log.error("%s", err)
        else:
            log.exception("run failed")
    finally:
        finish_wandb()
    record.update(wall_s=round(time.perf_counter() - start, 2), config_hash=chash)
    write_json_atomic(run_dir / RESULT_FILE, record)
    log.info("%s: %s", record["status"], run_dir / RESULT_FILE)
    if record["status"] == "failed" and not multirun:
        raise SystemExit(1)
    return record


def finish_wandb() -> None:
    """Ends the process's W&B run, so the next job of a multirun starts its own."""
    try:
        import wandb
    except ImportError:
        return
    if wandb.run is not None:
        wandb.finish()

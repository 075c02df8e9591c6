"""The one entry point: ``python launch.py [-m] key=value ...`` (see conf/config.yaml).

Starting is light: torch, timm and Lightning load only when a task runs, so ``--help`` and
``--cfg job`` answer at once.
"""

import os
import sys
from pathlib import Path

# Jobs that run in other processes (submitit local or SLURM) unpickle this launch's plasticity objects:
# they import the package from this checkout, even when it is not pip-installed, through the
# environment they inherit.
_ROOT = Path(__file__).resolve().parent
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), os.environ.get("PYTHONPATH")) if p)
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

import plasticity  # noqa: E402  (registers the config resolvers)


@hydra.main(version_base="1.3", config_path="conf", config_name="config")  # conf/: plasticity.CONF_DIR
def main(cfg: DictConfig) -> dict:
    from plasticity.job import run_job

    return run_job(cfg)


if __name__ == "__main__":
    from plasticity.cli import reporting_errors

    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra's errors reach reporting_errors: its advice for a typo is "+key=..."
    with reporting_errors(sys.argv[1:]):
        main()

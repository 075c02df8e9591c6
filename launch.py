"""The one entry point: ``python launch.py [-m] key=value ...`` (see conf/config.yaml)."""

import os
from pathlib import Path

# Jobs that run in other processes (submitit local or SLURM) import the package from this checkout
# even when it is not pip-installed.
_ROOT = str(Path(__file__).resolve().parent)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH")) if p)

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

import plasticity  # noqa: E402,F401  (registers the framework's timm models)
from plasticity.job import run_job  # noqa: E402


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> dict:
    return run_job(cfg)


if __name__ == "__main__":
    main()

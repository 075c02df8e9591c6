"""The one entry point: ``python launch.py [-m] key=value ...`` (see conf/config.yaml)."""

import hydra
from omegaconf import DictConfig

import plasticity  # noqa: F401  (registers the framework's timm models)
from plasticity.job import run_job


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> dict:
    return run_job(cfg)


if __name__ == "__main__":
    main()

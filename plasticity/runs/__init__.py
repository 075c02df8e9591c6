"""Run bookkeeping: atomic files, the result record and config identity, one process per run.

Separate from the data layer and from the recipes: a run directory holds ``result.json`` (the
record, written atomically), ``config.yaml`` (the resolved config), ``run.json`` (started marker),
``.lock`` (held by the one process that runs it), ``error.log`` (a failed run's traceback) and what
the recipe writes; a training run's checkpoints and metric files are :mod:`plasticity.runs.checkpoints`'.
"""

from plasticity.runs.io import write_json_atomic
from plasticity.runs.lock import RunLock
from plasticity.runs.record import CONFIG_FILE, ERROR_FILE, RESULT_FILE, STARTED_FILE, config_hash

__all__ = ["CONFIG_FILE", "ERROR_FILE", "RESULT_FILE", "STARTED_FILE", "RunLock", "config_hash", "write_json_atomic"]

"""Run bookkeeping: atomic files, the result record and config identity, one process per run.

Separate from the data layer and from the recipes: a run directory holds ``result.json`` (the
record, written atomically), ``config.yaml`` (the resolved config), ``run.json`` (started marker),
``.lock`` (held by the one process that runs it), ``error.log`` (a failed run's traceback) and what
the recipe writes; a training run's checkpoints and metric files are :mod:`plasticity.runs.checkpoints`'.
"""

from plasticity.runs.io import atomic_path, read_json, write_csv_atomic, write_json_atomic, write_text_atomic
from plasticity.runs.lock import RunLock, lock_holder
from plasticity.runs.record import (
    CONFIG_FILE,
    ERROR_FILE,
    FINISHED,
    RESULT_FILE,
    STARTED_FILE,
    config_diff,
    config_hash,
    find_results,
    protocol,
    read_result,
    visible_files,
)

__all__ = [
    "CONFIG_FILE", "ERROR_FILE", "FINISHED", "RESULT_FILE", "STARTED_FILE", "RunLock", "atomic_path", "config_diff",
    "config_hash", "find_results", "lock_holder", "protocol", "read_json", "read_result", "write_csv_atomic",
    "visible_files", "write_json_atomic", "write_text_atomic",
]

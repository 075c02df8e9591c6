"""plasticity: component-wise finetuning and plasticity analysis of vision transformers.

Importing the package is light (no torch, timm or Lightning), so ``python launch.py --help`` and
``--cfg job`` answer at once; the heavy libraries load when a task runs. It registers the config
resolvers the ``conf/`` files use:

- ``${run_id:<text>}``: a stable 16-hex-digit id (the W&B run id of a run directory, so that a
  requeued job resumes its own W&B run);
- ``${groups:}``: the paper's five component groups (:data:`plasticity.components.GROUPS`);
- ``${optimizer_name:<_target_>}``: ``torch.optim.SGD`` -> ``sgd``, the optimizer's name in run paths;
- ``${component_tag:<name>,<blocks>,<adapter>}``: the configuration's name in run paths
  (``mha``, ``mha+fc1_b8-11``, ``mha_lora_r8``; :func:`plasticity.components.component_tag`);
- ``${report_dir:<optimizer>}``: ``task=report``'s folder, ``report`` or ``report_<optimizer>``
  (:func:`plasticity.report.writer.report_folder`).

Subpackages: :mod:`~plasticity.data`, :mod:`~plasticity.recipes` (one per task),
:mod:`~plasticity.runs` (records, locks), :mod:`~plasticity.report` (tables, figures, summary),
:mod:`~plasticity.tracking` (W&B: what runs log, the report, dashboards, offline sync).
"""

import hashlib

from omegaconf import OmegaConf

from plasticity.components import GROUPS, component_tag
from plasticity.runs.record import optimizer_name
from plasticity.validate import CONF_DIR  # re-exported: launch.py's config folder


def run_id(text: str) -> str:
    """A stable 16-hex-digit id of ``text`` (the W&B run id of a run path)."""
    return hashlib.sha1(str(text).encode()).hexdigest()[:16]


def report_dir(optimizer: str | None = None) -> str:
    """``task=report``'s folder name (:func:`plasticity.report.writer.report_folder`)."""
    from plasticity.report.writer import report_folder  # numpy and matplotlib: only a report's config resolves it

    return report_folder(optimizer)


# replace=True: importing the package again (a test's reload, a job's fresh interpreter) re-registers them.
OmegaConf.register_new_resolver("run_id", run_id, replace=True)
OmegaConf.register_new_resolver("groups", lambda: list(GROUPS), replace=True)
OmegaConf.register_new_resolver("optimizer_name", optimizer_name, replace=True)
OmegaConf.register_new_resolver("component_tag", component_tag, replace=True)
OmegaConf.register_new_resolver("report_dir", report_dir, replace=True)

__version__ = "0.2.0"

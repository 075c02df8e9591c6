"""plasticity's sweeper and launchers, where Hydra looks for plugins (the ``hydra_plugins`` namespace).

``conf/hydra/sweeper/plan.yaml`` and ``conf/hydra/launcher/{slurm,local}.yaml`` name these
classes; they are defined in :mod:`plasticity.sweep`.
"""

from hydra_plugins.hydra_submitit_launcher import submitit_launcher

from plasticity.sweep import PlanSweeper as _PlanSweeper, Submits


class PlanSweeper(_PlanSweeper):
    """``hydra/sweeper=plan``: every job planned (composed, validated, inspected) before any runs."""


# Submits first: its run_plan() comes before the base launcher's attributes in the method order.
class SlurmLauncher(Submits, submitit_launcher.SlurmLauncher):
    """``hydra/launcher=slurm``: one job array of the runs that are not done."""


class LocalLauncher(Submits, submitit_launcher.LocalLauncher):
    """``hydra/launcher=local``: submitit's local executor, for the runs that are not done."""

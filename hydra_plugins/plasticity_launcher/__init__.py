"""plasticity's launchers, where Hydra looks for launchers (the ``hydra_plugins`` namespace).

hydra-submitit-launcher's SLURM and local launchers with :class:`plasticity.launcher.SkipDone`:
only the runs that are not done are submitted. ``conf/hydra/launcher/slurm.yaml`` and
``local.yaml`` name these classes.
"""

from hydra_plugins.hydra_submitit_launcher import submitit_launcher

from plasticity.launcher import SkipDone


# SkipDone first: its launch() comes before the base launcher's in the method order.
class SlurmLauncher(SkipDone, submitit_launcher.SlurmLauncher):
    """``hydra/launcher=slurm``: one job array of the runs that are not done."""


class LocalLauncher(SkipDone, submitit_launcher.LocalLauncher):
    """``hydra/launcher=local``: submitit's local executor, for the runs that are not done."""

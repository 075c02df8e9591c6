"""Where runs and reports write: runs that compute different things never share a folder."""

import pytest

from tests.test_config import composed


def run_dir(*overrides):
    return str(composed(*overrides).hydra.run.dir)


@pytest.mark.parametrize("task", ["plasticity", "bounds"])
@pytest.mark.parametrize("key, part", [("n_pairs", "pairs"), ("batch_size", "batch")])
def test_analyses_on_other_pairs_or_batches_get_their_own_run_paths(task, key, part):
    """Measured on other pairs (or batched otherwise), an analysis is another run in another folder,
    not a conflict with the first one's finished record."""
    first, other = (run_dir(f"task={task}", f"task.{key}={n}") for n in (32, 64))
    assert first != other and first.endswith("/seed_0") and other.endswith("/seed_0")
    assert f"/{part}_32" in first and f"/{part}_64" in other


def test_a_report_of_one_optimizer_has_its_own_folder(tmp_path):
    """``task=report task.optimizer=adamw`` writes report_adamw/, beside (never over) the sweep's report/."""
    sweep = f"sweep_dir={tmp_path}"
    assert run_dir("task=report", sweep) == f"{tmp_path}/report"
    assert run_dir("task=report", sweep, "task.optimizer=adamw") == f"{tmp_path}/report_adamw"
    assert run_dir("task=report", sweep, "task.optimizer=sgd") == f"{tmp_path}/report_sgd"

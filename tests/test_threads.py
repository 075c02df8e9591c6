"""`make run` gives the same numbers whatever OMP_NUM_THREADS or the core count (issue 19, item 5).

Torch splits a matmul's reductions across its intra-op threads, so the float rounding, and with it
every trained weight, depends on the thread count. Every step of `make run` therefore pins it.
Left as they are: interop threads (eager ops never use them) and DataLoader workers (0 on a CPU;
they only index the seeded sampler's batches, so their number changes no batch).
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]
PRETRAIN_RUN = Path("outputs/pretrain/fashion_mnist/vit_micro_patch7_28/all/adamw_lr_0.003/seed_0")


def make_run_launches() -> list[list[str]]:
    """The overrides of every `launch.py` line of the Makefile's `run` recipe."""
    recipe = re.search(r"^run:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    launches = [line.split("launch.py", 1)[1].split() for line in recipe.splitlines() if "launch.py" in line]
    return [[a for a in args if a != "-m"] for args in launches]


def test_every_make_run_step_pins_its_threads():
    launches = make_run_launches()
    assert len(launches) == 9  # pretrain, 2 finetuning sweeps, plasticity, auto, LoRA, probe, bounds, report
    for overrides in launches:
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            cfg = compose("config", overrides=overrides)
        if cfg.task.name == "report":
            continue  # numpy statistics over the records' numbers: no torch arithmetic, nothing to pin
        assert isinstance(cfg.threads, int) and cfg.threads >= 1, (overrides, cfg.threads)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """600 training images: the 5 pretraining classes fill batches of 64 (the tiny pretraining's)."""
    from tests.fixtures import write_fashion_mnist

    return write_fashion_mnist(tmp_path_factory.mktemp("data"), n_train=600, n_test=200)


def test_quickstart_pretraining_is_bit_identical_across_omp_num_threads(tmp_path, data_dir):
    """The quickstart's pretraining config, shrunk (2 blocks, 4 steps of 64, P(f) at steps 0 and 4),
    under OMP_NUM_THREADS=1, =2 and unset (torch's default: the core count): the same weights and P(f)."""
    overrides = ["experiment=quickstart_pretrain", "debug=tiny", f"paths.data_dir={data_dir}",
                 "task.max_steps=4", "task.val_every=4", "task.batch_size=64", "task.micro_batch_size=64",
                 "callbacks.plasticity.every_n_steps=4", "callbacks.plasticity.n_pairs=20",
                 "callbacks.plasticity.batch_size=20"]
    base = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # conftest sets it to 1
    envs = {"omp1": {**base, "OMP_NUM_THREADS": "1"}, "omp2": {**base, "OMP_NUM_THREADS": "2"}, "unset": base}
    procs = {}
    for name, env in envs.items():  # at once: each pins one thread, so three share 2 cores well enough
        (tmp_path / name).mkdir()
        procs[name] = subprocess.Popen([sys.executable, str(ROOT / "launch.py"), *overrides], cwd=tmp_path / name,
                                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"{name}:\n{out[-3000:]}"
    runs = {name: tmp_path / name / PRETRAIN_RUN for name in envs}
    weights = {name: load_file(run / "weights.safetensors") for name, run in runs.items()}
    plasticity = {name: (run / "plasticity_during_training.csv").read_text() for name, run in runs.items()}
    for name in ("omp2", "unset"):
        assert weights[name].keys() == weights["omp1"].keys()
        differ = [k for k in weights["omp1"] if not weights[name][k].equal(weights["omp1"][k])]
        assert not differ, f"OMP_NUM_THREADS {name} vs 1: {len(differ)} tensors differ, e.g. {differ[:3]}"
        assert plasticity[name] == plasticity["omp1"], f"P(f) during pretraining differs: {name} vs omp1"

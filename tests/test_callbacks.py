"""PlasticityCallback: logs P(f) per group during finetuning, equal to a direct measurement;
its reference is read like the run's data (prepared arrays in the run's prepared dir)."""

import functools
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch

from plasticity.callbacks import PlasticityCallback
from plasticity.components import GROUPS, freeze, select
from plasticity.data import DataSpec, load_splits, prepare, prepared_path
from plasticity.data.augment import DeviceTransform
from plasticity.data.datamodule import DataModule
from plasticity.measure import measure, pair_indices
from plasticity.models import create_model
from plasticity.module import FinetuneModule
from tests.fixtures import write_fashion_mnist, write_imagenet_val


def test_callback_logs_group_plasticity_equal_to_a_direct_measurement(micro_vit, tmp_path):
    data_dir = write_fashion_mnist(tmp_path / "data", n_train=200, n_test=100)
    dm = DataModule(DataSpec("fashion_mnist", str(data_dir), img_size=28), micro_batch_size=16, seed=0)
    selection = select(micro_vit, "mha")
    freeze(micro_vit, selection)
    tf = lambda train: DeviceTransform(28, [0.5] * 3, [0.5] * 3, train=train)  # noqa: E731
    module = FinetuneModule(micro_vit, selection, 10, functools.partial(torch.optim.SGD, lr=0.0),
                            max_steps=4, warmup_steps=0, train_transform=tf(True), eval_transform=tf(False))
    callback = PlasticityCallback("fashion_mnist", every_n_steps=2, n_pairs=24, batch_size=10)
    logger = L.pytorch.loggers.CSVLogger(tmp_path, name="", version="")
    trainer = L.Trainer(accelerator="cpu", max_steps=4, logger=logger, callbacks=[callback],
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, num_sanity_val_steps=0)
    trainer.fit(module, datamodule=dm)
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    header = lines[0].split(",")
    rows = [dict(zip(header, line.split(","))) for line in lines[1:]]
    logged = [r for r in rows if r.get("plasticity/mha")]
    assert [int(r["step"]) for r in logged] == [0, 2, 4]
    assert all(0 < float(r["plasticity/cost"]) < 1 for r in logged)
    # lr 0: the weights never move, so every measurement equals a direct one on the same pairs.
    ref, down = load_splits(DataSpec("fashion_mnist", data_dir)).test, dm.splits.val
    ri, di = pair_indices(len(ref), len(down), 24, "sequential")
    x = torch.from_numpy(ref.images[ri]).permute(0, 3, 1, 2)
    y = torch.from_numpy(down.images[di]).permute(0, 3, 1, 2)
    micro_vit.eval()
    batches = (tf(False)(torch.cat([x[i:i + 10], y[i:i + 10]])) for i in range(0, 24, 10))
    direct = measure(micro_vit, batches).summary()
    expected = np.mean([r["mean"] for r in direct if r["group"] == "mha"])
    assert float(logged[-1]["plasticity/mha"]) == pytest.approx(expected, rel=1e-5)
    assert float(logged[0]["plasticity/ln1/block_1"]) == pytest.approx(
        next(r["mean"] for r in direct if (r["group"], r["block"]) == ("ln1", 1)), rel=1e-5)


# ----------------------------------------------------------------------------- the reference's data


def _fit(dm: DataModule, callback: PlasticityCallback, root: Path) -> None:
    """One optimizer step of the micro ViT on ``dm`` with ``callback`` (which measures at steps 0 and 1)."""
    torch.manual_seed(0)
    net = create_model("vit_micro_patch7_28", 10, depth=2)
    selection = select(net, "all")
    tf = lambda train: DeviceTransform(28, [0.5] * 3, [0.5] * 3, train=train)  # noqa: E731
    module = FinetuneModule(net, selection, 10, functools.partial(torch.optim.SGD, lr=0.0),
                            max_steps=1, warmup_steps=0, train_transform=tf(True), eval_transform=tf(False))
    trainer = L.Trainer(accelerator="cpu", max_steps=1, logger=False, callbacks=[callback], default_root_dir=root,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, num_sanity_val_steps=0)
    trainer.fit(module, datamodule=dm)


@pytest.fixture(scope="module")
def reference_data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Fashion-MNIST (the run's dataset) and a 12-JPEG ImageNet val, prepared at 28 px into a custom dir."""
    root = tmp_path_factory.mktemp("ref")
    data_dir = write_fashion_mnist(root / "data", n_train=40, n_test=10)
    write_imagenet_val(data_dir, per_class=4)
    custom = root / "elsewhere" / "arrays"  # not <data_dir>/prepared
    result = prepare("imagenet", data_dir, custom, 28, train_size=28, num_classes=3)
    assert result["sizes"]["test"] == 12 and not (data_dir / "prepared").exists()
    return data_dir, custom


def test_reference_comes_from_the_runs_prepared_dir(reference_data, tmp_path) -> None:
    data_dir, custom = reference_data
    spec = DataSpec("fashion_mnist", str(data_dir), prepared_dir=str(custom), img_size=28, limit=32)
    callback = PlasticityCallback("imagenet", every_n_steps=1, n_pairs=16, batch_size=6, groups=("mha", "fc2"))
    _fit(DataModule(spec, micro_batch_size=8), callback, tmp_path)
    assert callback.reference_prepared is True
    assert callback.reference_spec == DataSpec("imagenet", str(data_dir), prepared_dir=str(custom), img_size=28)
    ri, di = callback.pair_indices
    assert ri.tolist() == [k % 12 for k in range(16)] and di.tolist() == list(range(8)) * 2  # 8 val images
    test = np.load(prepared_path("imagenet", custom, 28) / "test.npy")
    x, y = callback.pairs
    assert x.shape == (16, 3, 28, 28) and y.shape == (16, 1, 28, 28) and x.dtype == torch.uint8
    assert torch.equal(x, torch.from_numpy(test[ri]).permute(0, 3, 1, 2))


def test_reference_without_prepared_arrays_falls_back_to_jpeg(reference_data, tmp_path) -> None:
    data_dir, custom = reference_data
    spec = DataSpec("fashion_mnist", str(data_dir), img_size=28)  # default root <data_dir>/prepared: nothing there
    callback = PlasticityCallback("imagenet", every_n_steps=1, n_pairs=16, batch_size=16, groups=("ln1",))
    _fit(DataModule(spec, micro_batch_size=8), callback, tmp_path)
    assert callback.reference_prepared is False and callback.reference_spec.prepared_dir is None
    # the JPEG path decodes exactly what the preparation stored
    test = np.load(prepared_path("imagenet", custom, 28) / "test.npy")
    ri, _ = callback.pair_indices
    assert torch.equal(callback.pairs[0], torch.from_numpy(test[ri]).permute(0, 3, 1, 2))
    jpeg = load_splits(callback.reference_spec)
    assert not jpeg.prepared and len(jpeg.test) == 12


def test_callback_config_takes_its_data_from_the_run() -> None:
    import hydra
    from omegaconf import OmegaConf

    node = OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "callbacks" / "plasticity.yaml").plasticity
    assert "data_dir" not in node and "severity" not in node
    callback = hydra.utils.instantiate(node)
    assert isinstance(callback, PlasticityCallback) and callback.reference == "imagenet"
    assert callback.groups == GROUPS and len(GROUPS) == 5

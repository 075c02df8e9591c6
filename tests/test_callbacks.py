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

OPTIONS = dict(every_n_steps=100, n_pairs=256, batch_size=128, mode="embedding", groups=GROUPS, downstream=None,
               downstream_classes=None, window=None)
"""conf/callbacks/plasticity.yaml's options (the constructor has no defaults of its own)."""


def plasticity_callback(reference, **options):
    return PlasticityCallback(reference, **{**OPTIONS, **options})


def test_callback_logs_group_plasticity_equal_to_a_direct_measurement(micro_vit, tmp_path):
    data_dir = write_fashion_mnist(tmp_path / "data", n_train=200, n_test=100)
    dm = DataModule(DataSpec("fashion_mnist", str(data_dir), img_size=28), micro_batch_size=16, seed=0, num_workers=0)
    selection = select(micro_vit, "mha")
    freeze(micro_vit, selection)
    tf = lambda train: DeviceTransform(28, [0.5] * 3, [0.5] * 3, train=train)  # noqa: E731
    module = FinetuneModule(micro_vit, selection, 10, functools.partial(torch.optim.SGD, lr=0.0),
                            max_steps=4, warmup_steps=0, train_transform=tf(True), eval_transform=tf(False))
    callback = plasticity_callback("fashion_mnist", every_n_steps=2, n_pairs=24, batch_size=10)
    logger = L.pytorch.loggers.CSVLogger(tmp_path, name="", version="")
    trainer = L.Trainer(accelerator="cpu", max_steps=4, logger=logger, callbacks=[callback], default_root_dir=tmp_path,
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
    callback = plasticity_callback("imagenet", every_n_steps=1, n_pairs=16, batch_size=6, groups=("mha", "fc2"))
    _fit(DataModule(spec, micro_batch_size=8, num_workers=0), callback, tmp_path)
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
    callback = plasticity_callback("imagenet", every_n_steps=1, n_pairs=16, batch_size=16, groups=("ln1",))
    _fit(DataModule(spec, micro_batch_size=8, num_workers=0), callback, tmp_path)
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


# ----------------------------------------------------------------------------- during pretraining


def test_pretraining_writes_the_csv_from_the_random_init(tmp_path) -> None:
    """task=pretrain: every weight trains, the downstream images come from the held-out classes of
    another dataset; the CSV's step 0 equals a direct measurement of the random init, and a
    restored callback keeps its rows and does not measure the same step twice."""
    import copy
    import csv

    data_dir = write_fashion_mnist(tmp_path / "data", n_train=200, n_test=100)
    spec = DataSpec("fashion_mnist", str(data_dir), img_size=28, classes=(0, 1, 2, 3, 4), num_classes=5)
    dm = DataModule(spec, micro_batch_size=16, seed=0, num_workers=0)
    torch.manual_seed(0)
    net = create_model("vit_micro_patch7_28", 5, depth=2)
    init = copy.deepcopy(net).eval()
    tf = lambda train: DeviceTransform(28, [0.5] * 3, [0.5] * 3, train=train)  # noqa: E731
    module = FinetuneModule(net, select(net, "all"), 5, functools.partial(torch.optim.AdamW, lr=1e-2),
                            max_steps=4, warmup_steps=0, train_transform=tf(True), eval_transform=tf(False))
    callback = plasticity_callback("fashion_mnist", every_n_steps=2, n_pairs=24, batch_size=10,
                                  downstream="fashion_mnist_c/snow", downstream_classes=[5, 6, 7, 8, 9])
    trainer = L.Trainer(accelerator="cpu", max_steps=4, logger=False, callbacks=[callback], default_root_dir=tmp_path,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, num_sanity_val_steps=0)
    trainer.fit(module, datamodule=dm)

    with open(tmp_path / "plasticity_during_training.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["step", "group", "block", "mean"]
    assert sorted({int(r["step"]) for r in rows}) == [0, 2, 4]
    assert len(rows) == 3 * 5 * (2 + 1)  # steps x groups x (2 blocks + their mean)
    # the downstream half: the snow set's validation images of classes 5-9 only; snow holds Fashion-MNIST's test
    # images, the reference's: pairs are drawn from disjoint examples (reference even indices, downstream odd)
    snow = load_splits(DataSpec("fashion_mnist_c/snow", str(data_dir), img_size=28, classes=(5, 6, 7, 8, 9),
                                num_classes=5))
    ref = load_splits(DataSpec("fashion_mnist", str(data_dir)))
    (ref_list, ref_ids), (snow_list, snow_ids) = ref.examples["test"], snow.examples["val"]
    assert ref_list == snow_list == "fashion_mnist/test" and np.intersect1d(ref_ids, snow_ids).size
    ref_rows, snow_rows = np.flatnonzero(ref_ids % 2 == 0), np.flatnonzero(snow_ids % 2 == 1)
    assert callback.pairs_from.startswith("disjoint examples of fashion_mnist/test")
    ri, di = callback.pair_indices
    assert not set(ref_ids[ref_rows][ri]) & set(snow_ids[snow_rows][di])  # no image meets its snowy copy
    assert torch.equal(callback.pairs[1], torch.from_numpy(snow.val.images[snow_rows][di]).permute(0, 3, 1, 2))
    assert torch.equal(callback.pairs[0], torch.from_numpy(ref.test.images[ref_rows][ri]).permute(0, 3, 1, 2))
    x, y = callback.pairs
    batches = (tf(False)(torch.cat([x[i:i + 10], y[i:i + 10]])) for i in range(0, 24, 10))
    direct = measure(init, batches).summary()
    at = {(int(r["step"]), r["group"], r["block"]): float(r["mean"]) for r in rows}
    for r in direct:
        assert at[(0, r["group"], str(r["block"]))] == pytest.approx(r["mean"], rel=1e-5)
    for g in GROUPS:
        assert at[(0, g, "all")] == pytest.approx(np.mean([r["mean"] for r in direct if r["group"] == g]), rel=1e-6)
        assert at[(4, g, "all")] != pytest.approx(at[(0, g, "all")], rel=1e-3)  # the weights moved

    restored = plasticity_callback("fashion_mnist", every_n_steps=2)
    restored.load_state_dict(callback.state_dict())
    assert restored.rows == callback.rows and restored._last_step == 4


def test_downstream_classes_are_checked_before_compute() -> None:
    from hydra import compose, initialize_config_dir

    from plasticity.recipes import validate

    conf = str(Path(__file__).resolve().parents[1] / "conf")
    with initialize_config_dir(conf, version_base=None):
        cfg = compose("config", overrides=[
            "task=pretrain", "model=vit_micro", "dataset=fashion_mnist", "dataset.classes=[0,1,11]",
            "dataset.num_classes=3", "callbacks=plasticity", "callbacks.plasticity.reference=fashion_mnist",
            "callbacks.plasticity.downstream=fashion_mnist_c/snw", "callbacks.plasticity.downstream_classes=[5,5]"],
            return_hydra_config=True)
    problems = "\n".join(validate(cfg, local=True))
    assert "dataset.classes=[0, 1, 11] must be distinct class indices in 0..9 of fashion_mnist" in problems
    assert "callbacks.plasticity.downstream='fashion_mnist_c/snw' is not a dataset. Did you mean fashion_mnist_c/snow?" \
        in problems

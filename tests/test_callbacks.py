"""PlasticityCallback: logs P(f) per group during finetuning, equal to a direct measurement."""

import functools

import lightning as L
import numpy as np
import pytest
import torch

from plasticity.augment import DeviceTransform
from plasticity.callbacks import PlasticityCallback
from plasticity.components import freeze, select
from plasticity.data import DataModule, load_splits
from plasticity.measure import measure, pair_indices
from plasticity.module import FinetuneModule
from tests.fixtures import write_fashion_mnist


def test_callback_logs_group_plasticity_equal_to_a_direct_measurement(micro_vit, tmp_path):
    data_dir = write_fashion_mnist(tmp_path / "data", n_train=200, n_test=100)
    dm = DataModule("fashion_mnist", str(data_dir), micro_batch_size=16, seed=0)
    selection = select(micro_vit, "mha")
    freeze(micro_vit, selection)
    tf = lambda train: DeviceTransform(28, [0.5] * 3, [0.5] * 3, train=train)  # noqa: E731
    module = FinetuneModule(micro_vit, selection, 10, functools.partial(torch.optim.SGD, lr=0.0),
                            max_steps=4, warmup_steps=0, train_transform=tf(True), eval_transform=tf(False))
    callback = PlasticityCallback("fashion_mnist", str(data_dir), every_n_steps=2, n_pairs=24, batch_size=10)
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
    ref, down = load_splits("fashion_mnist", data_dir).test, dm.splits.val
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

"""The step progress bar: counted in optimizer steps, with loss and val/acc; plain lines in a log file."""

import functools
import io

import lightning as L
import torch
from rich.console import Console

from plasticity.components import freeze, select
from plasticity.data import DataSpec
from plasticity.data.augment import DeviceTransform
from plasticity.data.datamodule import DataModule
from plasticity.module import FinetuneModule
from plasticity.progress import StepProgressBar
from tests.fixtures import write_fashion_mnist


def fit(micro_vit, tmp_path, bar, accumulation=1):
    data_dir = write_fashion_mnist(tmp_path / "data", n_train=200, n_test=100)
    dm = DataModule(DataSpec("fashion_mnist", str(data_dir), img_size=28), micro_batch_size=8, seed=0, num_workers=0)
    selection = select(micro_vit, "ln1")
    freeze(micro_vit, selection)
    tf = lambda train: DeviceTransform(28, [0.5] * 3, [0.5] * 3, train=train)  # noqa: E731
    module = FinetuneModule(micro_vit, selection, 10, functools.partial(torch.optim.SGD, lr=0.01), max_steps=6,
                            warmup_steps=0, train_transform=tf(True), eval_transform=tf(False))
    trainer = L.Trainer(accelerator="cpu", max_steps=6, accumulate_grad_batches=accumulation,
                        val_check_interval=3 * accumulation, check_val_every_n_epoch=None, logger=False,
                        callbacks=[bar], enable_checkpointing=False, enable_model_summary=False,
                        num_sanity_val_steps=0, limit_val_batches=2)
    trainer.fit(module, datamodule=dm)
    return trainer


def test_log_file_output_is_one_line_per_validation_in_optimizer_steps(micro_vit, tmp_path):
    bar = StepProgressBar()
    out = io.StringIO()
    bar._console = Console(file=out, width=200, force_terminal=False)
    trainer = fit(micro_vit, tmp_path, bar, accumulation=2)
    lines = out.getvalue().splitlines()
    assert [line.split("  ")[0] for line in lines] == ["step 3/6", "step 6/6"]  # optimizer steps, not batches
    assert all("loss " in line and "val/acc " in line and "%" in line for line in lines)
    assert trainer.global_step == 6
    assert "Epoch" not in out.getvalue()


def test_terminal_bar_counts_optimizer_steps(micro_vit, tmp_path):
    bar = StepProgressBar()
    out = io.StringIO()
    bar._console = Console(file=out, width=200, force_terminal=True)
    fit(micro_vit, tmp_path, bar)
    text = out.getvalue()
    assert "step 6/6" in text and "Epoch" not in text

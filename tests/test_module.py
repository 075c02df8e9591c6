"""The finetuning LightningModule: what trains, what is logged, the schedule, divergence, checkpoints."""

import functools
import math

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from plasticity.data.augment import DeviceTransform
from plasticity.components import freeze, select
from plasticity.module import Diverged, FinetuneModule, warmup_cosine
from tests.fixtures import metric_rows


def make_module(net, component, lr=0.1, max_steps=10, warmup_steps=2):
    selection = select(net, component, train_final_norm=True)
    freeze(net, selection)
    mean, std = [0.5] * 3, [0.5] * 3
    return FinetuneModule(
        net, selection, num_classes=10,
        optimizer=functools.partial(torch.optim.SGD, lr=lr, momentum=0.9),
        max_steps=max_steps, warmup_steps=warmup_steps,
        train_transform=DeviceTransform(28, mean, std, train=True),
        eval_transform=DeviceTransform(28, mean, std, train=False),
    )


def loader(n=32, batch=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 1, 28, 28), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 10, (n,), generator=g)
    return DataLoader(TensorDataset(images, labels), batch_size=batch)


def trainer(**kwargs):
    args = dict(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    return L.Trainer(**{**args, **kwargs})


@pytest.mark.parametrize("component", ["ln2", "mha", "head"])
def test_one_step_changes_only_the_group_head_and_final_norm(micro_vit, component):
    module = make_module(micro_vit, component)
    before = {n: p.detach().clone() for n, p in micro_vit.named_parameters()}
    optimizer = module.configure_optimizers()["optimizer"]
    images, labels = next(iter(loader()))
    loss = torch.nn.functional.cross_entropy(micro_vit(module.eval_transform(images)), labels)
    loss.backward()
    optimizer.step()
    changed = {n for n, p in micro_vit.named_parameters() if not torch.equal(p, before[n])}
    assert changed == set(module.selection.trainable)
    frozen = [p for n, p in micro_vit.named_parameters() if n not in module.selection.trainable]
    assert frozen and all(p.grad is None for p in frozen)
    state_ids = {id(p) for p in optimizer.state}
    assert state_ids == {id(p) for n, p in micro_vit.named_parameters() if n in module.selection.trainable}
    n_state = sum(p.numel() for p in optimizer.state)
    assert n_state == module.selection.counts["total"]


class HandNorms(L.Callback):
    """Computes the group's gradient norm by hand at the same moment the module logs it."""

    def on_before_optimizer_step(self, trainer, module, optimizer):
        params = dict(module.net.named_parameters())
        self.group = math.sqrt(sum(float((params[n].grad ** 2).sum()) for n in module.selection.group))
        self.block0 = math.sqrt(sum(float((params[n].grad ** 2).sum())
                                    for n in module.selection.blocks[0] if n in module.selection.group))
        self.head = math.sqrt(sum(float((params[n].grad ** 2).sum()) for n in module.selection.head))

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.after_clip = math.sqrt(sum(float((p.grad ** 2).sum())
                                        for p in module.net.parameters() if p.grad is not None))


def test_logged_grad_norms_equal_hand_computation_before_clipping(micro_vit, tmp_path):
    module = make_module(micro_vit, "mha")
    hand = HandNorms()
    clip = 1e-4
    csv = L.pytorch.loggers.CSVLogger(tmp_path, name="", version="")
    t = trainer(callbacks=[hand], logger=csv, gradient_clip_val=clip, max_steps=1)
    t.fit(module, train_dataloaders=loader())
    columns = ["grad_norm/mha", "grad_norm/mha/block_0", "grad_norm/mha/block_1", "grad_norm/head", "lr"]
    rows = metric_rows(tmp_path / "metrics.csv", columns)
    assert all(len(rows[c]) == 1 for c in columns), rows  # one step, every group's and block's norm
    logged = {column: value for column, [(_, value)] in rows.items()}
    assert float(logged["grad_norm/mha"]) == pytest.approx(hand.group, rel=1e-5)
    assert float(logged["grad_norm/mha/block_0"]) == pytest.approx(hand.block0, rel=1e-5)
    assert float(logged["grad_norm/head"]) == pytest.approx(hand.head, rel=1e-5)
    assert hand.group > 10 * clip  # so logging after clipping would have given ~clip
    assert float(logged["lr"]) == pytest.approx(0.1 * 1 / 2)  # first warmup step of 2


def test_accumulation_logs_one_row_per_optimizer_step(micro_vit, tmp_path):
    module = make_module(micro_vit, "ln1", max_steps=3, warmup_steps=0)
    csv = L.pytorch.loggers.CSVLogger(tmp_path, name="", version="")
    t = trainer(logger=csv, max_steps=3, accumulate_grad_batches=2, log_every_n_steps=1)
    t.fit(module, train_dataloaders=loader(n=48, batch=8))
    assert [step for step, _ in metric_rows(tmp_path / "metrics.csv", ["train/loss"])["train/loss"]] == [0, 1, 2]
    assert t.global_step == 3


class StopAt(L.Callback):
    """Tells the run to stop at the start of one step (as a stop signal or early stopping would)."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        trainer.should_stop = trainer.global_step == self.step


def test_the_step_a_run_stops_at_is_logged_between_logging_steps(micro_vit, tmp_path):
    module = make_module(micro_vit, "ln1", max_steps=20, warmup_steps=0)
    csv = L.pytorch.loggers.CSVLogger(tmp_path, name="", version="")
    t = trainer(callbacks=[StopAt(3)], logger=csv, max_steps=20, log_every_n_steps=5)
    t.fit(module, train_dataloaders=loader(n=160, batch=8))
    assert t.global_step == 4
    assert [step for step, _ in metric_rows(tmp_path / "metrics.csv", ["train/loss"])["train/loss"]] == [0, 3]


def test_warmup_cosine_golden_values():
    f = warmup_cosine(max_steps=10, warmup_steps=4)
    assert [f(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert f(4) == 1.0
    assert f(7) == pytest.approx(0.5 * (1 + math.cos(math.pi * 3 / 6)))
    assert f(10) == pytest.approx(0.0)
    g = warmup_cosine(max_steps=4, warmup_steps=0)
    assert [round(g(s), 6) for s in range(4)] == [1.0, round(0.5 * (1 + math.cos(math.pi / 4)), 6), 0.5,
                                                    round(0.5 * (1 + math.cos(3 * math.pi / 4)), 6)]


def test_nan_loss_raises_diverged(micro_vit):
    module = make_module(micro_vit, "fc1")
    micro_vit.head.register_forward_hook(lambda mod, inp, out: out * float("nan"))
    with pytest.raises(Diverged, match="nan"):
        trainer(max_steps=2).fit(module, train_dataloaders=loader())


def test_checkpoint_holds_only_trainable_parameters(micro_vit, tmp_path):
    module = make_module(micro_vit, "ln1")
    t = trainer(max_steps=1)
    t.fit(module, train_dataloaders=loader())
    t.save_checkpoint(tmp_path / "x.ckpt")
    keys = set(torch.load(tmp_path / "x.ckpt", weights_only=False)["state_dict"])
    assert keys == {f"net.{n}" for n in module.selection.trainable}
    assert all(".norm1." in k or k.startswith(("net.head.", "net.norm.")) for k in keys)

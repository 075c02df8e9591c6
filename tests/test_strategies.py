"""Beyond one group: combinations, block subsets, per-group learning rates and ``component=auto``."""

import csv
import functools
import math

import lightning as L
import pytest
import torch

from plasticity.auto import choose, measure_units, unit_params
from plasticity.components import (
    GROUPS,
    component_tag,
    freeze,
    label,
    parse_component,
    parse_tag,
    select,
    select_units,
    strategy_of,
)
from plasticity.data.augment import DeviceTransform
from plasticity.module import FinetuneModule
from tests.test_components import micro_group_counts, micro_unit_counts
from tests.test_launch import launch, result, run_dir
from tests.test_module import loader, trainer


def numel(net, predicate):
    return sum(p.numel() for n, p in net.named_parameters() if predicate(n))


def module_for(net, selection, lr=0.1, lr_scale=None):
    freeze(net, selection)
    mean, std = [0.5] * 3, [0.5] * 3
    return FinetuneModule(net, selection, 10, optimizer=functools.partial(torch.optim.SGD, lr=lr, momentum=0.9),
                          max_steps=10, warmup_steps=0, train_transform=DeviceTransform(28, mean, std, train=True),
                          eval_transform=DeviceTransform(28, mean, std, train=False), lr_scale=lr_scale)


# --- names -----------------------------------------------------------------------------------------

def test_tags_and_kinds():
    assert component_tag("mha") == "mha" and strategy_of("mha") == "group"
    assert component_tag("mha+fc1", [8, 9, 10, 11]) == "mha+fc1_b8-11"
    assert component_tag("fc2", [2, 5]) == "fc2_b2.5" and strategy_of("fc2_b2.5") == "combination"
    assert component_tag("mha", None, {"name": "lora", "rank": 8}) == "mha_lora_r8"
    assert component_tag("mha", None, {"name": "none"}) == "mha"
    assert component_tag("auto", None, None, 0.05) == "auto_budget0.05" and strategy_of("auto_budget0.05") == "auto"
    assert (strategy_of("all"), strategy_of("all_b8"), strategy_of("ln1+ln2")) == ("full", "full", "combination")


def test_the_report_reads_every_tag_back():
    assert parse_tag("mha+fc1_b8-11_lora_r8") == {"groups": ["mha", "fc1"], "blocks": "b8-11", "adapter": "lora",
                                                   "rank": 8, "budget": None}
    assert parse_tag("auto_budget0.05")["budget"] == 0.05 and parse_tag("mha_budget0.05") is None
    kinds = {t: strategy_of(t) for t in ("mha", "all", "head", "mha+fc1", "fc2_b2.5", "mha_lora_r8", "auto",
                                          "auto_budget0.05", "probe")}
    assert kinds == {"mha": "group", "all": "full", "head": "head", "mha+fc1": "combination",
                     "fc2_b2.5": "combination", "mha_lora_r8": "lora", "auto": "auto", "auto_budget0.05": "auto",
                     "probe": "probe"}
    assert label("auto_budget0.05") == "auto budget 0.05" and label("mha") == "MHA"


@pytest.mark.parametrize("bad, says", [("mha+all", "'all' is not one"), ("mha+mha", "a group repeats"),
                                       ("attn", "Choices: ln1, mha, ln2, fc1, fc2, emb, all, head, auto")])
def test_bad_component_names_say_the_choices(bad, says):
    with pytest.raises(ValueError, match="Fix:") as err:
        parse_component(bad)
    assert says in str(err.value)


# --- what trains -----------------------------------------------------------------------------------

def test_combination_trains_exactly_its_groups(micro_vit):
    sel = select(micro_vit, "mha+fc1")
    hand = numel(micro_vit, lambda n: ".attn." in n or ".mlp.fc1." in n)
    assert sel.counts["group"] == hand == select(micro_vit, "mha").counts["group"] + select(micro_vit, "fc1").counts["group"]
    assert list(sel.by_group) == ["mha", "fc1"]
    module = module_for(micro_vit, sel)
    assert numel(micro_vit, lambda n: dict(micro_vit.named_parameters())[n].requires_grad) == sel.counts["total"]
    images, labels = next(iter(loader()))
    torch.nn.functional.cross_entropy(micro_vit(module.eval_transform(images)), labels).backward()
    with_grad = {n for n, p in micro_vit.named_parameters() if p.grad is not None}
    assert with_grad == set(sel.trainable)


def test_block_subset_trains_only_those_blocks(micro_vit):
    sel = select(micro_vit, "mha+ln1", blocks=[1])
    assert sel.counts["group"] == numel(micro_vit, lambda n: n.startswith("blocks.1.") and (".attn." in n or ".norm1." in n))
    assert set(sel.blocks) == {1} and all(n.startswith("blocks.1.") for n in sel.group)
    with pytest.raises(ValueError, match="the model has 2 blocks"):
        select(micro_vit, "mha", blocks=[2])


class GroupNorms(L.Callback):
    """Each group's gradient norm (and in block 0) by hand, when the module logs them."""

    def on_before_optimizer_step(self, trainer, module, optimizer):
        params = dict(module.net.named_parameters())
        sq = lambda names: math.sqrt(sum(float((params[n].grad ** 2).sum()) for n in names))  # noqa: E731
        self.norms = {f"grad_norm/{g}": sq(names) for g, names in module.selection.by_group.items()}
        self.norms.update({f"grad_norm/{g}/block_0": sq([n for n in names if n.startswith("blocks.0.")])
                           for g, names in module.selection.by_group.items()})


def test_combination_logs_each_groups_gradient_norm(micro_vit, tmp_path):
    sel = select(micro_vit, "mha+fc1", blocks=[0])
    hand = GroupNorms()
    logger = L.pytorch.loggers.CSVLogger(tmp_path, name="", version="")
    trainer(callbacks=[hand], logger=logger, max_steps=1).fit(module_for(micro_vit, sel), train_dataloaders=loader())
    with open(tmp_path / "metrics.csv", newline="") as f:
        [logged] = [{k: v for k, v in row.items() if v} for row in csv.DictReader(f)]
    assert set(hand.norms) == {"grad_norm/mha", "grad_norm/fc1", "grad_norm/mha/block_0", "grad_norm/fc1/block_0"}
    for key, value in hand.norms.items():
        assert float(logged[key]) == pytest.approx(value, rel=1e-5), key
    assert "grad_norm/mha/block_1" not in logged and "grad_norm/mha+fc1" not in logged


def test_lr_scale_gives_the_group_its_own_learning_rate(micro_vit):
    module = module_for(micro_vit, select(micro_vit, "mha+ln1"), lr=0.02, lr_scale={"ln1": 10})
    optimizer = module.configure_optimizers()["optimizer"]
    base, scaled = optimizer.param_groups
    assert base["lr"] == pytest.approx(0.02) and scaled["lr"] == pytest.approx(0.2) and scaled["name"] == "ln1"
    names = {id(p): n for n, p in micro_vit.named_parameters()}
    assert {names[id(p)] for p in scaled["params"]} == set(module.selection.by_group["ln1"])
    assert sum(p.numel() for g in optimizer.param_groups for p in g["params"]) == module.selection.counts["total"]


# --- component=auto --------------------------------------------------------------------------------

def pair_batches(seed=0, n=32, batch=16):
    g = torch.Generator().manual_seed(seed)
    images = torch.rand(2 * n, 3, 28, 28, generator=g)
    for start in range(0, n, batch):
        yield torch.cat([images[start:start + batch], images[n + start:n + start + batch]])


def test_auto_picks_the_group_made_most_plastic(micro_vit):
    with torch.no_grad():
        for block in micro_vit.blocks:
            block.mlp.fc1.weight.mul_(100.0)  # FC1's rate of change grows 100x
    table = measure_units(micro_vit, pair_batches())
    assert choose(table, None, 10**6) == [("fc1", None)]
    assert table == measure_units(micro_vit, pair_batches())  # same pairs, same choice


def test_auto_budget_takes_the_most_plastic_units_that_fit(micro_vit):
    table = measure_units(micro_vit, pair_batches())
    block, _ = micro_unit_counts()
    params = {(g, b): n for b in range(2) for g, n in block.items()}  # by hand, not plasticity's own table
    assert unit_params(micro_vit) == params
    assert {(r["group"], r["block"]): r["params"] for r in table} == params
    total = sum(p.numel() for p in micro_vit.parameters())
    assert total == sum(micro_group_counts(depth=2).values())
    budget = 0.3
    units = choose(table, budget, total)
    ranked = sorted(table, key=lambda r: (-r["mean"], r["block"], GROUPS.index(r["group"])))  # ties: earlier first
    used, hand = 0, []
    for r in ranked:  # greedy by plasticity, by hand
        if used + r["params"] <= budget * total:
            hand.append((r["group"], r["block"]))
            used += r["params"]
    assert units == hand and sum(params[u] for u in units) <= budget * total
    sel = select_units(micro_vit, units)
    assert sel.counts["group"] == sum(params[u] for u in units)


# --- end to end ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_combination_with_blocks_and_lr_scale_runs_to_a_done_record(tmp_path, data_dir, micro_vit):
    proc = launch(tmp_path, data_dir, "component.name=mha+ln1", "component.blocks=[1]", "component.lr_scale={ln1: 10}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = result(run_dir(tmp_path, "mha+ln1_b1"))
    assert rec["status"] == "done" and rec["component"] == "mha+ln1_b1" and rec["strategy"] == "combination"
    assert rec["groups"] == ["mha", "ln1"] and rec["blocks"] == [1] and rec["lr_scale"] == {"ln1": 10}
    assert rec["trainable_params"] == numel(micro_vit, lambda n: n.startswith("blocks.1.") and (".attn." in n or ".norm1." in n))


@pytest.mark.slow
def test_auto_runs_to_a_done_record_with_its_choice(tmp_path, data_dir):
    args = ["component=auto", "component.auto.reference=fashion_mnist", "component.auto.n_pairs=32",
            "component.auto.batch_size=16", "component.auto.budget=0.2"]
    proc = launch(tmp_path, data_dir, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = result(run_dir(tmp_path, "auto_budget0.2"))
    assert rec["status"] == "done" and rec["strategy"] == "auto" and rec["selected"]
    assert len(rec["auto_table"]) == 5 * 2 and rec["auto_s"] > 0
    assert rec["auto_s"] < rec["wall_s"]  # the measurement is part of the job's wall time
    chosen = {tuple(u.split("@")) for u in rec["selected"]}
    block, _ = micro_unit_counts()  # by hand, not the record's own table
    assert all(r["params"] == block[r["group"]] for r in rec["auto_table"])
    fit = sum(block[group] for group, _ in chosen)
    assert rec["trainable_params"] == fit
    (tmp_path / "again").mkdir()
    again = launch(tmp_path / "again", data_dir, *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert result(run_dir(tmp_path / "again", "auto_budget0.2"))["selected"] == rec["selected"]  # same seed, same choice


@pytest.mark.slow
def test_lora_on_mha_runs_to_a_done_record_and_exports_merged_weights(tmp_path, data_dir):
    proc = launch(tmp_path, data_dir, "component=mha", "adapter=lora", "adapter.rank=4", "task.export_merged=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = run_dir(tmp_path, "mha_lora_r4")
    rec = result(path)
    assert rec["status"] == "done" and rec["strategy"] == "lora" and rec["adapter"]["rank"] == 4
    per_block = 4 * (64 + 192) + 4 * (64 + 64)  # r x (in + out) for attn.qkv and attn.proj, width 64
    assert rec["trainable_params"] == 2 * per_block == 3072
    ckpt = torch.load(path / "checkpoints" / "best.ckpt", map_location="cpu", weights_only=False)["state_dict"]
    assert sum(v.numel() for v in ckpt.values()) == rec["params"]["total"]  # trainable weights only
    from plasticity.models import create_model

    merged = create_model("vit_micro_patch7_28", 10, weights_file=rec["weights_file"], depth=2)
    assert not any("lora" in n or "base_layer" in n for n, _ in merged.named_parameters())


@pytest.mark.parametrize("overrides, message", [
    (["component=ln1", "adapter=lora"], "LoRA adapts nn.Linear weights and ln1 is a LayerNorm"),
    (["component=auto", "adapter=lora", "component.auto.reference=fashion_mnist"], "component=auto with adapter=lora"),
    (["component.name=mha+fc1", "component.blocks=[5]"], "component.blocks=[5] has block 5, but the model has 2 blocks"),
    (["component.name=mha+fc1", "component.lr_scale={ln1: 10}"], "component.lr_scale has 'ln1', which is not trained"),
    (["component=auto", "component.auto.budget=2"], "component.auto.budget=2 must be a number in (0, 1] or null"),
    (["component=auto", "component.blocks=[1]", "component.auto.reference=fashion_mnist"], "the measurement chooses the blocks"),
])
def test_bad_strategy_input_fails_before_compute(tmp_path, data_dir, overrides, message):
    proc = launch(tmp_path, data_dir, *overrides)
    assert proc.returncode == 1 and message in proc.stdout + proc.stderr
    assert not (tmp_path / "outputs").exists() or not any((tmp_path / "outputs").rglob("*.json"))

"""LoRA on component groups (plasticity.adapters) on the tiny random-init micro ViT.

The micro ViT (depth 2, width 64, MLP 256): qkv 64 -> 192, proj 64 -> 64, fc1 64 -> 256, fc2 256 -> 64,
head 64 -> 10 (650 parameters), final norm 128 parameters. Each adapted Linear W [out, in] gets
r * (in + out) LoRA parameters.
"""

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from plasticity.adapters import (
    apply_lora,
    check_adapter,
    export_merged,
    lora_names,
    merge_lora,
    merged_state_dict,
    target_modules,
)
from plasticity.components import classify
from plasticity.models import create_model
from plasticity.validate import ConfigError

CONF = Path(__file__).resolve().parents[1] / "conf"
R = 4
HEAD, FINAL_NORM = 64 * 10 + 10, 2 * 64
QKV, PROJ, FC1, FC2 = R * (64 + 192), R * (64 + 64), R * (64 + 256), R * (256 + 64)  # 1024, 512, 1280, 1280


def micro(seed: int = 0):
    torch.manual_seed(seed)
    return create_model("vit_micro_patch7_28", num_classes=10, depth=2)


def images(n: int = 4, seed: int = 1) -> torch.Tensor:
    return torch.randn(n, 3, 28, 28, generator=torch.Generator().manual_seed(seed))


def adapted(groups="mha", blocks=None, seed: int = 0, lora_seed: int = 123, **kwargs):
    net = micro(seed)
    torch.manual_seed(lora_seed)  # lora_A's init
    return apply_lora(net, groups, blocks, rank=R, alpha=kwargs.pop("alpha", 8), dropout=0.0, **kwargs)


def train(net, steps: int, lr: float = 0.5, seed: int = 2):
    """Plain SGD (no momentum) on the parameters with requires_grad; returns the parameters after each step."""
    params = [p for p in net.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=lr)
    gen = torch.Generator().manual_seed(seed)
    history = []
    net.train()
    for _ in range(steps):
        x = torch.randn(8, 3, 28, 28, generator=gen)
        y = torch.randint(0, 10, (8,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        history.append({n: p.detach().clone() for n, p in net.named_parameters()})
    net.eval()
    return history


# ------------------------------------------------------------------------------------ targets


def test_targets_are_the_groups_linears_by_full_name():
    net = micro()
    per_block = lambda *suffixes: [f"blocks.{b}.{s}" for b in (0, 1) for s in suffixes]  # noqa: E731
    assert target_modules(net, ["mha"]) == per_block("attn.qkv", "attn.proj")
    assert target_modules(net, ["fc1"]) == per_block("mlp.fc1")
    assert target_modules(net, ["fc2"], [1]) == ["blocks.1.mlp.fc2"]
    assert target_modules(net, ["mha", "fc1"], [0, 1]) == per_block("attn.qkv", "attn.proj", "mlp.fc1")
    assert target_modules(net, ["mha"], [1]) == ["blocks.1.attn.qkv", "blocks.1.attn.proj"]
    modules = [n for n, _ in net.named_modules()]
    matched = target_modules(net, ["mha", "fc1", "fc2"])
    assert matched == [f"blocks.{b}.{s}" for b in (0, 1) for s in ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2")]
    assert "patch_embed.proj" in modules and "patch_embed.proj" not in matched  # the Conv2d never
    adapted_net, _ = apply_lora(net, ["mha", "fc1", "fc2"], rank=R)  # what peft adapts from the list
    assert sorted({n.split(".lora_")[0] for n in lora_names(adapted_net)}) == sorted(matched)


def test_adapted_model_keeps_its_class_and_computes_exactly_the_base_model():
    net = micro().eval()
    x = images()
    with torch.no_grad():
        before = net(x)
    cls = type(net)
    same, selection = adapted("mha")
    assert type(same) is cls
    with torch.no_grad():
        after = same.eval()(x)
    assert torch.equal(before, after)  # bit for bit: lora_B starts at zero
    assert all(p.abs().sum() == 0 for n, p in same.named_parameters() if ".lora_B." in n)
    assert all(p.abs().sum() > 0 for n, p in same.named_parameters() if ".lora_A." in n)


def test_names_keep_their_group_and_block():
    net, selection = adapted(["mha", "fc1"])
    names = [n for n, _ in net.named_parameters()]
    assert "blocks.0.attn.qkv.base_layer.weight" in names and "blocks.0.attn.qkv.weight" not in names
    assert classify("blocks.0.attn.qkv.base_layer.weight") == ("mha", 0)
    assert classify("blocks.1.attn.proj.lora_A.default.weight") == ("mha", 1)
    assert classify("blocks.1.mlp.fc1.lora_B.default.weight") == ("fc1", 1)
    for name in names:  # every name still classifies (resolve raises otherwise)
        classify(name)
    assert selection.component == "mha+fc1"
    assert set(selection.group) == set(lora_names(net)) == {
        f"blocks.{b}.{m}.lora_{ab}.default.weight" for b in (0, 1) for m in ("attn.qkv", "attn.proj", "mlp.fc1")
        for ab in "AB"}
    assert selection.head == ("head.weight", "head.bias")
    assert selection.final_norm == ("norm.weight", "norm.bias")
    assert selection.trainable == frozenset(selection.group) | {"head.weight", "head.bias", "norm.weight", "norm.bias"}
    assert sorted(selection.blocks) == [0, 1]
    parts = getattr(selection, "parts", None)  # per-group names where Selection has the field
    if hasattr(selection, "parts"):
        assert {g: set(v) for g, v in parts.items()} == {
            g: {n for n in selection.group if classify(n)[0] == g} for g in ("mha", "fc1")}
    assert all(n.startswith(f"blocks.{b}.") and ".lora_" in n for b, ns in selection.blocks.items() for n in ns)
    assert set(selection.numel) == set(names)


# ------------------------------------------------------------------------------------- counts


@pytest.mark.parametrize("groups, blocks, per_model", [
    (["mha"], None, 2 * (QKV + PROJ)),            # 3,072
    (["fc1"], None, 2 * FC1),                     # 2,560
    (["fc2"], None, 2 * FC2),                     # 2,560
    (["mha", "fc1"], None, 2 * (QKV + PROJ + FC1)),  # 5,632
    (["mha"], [1], QKV + PROJ),                   # 1,536
])
def test_trainable_count_is_rank_times_in_plus_out(groups, blocks, per_model):
    net, selection = adapted(groups, blocks)
    lora = sum(p.numel() for n, p in net.named_parameters() if p.requires_grad and ".lora_" in n)
    trainable = sum(p.numel() for p in net.parameters() if p.requires_grad)
    assert lora == per_model == selection.counts["group"]
    assert trainable == per_model + HEAD + FINAL_NORM == selection.counts["total"]
    assert selection.counts["head"] == HEAD and selection.counts["final_norm"] == FINAL_NORM
    assert {n for n, p in net.named_parameters() if p.requires_grad} == set(selection.trainable)
    if blocks == [1]:
        assert list(selection.blocks) == [1]


def test_final_norm_frozen_when_asked():
    net, selection = adapted("mha", train_final_norm=False)
    assert not net.norm.weight.requires_grad and selection.counts["final_norm"] == 0
    assert selection.counts["total"] == 2 * (QKV + PROJ) + HEAD


# ----------------------------------------------------------------------------------- training


def test_only_lora_head_and_norm_move_and_lora_a_waits_one_step():
    net, selection = adapted(["mha", "fc2"])
    start = {n: p.detach().clone() for n, p in net.named_parameters()}
    first, second = train(net, 2)
    for name, value in start.items():
        if name in selection.trainable:
            continue
        assert torch.equal(first[name], value) and torch.equal(second[name], value), name  # frozen: bit-identical
    for name in selection.group:
        if ".lora_A." in name:  # lora_B = 0 at step 1, so dL/dA = 0: A moves from step 2 only
            assert torch.equal(first[name], start[name]), name
            assert not torch.equal(second[name], first[name]), name
        else:
            assert not torch.equal(first[name], start[name]), name
    for name in ("head.weight", "norm.weight"):
        assert not torch.equal(first[name], start[name])


def test_finetune_module_grad_norms_and_checkpoint_keep_lora_names():
    from functools import partial

    from plasticity.module import FinetuneModule

    net, selection = adapted("mha")
    module = FinetuneModule(net, selection, 10, partial(torch.optim.SGD, lr=0.1), max_steps=4, warmup_steps=1,
                            train_transform=torch.nn.Identity(), eval_transform=torch.nn.Identity())
    optimizer = module.configure_optimizers()["optimizer"]
    assert sum(p.numel() for g in optimizer.param_groups for p in g["params"]) == selection.counts["total"]
    torch.nn.functional.cross_entropy(module(images()), torch.tensor([0, 1, 2, 3])).backward()
    norms = module.grad_norms()
    assert set(norms) == {"grad_norm/mha", "grad_norm/head", "grad_norm/final_norm",
                          "grad_norm/mha/block_0", "grad_norm/mha/block_1"}
    assert norms["grad_norm/mha"] > 0  # lora_B's gradient (lora_A's is zero at the start)
    checkpoint = {"state_dict": {f"net.{k}": v for k, v in net.state_dict().items()}}
    module.on_save_checkpoint(checkpoint)
    assert set(checkpoint["state_dict"]) == {f"net.{n}" for n in selection.trainable}


def test_finetune_module_logs_each_group_of_a_lora_combination():
    from functools import partial

    from plasticity.module import FinetuneModule

    net, selection = adapted(["mha", "fc1"], blocks=[1])
    module = FinetuneModule(net, selection, 10, partial(torch.optim.SGD, lr=0.1), max_steps=4, warmup_steps=1,
                            train_transform=torch.nn.Identity(), eval_transform=torch.nn.Identity())
    torch.nn.functional.cross_entropy(module(images()), torch.tensor([0, 1, 2, 3])).backward()
    norms = module.grad_norms()
    assert {"grad_norm/mha", "grad_norm/fc1", "grad_norm/mha/block_1", "grad_norm/fc1/block_1"} <= set(norms)
    assert not any("block_0" in k for k in norms)
    assert norms["grad_norm/mha"] > 0 and norms["grad_norm/fc1"] > 0


def test_checkpoint_of_trainable_weights_restores_a_freshly_adapted_model():
    net, selection = adapted(["mha", "fc1"])
    train(net, 3)
    saved = {k: v.clone() for k, v in net.state_dict().items() if k in selection.trainable}
    assert len(saved) == len(selection.trainable) and not any("base_layer" in k for k in saved)
    fresh, _ = adapted(["mha", "fc1"], lora_seed=999)  # same base weights, another lora_A init
    x = images()
    with torch.no_grad():
        assert not torch.allclose(fresh(x), net(x))
        missing, unexpected = fresh.load_state_dict(saved, strict=False)
        assert unexpected == [] and set(missing) == set(fresh.state_dict()) - selection.trainable
        assert torch.equal(fresh.eval()(x), net.eval()(x))


# -------------------------------------------------------------------------------------- merge


def test_merged_export_is_a_plain_timm_state_dict_that_create_model_loads(tmp_path):
    net, selection = adapted(["mha", "fc1", "fc2"], alpha=16)
    train(net, 3)
    x = images()
    with torch.no_grad():
        logits = net(x)
        features = net.forward_head(net.forward_features(x), pre_logits=True)
    plain = micro(seed=5)  # another init: everything must come from the file
    merged = merged_state_dict(net)
    assert list(merged) == list(plain.state_dict())  # original names and order, no base_layer/lora keys
    assert lora_names(net)  # merged_state_dict leaves the model adapted
    path = export_merged(net, tmp_path / "merged.safetensors")
    assert path.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # atomic: no temp left
    loaded = create_model("vit_micro_patch7_28", num_classes=10, weights_file=str(path), depth=2).eval()
    assert not any(".lora_" in n or "base_layer" in n for n, _ in loaded.named_parameters())
    with torch.no_grad():
        # create_model resets the head (as for any pretrained file): the features are the model's
        torch.testing.assert_close(loaded.forward_head(loaded.forward_features(x), pre_logits=True), features,
                                   atol=1e-5, rtol=0)
        loaded.head.load_state_dict({"weight": merged["head.weight"], "bias": merged["head.bias"]})
        torch.testing.assert_close(loaded(x), logits, atol=1e-5, rtol=0)
        plain.load_state_dict(merged, strict=True)
        torch.testing.assert_close(plain.eval()(x), logits, atol=1e-5, rtol=0)
        # the update really is in the weights: the merged qkv differs from the base
        assert not torch.allclose(merged["blocks.0.attn.qkv.weight"], net.blocks[0].attn.qkv.base_layer.weight)


def test_merge_lora_in_place_gives_back_the_plain_model():
    net, _ = adapted("fc2")
    train(net, 2)
    x = images()
    with torch.no_grad():
        logits = net(x)
        expected = merged_state_dict(net)
        same = merge_lora(net)
        assert same is net and type(net.blocks[0].mlp.fc2) is torch.nn.Linear
        assert lora_names(net) == () and list(net.state_dict()) == list(micro().state_dict())
        torch.testing.assert_close(net(x), logits, atol=1e-5, rtol=0)
        for key, value in net.state_dict().items():
            torch.testing.assert_close(value, expected[key], atol=1e-6, rtol=0)


def test_lora_on_beit_attention_with_q_bias_trains_through_qkv_and_merges_back():
    """BEiT computes F.linear(x, qkv.weight, bias), which would skip LoRA: the attention is routed through qkv's
    forward while adapted (the update counts) and back to its own F.linear once merged."""
    import timm

    torch.manual_seed(0)
    net = timm.create_model("beit_base_patch16_224", img_size=28, patch_size=7, embed_dim=32, depth=1, num_heads=2,
                            num_classes=10).eval()
    x = images()
    with torch.no_grad():
        plain = net.forward_features(x)
        apply_lora(net, "mha", rank=R, alpha=8)
        attention = net.blocks[0].attn
        assert attention.qkv_bias_separate and attention.q_bias is not None
        torch.testing.assert_close(net.forward_features(x), plain)  # lora_B starts at zero
        torch.nn.init.normal_(attention.qkv.lora_B["default"].weight)
        adapted = net.forward_features(x)
        assert not torch.allclose(adapted, plain, atol=1e-2)  # the update reaches the output
        merge_lora(net)
        assert attention.qkv_bias_separate is False and type(attention.qkv) is torch.nn.Linear
        torch.testing.assert_close(net.forward_features(x), adapted, atol=1e-5, rtol=0)


# ------------------------------------------------------------------------------------ checks


@pytest.mark.parametrize("component", ["ln1", "ln2", "emb", "all", "head"])
def test_lora_on_a_group_without_linears_is_refused_naming_the_fix(component):
    problems = check_adapter(component, {"name": "lora", "rank": 8, "alpha": 16, "dropout": 0.0})
    assert len(problems) == 1
    assert f"component={component!r}" in problems[0] and "adapter=lora" in problems[0]
    assert "mha, fc1, fc2" in problems[0] and "Fix: component=mha" in problems[0] and "adapter=none" in problems[0]
    with pytest.raises(ConfigError, match=f"component={component!r}"):
        adapted(component)


def test_bad_rank_alpha_dropout_blocks_each_named():
    problems = check_adapter("mha", {"name": "lora", "rank": 0, "alpha": -1, "dropout": 1.0})
    assert len(problems) == 3
    rank, alpha, dropout = problems
    assert rank.startswith("adapter.rank=0 ") and "Fix: e.g. adapter.rank=8" in rank
    assert alpha.startswith("adapter.alpha=-1 ") and "Fix:" in alpha
    assert dropout.startswith("adapter.dropout=1.0 ") and "[0, 1)" in dropout and "Fix:" in dropout
    assert check_adapter(["mha", "fc1"], {"name": "lora", "rank": 8, "alpha": 16, "dropout": 0.1}) == []
    assert check_adapter("mha+fc1", {"name": "lora", "rank": 8, "alpha": 16}) == []
    assert check_adapter("mha+ln2", {"name": "lora", "rank": 8, "alpha": 16})[0].startswith("component='ln2'")
    assert apply_lora(micro(), "mha+fc1", rank=R)[1].counts["group"] == 2 * (QKV + PROJ + FC1)
    assert check_adapter("mha", {"name": "lora", "rank": True, "alpha": 16})[0].startswith("adapter.rank=True")
    assert check_adapter("ln1", {"name": "lora", "rank": 0, "alpha": 16})[1].startswith("adapter.rank=0")
    assert check_adapter("mha", {"name": "lorra"})[0].startswith("adapter.name='lorra' is not an adapter")
    with pytest.raises(ConfigError, match="adapter.rank=0"):
        apply_lora(micro(), "mha", rank=0)
    with pytest.raises(ConfigError, match=r"component.blocks=\[0, 2\] has block 2, but the model has 2 blocks"):
        apply_lora(micro(), "mha", blocks=[0, 2])
    with pytest.raises(ConfigError, match="ln1"):
        apply_lora(micro(), ["mha", "ln1"])


def test_no_adapter_is_no_problem():
    for cfg in (None, {}, {"name": "none"}, OmegaConf.load(CONF / "adapter" / "none.yaml")):
        assert check_adapter("ln1", cfg) == []


def test_adapting_twice_is_refused():
    net, _ = adapted("mha")
    with pytest.raises(ValueError, match="already holds LoRA"):
        apply_lora(net, "fc1")


def test_adapter_config_composes_and_drives_apply_lora():
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    defaults = OmegaConf.load(CONF / "config.yaml").defaults
    has_adapter = any(not isinstance(d, str) and "adapter" in d for d in defaults)
    group = "adapter" if has_adapter else "+adapter"  # until conf/config.yaml lists the group
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[f"{group}=lora", "adapter.rank=4", "component=fc1"])
    GlobalHydra.instance().clear()
    adapter = cfg.adapter
    assert OmegaConf.to_container(adapter) == {"name": "lora", "rank": 4, "alpha": 16, "dropout": 0.0}
    assert check_adapter(cfg.component.name, adapter) == []
    _, selection = apply_lora(micro(), [cfg.component.name], None, rank=adapter.rank, alpha=adapter.alpha,
                              dropout=adapter.dropout, train_final_norm=cfg.component.train_final_norm)
    assert selection.component == "fc1" and selection.counts["group"] == 2 * FC1
    assert check_adapter("ln2", cfg.adapter)[0].startswith("component='ln2' with adapter=lora")

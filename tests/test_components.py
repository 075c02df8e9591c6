"""Component groups: exact counts on each supported family, freezing, errors."""

import pytest
import timm
import torch

from plasticity.components import (
    COMPONENTS, GROUPS, UnknownParameterError, classify, freeze, group_counts, resolve, select,
)


def micro_unit_counts(d=64, mlp=4, patch=7, img=28, num_classes=10):
    """Parameters of one block's five groups and of the parts outside the blocks, by hand from timm's
    ``VisionTransformer`` at the micro ViT's sizes (width 64, MLP ratio 4, 7x7 patches of 28x28, qkv bias)."""
    tokens = (img // patch) ** 2 + 1  # 16 patches + the class token
    block = {"ln1": 2 * d,  # LayerNorm: weight and bias
             "mha": (d * 3 * d + 3 * d) + (d * d + d),  # attn.qkv (d -> 3d) + attn.proj (d -> d)
             "ln2": 2 * d,
             "fc1": d * mlp * d + mlp * d,  # mlp.fc1 (d -> 4d)
             "fc2": mlp * d * d + d}  # mlp.fc2 (4d -> d)
    outside = {"emb": d + tokens * d + (3 * patch * patch * d + d),  # cls_token, pos_embed, patch_embed.proj
               "final_norm": 2 * d, "head": d * num_classes + num_classes}
    return block, outside


def micro_group_counts(depth=2, num_classes=10):
    """:func:`micro_unit_counts` summed over ``depth`` blocks: each group's count in the whole model."""
    block, outside = micro_unit_counts(num_classes=num_classes)
    return {**{g: depth * n for g, n in block.items()}, **outside}


def test_vit_base_counts_match_the_paper():
    model = timm.create_model("vit_base_patch16_224", pretrained=False, num_classes=10)
    counts = group_counts(model)
    assert counts["ln1"] == 18_432
    assert counts["ln2"] == 18_432
    assert counts["mha"] == 28_348_416
    assert counts["fc1"] == 28_348_416
    assert counts["fc2"] == 28_320_768
    assert sum(counts.values()) == sum(p.numel() for p in model.parameters())


def _small(name, **kwargs):
    return timm.create_model(name, pretrained=False, num_classes=10, img_size=28, patch_size=4,
                             embed_dim=32, depth=2, num_heads=2, **kwargs)


def test_layer_scale_models_put_ls1_in_mha_and_ls2_in_fc2():
    model = _small("vit_small_patch14_reg4_dinov2")
    groups = resolve(model)
    assert "blocks.1.ls1.gamma" in groups["mha"]
    assert "blocks.1.ls2.gamma" in groups["fc2"]
    assert "reg_token" in groups["emb"]
    d = 32
    per_block_mha = (d * 3 * d + 3 * d) + (d * d + d) + d  # qkv, proj, ls1
    assert group_counts(model)["mha"] == 2 * per_block_mha


def test_eva02_split_qkv_and_swiglu():
    model = _small("eva02_base_patch14_224")
    groups = resolve(model)
    assert {"blocks.0.attn.q_proj.weight", "blocks.0.attn.k_proj.weight", "blocks.0.attn.v_proj.weight"} <= set(groups["mha"])
    assert {"blocks.0.mlp.fc1_g.weight", "blocks.0.mlp.fc1_x.weight"} <= set(groups["fc1"])
    assert "blocks.0.mlp.norm.weight" in groups["fc2"]
    hidden = model.blocks[0].mlp.fc1_g.out_features
    d = 32
    assert group_counts(model)["fc1"] == 2 * 2 * (d * hidden + hidden)
    assert group_counts(model)["fc2"] == 2 * (hidden * d + d + 2 * hidden)  # fc2 + SwiGLU norm


def test_beit_gamma_and_relative_position_bias():
    model = timm.create_model("beit_base_patch16_224", pretrained=False, num_classes=10, depth=2,
                              embed_dim=32, num_heads=2, img_size=32, patch_size=16)
    groups = resolve(model)
    assert "blocks.0.gamma_1" in groups["mha"] and "blocks.0.gamma_2" in groups["fc2"]
    assert "blocks.0.attn.relative_position_bias_table" in groups["mha"]


def test_unknown_parameter_is_an_error_naming_it(micro_vit):
    micro_vit.blocks[0].adapter = torch.nn.Linear(2, 2)
    with pytest.raises(UnknownParameterError, match=r"blocks\.0\.adapter\.weight"):
        resolve(micro_vit)


def test_unknown_component_lists_the_choices(micro_vit):
    with pytest.raises(ValueError, match="Choices: ln1, mha, ln2, fc1, fc2, emb, all, head"):
        select(micro_vit, "attention")


def test_classify_gives_the_block_index():
    assert classify("blocks.11.attn.qkv.weight") == ("mha", 11)
    assert classify("norm.weight") == ("final_norm", None)
    assert classify("head.bias") == ("head", None)


@pytest.mark.parametrize("component", COMPONENTS)
def test_freezing_counts_parameters_with_gradients(micro_vit, component):
    sel = select(micro_vit, component, train_final_norm=True)
    freeze(micro_vit, sel)
    loss = micro_vit(torch.randn(4, 3, 28, 28)).logsumexp(-1).sum()
    loss.backward()
    with_grad = {n for n, p in micro_vit.named_parameters() if p.grad is not None}
    assert with_grad == set(sel.trainable)
    expected = micro_group_counts(depth=2)  # by hand, not from plasticity.components
    assert group_counts(micro_vit) == expected
    n_grad = sum(p.numel() for n, p in micro_vit.named_parameters() if p.grad is not None)
    if component in GROUPS + ("emb",):
        assert n_grad == expected[component] + expected["head"] + expected["final_norm"]
        assert sel.counts["group"] == expected[component]
    elif component == "head":
        assert n_grad == expected["head"]  # nothing but the head, whatever the switch says
        assert sel.counts["total"] == sel.counts["group"] == expected["head"]
    elif component == "all":
        assert n_grad == sum(expected.values())


def test_final_norm_switch(micro_vit):
    on = select(micro_vit, "ln1", train_final_norm=True)
    off = select(micro_vit, "ln1", train_final_norm=False)
    assert on.counts["final_norm"] == 2 * 64 and off.counts["final_norm"] == 0
    assert on.counts["total"] - off.counts["total"] == 128

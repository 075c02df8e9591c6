"""The timm factory: head reset, local weights files, clear errors for names and hub weights."""

import pytest
import torch
from safetensors.torch import save_file

from plasticity.models import WeightsError, create_model, image_size


def test_head_is_reset_to_the_task_and_the_micro_vit_is_registered():
    net = create_model("vit_micro_patch7_28", num_classes=7)
    assert net.head.out_features == 7 and image_size(net) == 28
    assert net(torch.zeros(2, 3, 28, 28)).shape == (2, 7)


def test_local_weights_file_loads_everything_but_the_head(tmp_path):
    torch.manual_seed(1)
    source = create_model("vit_micro_patch7_28", num_classes=10, depth=2)
    save_file(source.state_dict(), str(tmp_path / "w.safetensors"))
    torch.manual_seed(2)
    net = create_model("vit_micro_patch7_28", num_classes=3, weights_file=str(tmp_path / "w.safetensors"), depth=2)
    assert torch.equal(net.blocks[0].attn.qkv.weight, source.blocks[0].attn.qkv.weight)
    assert torch.equal(net.pos_embed, source.pos_embed)
    assert net.head.out_features == 3


def test_unreachable_hub_weights_name_the_weights_file_fix():
    with pytest.raises(WeightsError, match=r"model\.weights_file=<path>"):
        create_model("vit_micro_patch7_28", num_classes=10, pretrained=True, pretrained_cfg_overlay=dict(hf_hub_id="timm/not-a-real-repo-xyz"))


def test_unknown_name_suggests_close_matches():
    with pytest.raises(ValueError, match="Close matches: vit_base_patch16_224"):
        create_model("vit_base_patch16_22", num_classes=10)

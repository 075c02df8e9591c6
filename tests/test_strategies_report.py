"""The report beyond the paper: every strategy its own Table 6 configuration with its trainable parameters,
the logistic-regression probe as the linear-probing baseline (the SGD head as fallback), the Pareto front of
accuracy against trainable parameters, and records written before ``strategy`` existed."""

import csv
import json

import numpy as np
import pytest

from plasticity.report import ReportError, summary_table, write_report
from plasticity.report.collect import collect, probe_dir
from plasticity.report.markdown import fmt_params
from plasticity.components import label, strategy_of
from plasticity.report.tables import done_cells, pareto_front, table6
from plasticity.report.writer import curves
from tests.test_report import assert_figure

DATASETS = ("d0", "c/snow")
LRS = (0.01, 0.1)
SEEDS = (0, 1)
PARAMS = {"ln1": 1536, "mha": 28_348_416, "mha+fc1": 56_696_832, "mha_lora_r8": 294_912, "auto": 7_100_000,
          "head": 7690, "probe": 7690}
STRATEGY = {"ln1": "group", "mha": "group", "mha+fc1": "combination", "mha_lora_r8": "lora", "auto": "auto",
            "head": "head", "probe": "probe"}
# (dataset, configuration) -> (lr with the best validation accuracy, test accuracy of seeds 0 and 1 there).
# The other lr has validation and test accuracy 0.05 lower, so every choice is unambiguous.
BEST = {
    ("d0", "ln1"): (0.1, (0.80, 0.82)),           # 81.0 ± 1.4142
    ("d0", "mha"): (0.01, (0.90, 0.92)),          # 91.0 ± 1.4142
    ("d0", "mha+fc1"): (0.01, (0.93, 0.93)),      # 93.0 ± 0
    ("d0", "mha_lora_r8"): (0.1, (0.88, 0.90)),   # 89.0
    ("d0", "auto"): (0.1, (0.92, 0.90)),          # 91.0: as MHA with 4x fewer parameters
    ("d0", "head"): (0.1, (0.70, 0.72)),          # 71.0
    ("c/snow", "ln1"): (0.01, (0.59, 0.61)),      # 60.0
    ("c/snow", "mha"): (0.1, (0.86, 0.86)),       # 86.0 ± 0
    ("c/snow", "mha+fc1"): (0.1, (0.85, 0.86)),   # 85.5 ± 0.7071: below MHA with twice its parameters
    ("c/snow", "mha_lora_r8"): (0.01, (0.79, 0.81)),  # 80.0
    ("c/snow", "auto"): (0.01, (0.84, 0.86)),     # 85.0
    ("c/snow", "head"): (0.1, (0.63, 0.65)),      # 64.0
}
PROBE_ACC = {"d0": (0.74, 0.76), "c/snow": (0.64, 0.66)}  # 75.0 and 65.0
MEANS = {("d0", "ln1"): 81.0, ("d0", "mha"): 91.0, ("d0", "mha+fc1"): 93.0, ("d0", "mha_lora_r8"): 89.0,
         ("d0", "auto"): 91.0, ("d0", "head"): 71.0, ("d0", "probe"): 75.0,
         ("c/snow", "ln1"): 60.0, ("c/snow", "mha"): 86.0, ("c/snow", "mha+fc1"): 85.5,
         ("c/snow", "mha_lora_r8"): 80.0, ("c/snow", "auto"): 85.0, ("c/snow", "head"): 64.0,
         ("c/snow", "probe"): 65.0}
# On the front iff no other configuration has >= accuracy with <= parameters (one strictly). d0: LN1 (1.5K, 81)
# dominates both linear probes (7.7K, 75 and 71); auto (7.1M, 91) dominates MHA (28.3M, 91). c/snow: the
# probe (7.7K, 65) beats LN1 and dominates the SGD head at the same count; MHA dominates MHA+FC1.
PARETO = {"d0": {"ln1", "mha_lora_r8", "auto", "mha+fc1"},
          "c/snow": {"ln1", "probe", "mha_lora_r8", "auto", "mha"}}
AUTO_BIG = ("d0", 0.01, 1)  # this auto run chose twice the units: the median count stays 7.1M


def finetune_record(d, g, lr, s, val, test, with_strategy=True):
    params = 2 * PARAMS[g] if (g, (d, lr, s)) == ("auto", AUTO_BIG) else PARAMS[g]
    record = dict(task="finetune", dataset=d, model="m", component=g, optimizer="sgd", lr=lr, seed=s, status="done",
                  best_val_acc=val, test_acc=test, best_step=10, steps=20, wall_s=1.0, trainable_params=params,
                  params={"group": params, "head": 7690, "total": params + 7690})
    if with_strategy:
        record["strategy"] = STRATEGY[g]
    if g == "auto":
        record["selected"] = ["mha@8", "mha@9"]  # plasticity.auto.unit_name
    return record


def probe_record(d, s, test):
    return dict(task="linear_probe", dataset=d, model="m", component="probe", strategy="probe", optimizer="lbfgs",
                lr=None, seed=s, status="done", test_acc=test, best_val_acc=test + 0.01, trainable_params=7690,
                C=0.1, feature_dim=768)


def write(path, record):
    path.mkdir(parents=True)
    (path / "result.json").write_text(json.dumps(record))


def write_sweep(root, probes=True, with_strategy=True):
    """The finetuning runs under ``root/finetune`` and, with ``probes``, the probes under ``root/linear_probe``."""
    for (d, g), (best, tests) in BEST.items():
        for lr in LRS:
            for s, test in zip(SEEDS, tests):
                val = test + 0.01 if lr == best else test - 0.04
                test = test if lr == best else test - 0.05
                run = root / "finetune" / d / "m" / g / f"sgd_lr_{lr}" / f"seed_{s}"
                write(run, finetune_record(d, g, lr, s, round(val, 4), round(test, 4), with_strategy))
    if probes:
        for d, tests in PROBE_ACC.items():
            for s, test in zip(SEEDS, tests):
                write(root / "linear_probe" / d / "m" / "probe" / "block_output_mean" / f"seed_{s}",
                      probe_record(d, s, test))


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def table6_of(out):
    return {(r["dataset"], r["group"]): r for r in read_rows(out / "table6.csv")}


@pytest.fixture(scope="module")
def with_probe(tmp_path_factory):
    root = tmp_path_factory.mktemp("with_probe")
    write_sweep(root)
    result = write_report(root)
    return root, result


@pytest.fixture(scope="module")
def without_probe(tmp_path_factory):
    """The same finetuning runs, no probe, and records written before ``strategy`` existed."""
    root = tmp_path_factory.mktemp("without_probe")
    write_sweep(root, probes=False, with_strategy=False)
    write_report(root)
    return root


def test_every_configuration_is_a_table6_row_with_its_mean_std_and_params(with_probe):
    root, result = with_probe
    got = table6_of(root / "report")
    assert set(got) == set(MEANS) | {("average", g) for g in PARAMS}
    for (d, g), mean in MEANS.items():
        row = got[(d, g)]
        tests = PROBE_ACC[d] if g == "probe" else BEST[(d, g)][1]
        assert float(row["mean"]) == pytest.approx(mean)
        assert float(row["std"]) == pytest.approx(100 * abs(tests[0] - tests[1]) / np.sqrt(2))
        assert row["n_seeds"] == "2" and row["strategy"] == STRATEGY[g]
        assert row["lr"] == ("" if g == "probe" else str(BEST[(d, g)][0]))  # the probe has no lr to choose
        assert int(row["params"]) == PARAMS[g]  # auto: the median of 7.1M, 7.1M, 7.1M, 14.2M
    assert float(got[("d0", "mha+fc1")]["std"]) == 0.0
    assert float(got[("c/snow", "mha+fc1")]["std"]) == pytest.approx(np.sqrt(0.5))
    for g in PARAMS:
        avg = got[("average", g)]
        assert float(avg["mean"]) == pytest.approx((MEANS[("d0", g)] + MEANS[("c/snow", g)]) / 2)
        assert int(avg["params"]) == PARAMS[g] and avg["lr"] == ""
    assert got[("d0", "mha_lora_r8")]["label"] == "MHA LoRA r8" and got[("d0", "probe")]["label"] == "linear probing"
    assert result.runs == len(BEST) * len(LRS) * len(SEEDS) + 4 and result.done == result.runs
    assert result.problems == []


def test_table6_markdown_orders_labels_and_counts_the_configurations(with_probe):
    root, _ = with_probe
    md = (root / "report" / "table6.md").read_text()
    header = md.splitlines()[0]
    columns = ["LN1 (1.54K)", "MHA (28.3M)", "SGD head (7.69K)", "MHA+FC1 (56.7M)", "MHA LoRA r8 (295K)",
               "auto (7.1M)", "linear probing (7.69K)"]
    assert header == "| dataset | " + " | ".join(columns) + " |"
    assert "| d0 | 81.00 ± 1.41 | 91.00 ± 1.41 | 71.00 ± 1.41 | 93.00 ± 0.00 |" in md
    assert "linear probing: logistic-regression probe (task=linear_probe)" in md
    report = (root / "report" / "report.md").read_text()
    assert "linear probing: logistic-regression probe (task=linear_probe)" in report
    assert "run task=linear_probe for the paper's baseline" not in report
    assert "4 linear-probe records" in report
    assert "## Missing runs (cells with fewer done seeds than the sweep)\n\nNone." in report


def test_relative_gain_uses_the_probe(with_probe):
    root, _ = with_probe
    gains = {(r["dataset"], r["group"]): r for r in read_rows(root / "report" / "relative_gain.csv")}
    assert {r["baseline"] for r in gains.values()} == {"probe"}
    assert not any(g == "probe" for _, g in gains)
    assert float(gains[("d0", "mha")]["gain_pct"]) == pytest.approx(100 * (91 - 75) / 75)
    assert float(gains[("c/snow", "mha")]["gain_pct"]) == pytest.approx(100 * (86 - 65) / 65)
    assert float(gains[("average", "mha")]["gain_pct"]) == pytest.approx(
        (100 * (91 - 75) / 75 + 100 * (86 - 65) / 65) / 2)
    assert float(gains[("d0", "head")]["gain_pct"]) == pytest.approx(100 * (71 - 75) / 75)  # SGD head vs the probe
    assert float(gains[("average", "mha_lora_r8")]["gain_pct"]) == pytest.approx(
        (100 * (89 - 75) / 75 + 100 * (80 - 65) / 65) / 2)


def test_relative_gain_falls_back_to_the_head_and_says_so(without_probe):
    root = without_probe
    gains = {(r["dataset"], r["group"]): r for r in read_rows(root / "report" / "relative_gain.csv")}
    assert {r["baseline"] for r in gains.values()} == {"head"} and not any(g == "head" for _, g in gains)
    assert float(gains[("d0", "mha")]["gain_pct"]) == pytest.approx(100 * (91 - 71) / 71)
    assert float(gains[("average", "auto")]["gain_pct"]) == pytest.approx(
        (100 * (91 - 71) / 71 + 100 * (85 - 64) / 64) / 2)
    note = "linear probing: SGD on the head (component=head); run task=linear_probe for the paper's baseline"
    assert note in (root / "report" / "report.md").read_text()
    md = (root / "report" / "table6.md").read_text()
    assert note in md and "linear probing (7.69K)" in md.splitlines()[0] and "SGD head" not in md


def test_old_records_without_strategy_get_it_from_their_tag(without_probe):
    got = table6_of(without_probe / "report")
    for (d, g), mean in MEANS.items():
        if g != "probe":
            assert got[(d, g)]["strategy"] == STRATEGY[g] and float(got[(d, g)]["mean"]) == pytest.approx(mean)
    assert not any(g == "probe" for _, g in got)


def test_strategies_csv_marks_the_pareto_front(with_probe):
    root, _ = with_probe
    rows = read_rows(root / "report" / "strategies.csv")
    assert list(rows[0]) == ["dataset", "component", "strategy", "label", "trainable_params", "lr", "mean", "std",
                             "n_seeds", "pareto"]
    assert len(rows) == len(MEANS)
    for d in DATASETS:
        mine = {r["component"]: r for r in rows if r["dataset"] == d}
        assert {g for g, r in mine.items() if r["pareto"] == "True"} == PARETO[d]
        for g, r in mine.items():
            assert float(r["mean"]) == pytest.approx(MEANS[(d, g)]) and int(r["trainable_params"]) == PARAMS[g]
            # the definition, checked directly
            dominated = any(PARAMS[h] <= PARAMS[g] and MEANS[(d, h)] >= MEANS[(d, g)]
                            and (PARAMS[h] < PARAMS[g] or MEANS[(d, h)] > MEANS[(d, g)]) for h in mine if h != g)
            assert (r["pareto"] == "True") == (not dominated)


def test_pareto_figures_are_written_and_listed(with_probe):
    root, _ = with_probe
    out = root / "report"
    report = (out / "report.md").read_text()
    for name in ("pareto_d0.png", "pareto_c-snow.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (out / name).stat().st_size > 1000
        assert_figure(out / name, ("tab:blue", "tab:red", "tab:olive"))  # ln1, mha and the combination's points
        assert f"({name})" in report
    assert not (out / "pareto_c").exists()
    assert "[strategies.csv](strategies.csv)" in report
    for name in ("relative_gain.png", "accuracy.png", "spread.png"):
        assert (out / name).stat().st_size > 1000
        assert_figure(out / name)


def test_a_finetune_sweep_reads_the_probes_beside_it(with_probe):
    root, _ = with_probe
    assert probe_dir(root / "finetune" / "d0") == root / "linear_probe" / "d0"
    assert probe_dir(root / "finetune") == root / "linear_probe" and probe_dir(root) is None
    assert probe_dir(root / "finetune" / "absent") is None
    sweep = collect(root / "finetune" / "c")
    assert {r["dataset"] for _, r in sweep.probe} == {"c/snow"} and len(sweep.probe) == 2
    assert not collect(root / "finetune" / "c", probes=False).probe
    out = write_report(root / "finetune" / "c").path.parent
    got = table6_of(out)
    assert float(got[("c/snow", "probe")]["mean"]) == pytest.approx(65.0) and ("d0", "mha") not in got
    assert f"Linear probes read from {root / 'linear_probe' / 'c'}." in (out / "report.md").read_text()


def test_probe_records_are_checked_like_finetuning_records(tmp_path):
    write_sweep(tmp_path, probes=False)
    base = tmp_path / "linear_probe" / "d0" / "m" / "probe"
    write(base / "a" / "seed_0", {**probe_record("d0", 0, 0.75), "lr": "x"})
    write(base / "b" / "seed_0", {**probe_record("d0", 0, 0.75), "test_acc": 75.0})
    write(base / "c" / "seed_0", {**probe_record("d0", 0, 0.75), "best_val_acc": None})  # usable: no lr to choose
    write(tmp_path / "finetune" / "d0" / "m" / "mha" / "nolr" / "seed_0",
          {**finetune_record("d0", "mha", 0.1, 0, 0.5, 0.5), "lr": None})
    result = write_report(tmp_path)
    reasons = {p.split("/")[-3]: why for p, why in result.problems}
    assert reasons == {"a": "lr='x' is neither null nor a number",
                       "b": "test_acc=75.0 is not a number in [0, 1] (status done)",
                       "nolr": "missing identity field(s): lr"}
    assert float(table6_of(tmp_path / "report")[("d0", "probe")]["mean"]) == pytest.approx(75.0)


def test_probes_sharing_a_seed_are_flagged(tmp_path):
    write_sweep(tmp_path, probes=False)
    for features in ("block_output_mean", "pre_logits_cls"):
        write(tmp_path / "linear_probe" / "d0" / "m" / "probe" / features / "seed_0", probe_record("d0", 0, 0.75))
    text = write_report(tmp_path).path.read_text()
    assert "several records share a seed" in text and "| d0 | probe |  | 0 |" in text


def test_one_optimizer_at_a_time(tmp_path):
    write_sweep(tmp_path, probes=False)
    for s, test in zip(SEEDS, (0.95, 0.97)):
        record = {**finetune_record("d0", "mha", 1e-4, s, test, test), "optimizer": "adamw"}
        write(tmp_path / "finetune" / "d0" / "m" / "mha" / "adamw_lr_0.0001" / f"seed_{s}", record)
    pooled = write_report(tmp_path).path.read_text()
    assert "several optimizers are pooled in these tables: adamw, sgd." in pooled
    assert float(table6_of(tmp_path / "report")[("d0", "mha")]["mean"]) == pytest.approx(96.0)
    adamw = write_report(tmp_path, optimizer="adamw").path
    assert adamw == tmp_path / "report_adamw" / "report.md" and "several optimizers" not in adamw.read_text()
    got = table6_of(adamw.parent)
    assert set(got) == {("d0", "mha"), ("average", "mha")} and float(got[("d0", "mha")]["lr"]) == 1e-4
    sgd = table6_of(write_report(tmp_path, optimizer="sgd").path.parent)
    assert float(sgd[("d0", "mha")]["mean"]) == pytest.approx(91.0)
    with pytest.raises(ReportError, match=r"optimizer='adam': no finetuning run under .* \(found: adamw, sgd\)"):
        write_report(tmp_path, optimizer="adam")
    assert not (tmp_path / "report_adam").exists()


def test_curves_of_a_combination_and_of_auto_combine_their_groups_gradient_norms(tmp_path):
    """A combination logs grad_norm/<group> per group, auto those of its selected units' groups."""
    write_sweep(tmp_path)
    combo = tmp_path / "finetune" / "d0" / "m" / "mha+fc1" / "sgd_lr_0.01" / "seed_0"
    (combo / "metrics.csv").write_text("step,grad_norm/mha,grad_norm/fc1,val/loss\n0,3.0,4.0,\n1,6.0,8.0,\n1,,,1.5\n")
    auto = tmp_path / "finetune" / "d0" / "m" / "auto" / "sgd_lr_0.1" / "seed_0"
    (auto / "metrics.csv").write_text("step,grad_norm/mha,grad_norm/head,val/loss\n0,2.0,9.0,\n")
    sweep = collect(tmp_path)
    cells = done_cells(sweep.finetune + sweep.probe)
    got = {c["group"]: c for c in curves(cells, table6(cells), "d0", [])}
    assert "probe" not in got
    steps, values = got["mha+fc1"]["grad_norm"]
    assert steps.tolist() == [0.0, 1.0] and values.tolist() == pytest.approx([5.0, 10.0])
    assert got["mha+fc1"]["val_loss"][1].tolist() == [1.5] and got["mha+fc1"]["label"] == "MHA+FC1"
    assert got["auto"]["grad_norm"][1].tolist() == [2.0] and got["mha"]["grad_norm"][0].size == 0
    assert (write_report(tmp_path).path.parent / "curves_d0.png").stat().st_size > 1000
    assert_figure(tmp_path / "report" / "curves_d0.png", ("tab:olive", "goldenrod"))  # the combination's, auto's


def test_summary_lists_the_other_configurations_after_the_groups(with_probe):
    root, _ = with_probe
    cells = {col.header: list(col.cells) for col in summary_table(root, "d0", "m").columns}
    assert cells["component"] == ["ln1", "mha", "head", "mha+fc1", "mha_lora_r8", "auto", "probe"]
    assert cells["test acc %"] == ["81.00", "91.00", "71.00", "93.00", "89.00", "91.00", "75.00"]
    assert cells["lr"][-1] == "-" and cells["acc rank"][:2] == ["2", "1"] and cells["acc rank"][2:] == ["-"] * 5


@pytest.mark.parametrize("tag, name, strategy", [
    ("mha", "MHA", "group"), ("emb", "embedding", "group"), ("all", "full", "full"), ("head", "linear probing", "head"),
    ("mha+fc1", "MHA+FC1", "combination"), ("mha+fc1_b8-11", "MHA+FC1 b8-11", "combination"),
    ("fc1_b8.10.11", "FC1 b8.10.11", "combination"), ("mha_lora_r8", "MHA LoRA r8", "lora"),
    ("mha+fc1_b8-11_lora_r16", "MHA+FC1 b8-11 LoRA r16", "lora"), ("auto", "auto", "auto"),
    ("probe", "linear probe (logistic regression)", "probe"), ("weird_tag_x", "weird_tag_x", "group"),
])
def test_label_and_strategy_of_a_tag(tag, name, strategy):
    assert label(tag) == name and strategy_of(tag) == strategy
    record = {"dataset": "d", "component": tag, "lr": 0.1, "seed": 0, "status": "done", "test_acc": 0.5,
              "best_val_acc": 0.5}
    assert table6(done_cells([(None, record)]))[0]["strategy"] == strategy  # a record before `strategy`: its tag's
    own = table6(done_cells([(None, {**record, "strategy": "lora"})]))[0]["strategy"]
    assert own == "lora"  # a record's own strategy wins


def test_pareto_front_definition():
    # equal points are both on the front; equal params with lower accuracy are dominated; None never is
    assert pareto_front([(10, 80.0), (10, 80.0), (10, 79.0), (5, 70.0), (20, 90.0), (30, 90.0), (None, 99.0)]) == [
        True, True, False, True, True, False, False]


def test_fmt_params():
    assert [fmt_params(n) for n in (28_348_416, 18_432, 7690, 100, 85_806_346, None, 2_500_000_000)] == [
        "28.3M", "18.4K", "7.69K", "100", "85.8M", "", "2.5B"]

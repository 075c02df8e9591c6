"""The sweep report: Table 6, relative gain, Table 1, figures and the list of failed/missing runs and bad files."""

import csv
import json

import numpy as np
import pytest
from scipy import stats

from plasticity.report import ReportError, check_sweep_dir, read_metric, write_report

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


def run_path(root, d, g, lr, s):
    return root / "finetune" / d / "m" / g / f"sgd_lr_{lr}" / f"seed_{s}"


def write_run(root, d, g, lr, s, record, metrics=None, text=None):
    """A run directory with its record (or ``text`` verbatim as result.json) and metrics.csv."""
    run = run_path(root, d, g, lr, s)
    run.mkdir(parents=True)
    (run / "result.json").write_text(json.dumps(record) if text is None else text)
    if metrics is not None:
        (run / "metrics.csv").write_text(metrics)
    return run


def metrics_csv(group: str) -> str:
    """A sparse CSVLogger file: grad norm and train loss on training rows, val loss on eval rows."""
    return (f"epoch,step,train/loss,lr,grad_norm/{group},val/loss,val/acc\n"
            "0,0,2.0,0.1,1.5,,\n0,1,1.8,0.1,1.2,,\n0,1,,,,1.7,0.5\n0,2,1.5,0.1,1.0,,\n0,3,,,,1.2,0.7\n")


CORRUPT_METRICS = {"ln1": metrics_csv("ln1")[:-5],  # truncated in the last row
                   "head": metrics_csv("head").replace("1.7", "abc")}  # a non-numeric cell
ANALYSIS = "embedding_sequential_ref_imagenet"


def write_bad_files(root) -> dict:
    """Files the report cannot use, beside the valid sweep: path -> words its problem must contain.

    None of them may change a table: the truncated record and the one with ``lr: "abc"`` sit in
    cells of their own, the percent accuracy in a seed no other run has."""
    good = dict(task="finetune", dataset="d2", model="m", component="mha", optimizer="sgd", lr=0.5, seed=0,
                status="done", best_val_acc=0.99, test_acc=0.99)
    bad = {
        write_run(root, "d2", "mha", 0.5, 0, None, text=json.dumps(good)[:60]): "truncated or invalid JSON",
        write_run(root, "d1", "ln1", "abc", 0, {**good, "dataset": "d1", "component": "ln1", "lr": "abc",
                                                "status": "failed", "error": "boom"}): "lr='abc' is not a number",
        write_run(root, "d2", "fc1", 0.01, 9, {**good, "component": "fc1", "lr": 0.01, "seed": 9,
                                               "test_acc": 87.5}): "test_acc=87.5 is not a number in [0, 1]",
        write_run(root, "d2", "ln1", 0.01, 9, None, text="[1, 2]"): "not a JSON object",
        write_run(root, "d2", "head", 0.01, 9, None, text=""): "empty file",
        write_run(root, "d2", "all", 0.01, 9, {"task": "finetune", "dataset": "d2"}):
            "missing identity field(s): model, component, lr, seed, status",
    }
    bad = {run / "result.json": words for run, words in bad.items()}
    for group, text in CORRUPT_METRICS.items():
        (metrics,) = (root / "finetune" / "d0" / "m" / group).glob("*/seed_0/metrics.csv")
        metrics.write_text(text)
        bad[metrics] = "corrupt CSV"
    p = root / "plasticity" / "d0" / "m" / "layer_random_ref_imagenet" / "seed_0"  # a second analysis, corrupt
    p.mkdir(parents=True)
    (p / "result.json").write_text(json.dumps(dict(task="plasticity", dataset="d0", model="m", seed=0, status="done")))
    (p / "plasticity.csv").write_text("group,block,depth_pct,mean\nln1,0,0,oops\n")
    bad[p / "plasticity.csv"] = "mean='oops' is not a number"
    return bad


def write_ignored_files(root) -> None:
    """Files the report skips without a problem: an archived (hidden) run and another task's record."""
    hidden = root / "finetune" / "d0" / "m" / ".replaced-1" / "seed_0"
    hidden.mkdir(parents=True)
    (hidden / "result.json").write_text("{\"task\": ")
    (root / "bounds").mkdir()
    (root / "bounds" / "result.json").write_text(json.dumps({"task": "bounds", "dataset": "d0", "model": "m"}))


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """The sweep directory with its report by validation (default) and by test (``by_test``); beside
    the valid runs, the files of :func:`write_bad_files` and :func:`write_ignored_files`."""
    tmp_path = tmp_path_factory.mktemp("sweep")
    acc = accuracies()
    for (d, g, lr, s), (val, test) in acc.items():
        record = dict(task="finetune", dataset=d, model="m", component=g, optimizer="sgd", lr=lr, seed=s, status="done",
                      best_val_acc=val, test_acc=test, best_step=10, steps=20, wall_s=1.0,
                      trainable_params=100, params={"trainable": 100, "group": g})
        if (d, g, lr, s) == FAILED:
            record.update(status="failed", best_val_acc=None, test_acc=None, error="CUDA out of memory")
        # d0 at the lr chosen by validation, seed 0: training curves (mha's lr is 0.01 by validation)
        chosen = 0.01 if g == "mha" else max(LRS, key=lambda x: acc[(d, g, x, 0)][0] + acc[(d, g, x, 1)][0])
        metrics = metrics_csv(g) if d == "d0" and s == 0 and lr == chosen else None
        write_run(tmp_path, d, g, lr, s, record, metrics)
    # a plasticity analysis run for d0 (no component, ignored by the finetuning tables)
    p = tmp_path / "plasticity" / "d0" / "m" / ANALYSIS / "seed_0"
    p.mkdir(parents=True)
    (p / "result.json").write_text(json.dumps(dict(task="plasticity", dataset="d0", model="m", seed=0, status="done")))
    (p / "plasticity.csv").write_text("group,block,depth_pct,mean\nln1,0,0,0.5\nln1,1,100,0.7\nmha,0,0,3.0\n"
                                      "mha,1,100,5.0\nfc1,0,0,2.0\nfc1,1,100,2.2\n")
    bad = write_bad_files(tmp_path)
    write_ignored_files(tmp_path)
    result = write_report(tmp_path)
    write_report(tmp_path, select="test", out_dir=tmp_path / "by_test")
    return tmp_path, acc, bad, result


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


def assert_figure(path, colors=(), min_px=(200, 300)):
    """The PNG read back by matplotlib is a drawn figure: at least ``min_px`` (height, width) pixels, not a blank
    canvas, and showing each of ``colors`` (e.g. the paper's colour of a group it plots); returns its pixels."""
    from matplotlib.colors import to_rgb
    from matplotlib.image import imread

    pixels = imread(path)[..., :3]
    assert pixels.shape[0] >= min_px[0] and pixels.shape[1] >= min_px[1], (path, pixels.shape)
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50, f"{path} is nearly blank"
    for color in colors:  # a pixel of exactly that colour (to 1/100): a bar, a marker or the middle of a line
        assert (np.abs(pixels - to_rgb(color)).max(axis=-1) < 0.01).any(), f"{path} shows nothing in {color}"
    return pixels


@pytest.mark.parametrize("select", ["val", "test"])
def test_table6_matches_hand_computation(sweep, select):
    root, acc, *_ = sweep
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
    root, *_ = sweep
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
    root, acc, *_ = sweep
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
    root, acc, *_ = sweep
    text = (root / "report" / "report.md").read_text()
    failed_dir = run_path(root, "d1", "fc1", 0.1, 1)
    assert f"| failed | {failed_dir} | CUDA out of memory |" in text
    assert "| d1 | fc1 | 0.1 | 1 | 1 |" in text  # the cell missing seed 1
    assert text.count("| failed |") == 1
    runs = read_rows(root / "report" / "runs.csv")
    assert len(runs) == len(acc)  # finetuning records only, every status
    assert sum(r["status"] == "failed" for r in runs) == 1
    assert {r["params.group"] for r in runs} == set(GROUPS) and all(r["run_dir"] for r in runs)


def test_figures_and_curves_from_sparse_metrics(sweep):
    root, *_ = sweep
    out = root / "report"
    for name in ("relative_gain.png", "accuracy.png", "spread.png", "curves_d0.png"):
        assert (out / name).stat().st_size > 1000
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    paper = ("tab:blue", "tab:red", "tab:orange")  # ln1, mha, fc1 in the paper's colours: one bar each
    assert_figure(out / "relative_gain.png", paper)
    assert_figure(out / "accuracy.png", paper)
    spread = assert_figure(out / "spread.png")
    assert spread.shape[1] > 2 * spread.shape[0]  # one panel per dataset, side by side
    assert_figure(out / "curves_d0.png", ("tab:red", "tab:orange"))  # mha's and fc1's curves
    assert not (out / "curves_d1.png").exists()  # no metrics.csv for d1: skipped silently
    assert "curves_d0.png" in (out / "report.md").read_text()
    run = run_path(root, "d0", "mha", 0.01, 0)
    steps, values = read_metric(run, "val/loss")
    assert steps.tolist() == [1.0, 3.0] and values.tolist() == [1.7, 1.2]
    steps, values = read_metric(run, "grad_norm/mha")
    assert steps.tolist() == [0.0, 1.0, 2.0] and values.tolist() == [1.5, 1.2, 1.0]
    assert read_metric(run, "grad_norm/absent")[0].size == 0


def test_plasticity_vs_accuracy(sweep):
    root, acc, *_ = sweep
    (row,) = read_rows(root / "report" / "plasticity_vs_accuracy.csv")
    want = expected_table6(acc, "val")
    groups = ("ln1", "mha", "fc1")
    res = stats.spearmanr([0.6, 4.0, 2.1], [want[("d0", g)][1] for g in groups])
    assert row["dataset"] == "d0"
    assert float(row["spearman_rho"]) == pytest.approx(res.statistic)


def test_one_group_report_has_no_problems_and_skips_the_comparisons(tmp_path):
    record = dict(task="finetune", dataset="d", model="m", component="mha", optimizer="sgd", lr=0.1, seed=0,
                  status="done", best_val_acc=0.5, test_acc=0.4)
    write_run(tmp_path, "d", "mha", 0.1, 0, record)
    result = write_report(tmp_path, "test")
    assert result.path == tmp_path / "report" / "report.md" and result.problems == []
    assert "## Problems (files that could not be used)\n\nNone." in (tmp_path / "report" / "report.md").read_text()
    assert table6_of(tmp_path / "report")[("d", "mha")]["mean"] == "40.0"
    assert not (tmp_path / "report" / "relative_gain.csv").exists()  # no head runs: skipped
    assert not (tmp_path / "report" / "table1.csv").exists()  # mha alone: nothing to compare


def test_nested_dataset_names_give_flat_figure_files(tmp_path):
    for g in ("mha", "ln1"):
        record = dict(task="finetune", dataset="c/snow", model="m", component=g, optimizer="sgd", lr=0.01, seed=0,
                      status="done",
                      best_val_acc=0.5, test_acc=0.5, best_step=1, steps=2, wall_s=1.0, trainable_params=1)
        write_run(tmp_path, "c/snow", g, 0.01, 0, record, metrics_csv(g))
    out = write_report(tmp_path).path.parent
    assert (out / "curves_c-snow.png").stat().st_size > 0 and not (out / "curves_c").exists()
    assert_figure(out / "curves_c-snow.png", ("tab:red", "tab:blue"))  # mha's and ln1's curves


def problems_section(text: str) -> str:
    return text[text.index("## Problems (files that could not be used)"):]


def test_bad_files_are_listed_by_path_and_the_rest_is_reported(sweep):
    root, acc, bad, result = sweep
    section = problems_section((root / "report" / "report.md").read_text())
    for path, words in bad.items():
        (line,) = [line for line in section.splitlines() if line.startswith(f"| {path} | ")]
        assert words in line
    # the header and the bad files, nothing else: the hidden archive and the bounds record are skipped
    assert section.count("\n| ") == 1 + len(bad)
    assert {p for p, _ in result.problems} == {str(p) for p in bad}
    assert result.path == root / "report" / "report.md" and (result.runs, result.done) == (len(acc), len(acc) - 1)
    assert f"**{len(bad)} file(s) could not be used**" in (root / "report" / "report.md").read_text()


def test_corrupt_metrics_are_skipped_and_returned_as_problems(sweep):
    root, *_ = sweep
    for group in CORRUPT_METRICS:
        (metrics,) = (root / "finetune" / "d0" / "m" / group).glob("*/seed_0/metrics.csv")
        problems = []
        steps, values = read_metric(metrics.parent, "val/loss", problems)
        assert steps.size == 0 and values.size == 0
        (problem,) = problems
        assert problem[0] == str(metrics) and "corrupt CSV (line " in problem[1]


def test_the_former_crashes_are_problems_not_exceptions(tmp_path):
    """A failed record with lr "abc" crashed the whole report; a truncated result.json was dropped silently."""
    write_run(tmp_path, "d", "mha", 0.1, 0, dict(task="finetune", dataset="d", model="m", component="mha", lr=0.1,
                                                   seed=0, status="done", best_val_acc=0.5, test_acc=0.4))
    abc = write_run(tmp_path, "d", "mha", "abc", 0, dict(task="finetune", dataset="d", model="m", component="mha",
                                                        lr="abc", seed=0, status="failed", error="x"))
    cut = write_run(tmp_path, "d", "ln1", 0.1, 0, None, text='{"task": "finetune", "dataset": "d", "mo')
    result = write_report(tmp_path)
    assert [p for p, _ in result.problems] == sorted([str(abc / "result.json"), str(cut / "result.json")])
    assert table6_of(tmp_path / "report")[("d", "mha")]["mean"] == "40.0"


def test_check_sweep_dir_names_the_problem_and_the_fix(tmp_path):
    fix = "Fix: sweep_dir=<a directory with run records, e.g. outputs/finetune/cifar10>."
    missing, afile, empty = tmp_path / "nope", tmp_path / "README.md", tmp_path / "empty"
    afile.write_text("x")
    (empty / ".replaced-1" / "seed_0").mkdir(parents=True)
    (empty / ".replaced-1" / "seed_0" / "result.json").write_text("{}")  # archived: not a run of the sweep
    assert check_sweep_dir(missing) == f"sweep_dir='{missing}' does not exist. {fix}"
    assert check_sweep_dir(afile) == f"sweep_dir='{afile}' is a file, not a directory. {fix}"
    assert check_sweep_dir(empty) == f"sweep_dir='{empty}' has no result.json under it (no runs yet?). {fix}"
    assert check_sweep_dir(None).startswith("sweep_dir is not set.")
    write_run(tmp_path / "ok", "d", "mha", 0.1, 0, {"task": "finetune"})
    assert check_sweep_dir(tmp_path / "ok") is None
    for path in (missing, afile, empty):
        with pytest.raises(ReportError, match="Fix: sweep_dir="):
            write_report(path)
    assert not missing.exists() and afile.read_text() == "x" and not (empty / "report").exists()
    with pytest.raises(ReportError, match="select='best'"):
        write_report(tmp_path / "ok", select="best")
    assert not (tmp_path / "ok" / "report").exists()


def test_several_optimizers_are_flagged(tmp_path):
    for opt, lr in (("sgd", 0.1), ("adamw", 0.001)):
        write_run(tmp_path, "d", "mha", lr, 0, dict(task="finetune", dataset="d", model="m", component="mha",
                                                     optimizer=opt, lr=lr, seed=0, status="done", best_val_acc=0.5,
                                                     test_acc=0.4))
    text = write_report(tmp_path).path.read_text()
    assert "**Warning:** several optimizers are pooled in these tables: adamw, sgd." in text
    assert "several models" not in text


def test_missing_runs_follow_each_groups_own_learning_rate_grid():
    from plasticity.report.tables import missing_runs

    grid = {"ln1": (0.3, 1.0), "mha": (0.1, 0.3)}
    from pathlib import Path

    runs = [(Path(f"/r/{d}/{g}/{lr}"), dict(task="finetune", dataset=d, component=g, lr=lr, seed=0, status="done"))
            for d in ("d0", "d1") for g, lrs in grid.items() for lr in lrs]
    assert missing_runs(runs) == []  # ln1 never ran at 0.1 anywhere: not a missing cell
    del runs[1]  # d0 ln1 lr 1.0
    assert missing_runs(runs) == [{"dataset": "d0", "group": "ln1", "lr": 1.0, "n_seeds": 0, "missing_seeds": [0]}]


def test_a_single_seed_cell_shows_its_mean_without_a_spread():
    from plasticity.report.markdown import table6_md

    rows = [dict(dataset="d0", group="mha", mean=81.5, std=0.0, n_seeds=1, params=10),
            dict(dataset="d1", group="mha", mean=80.0, std=1.25, n_seeds=3, params=10),
            dict(dataset="average", group="mha", mean=80.75, std=0.0, n_seeds=1, params=10)]
    text = table6_md(rows)
    assert "| d0 | 81.50 |" in text and "| d1 | 80.00 ± 1.25 |" in text and "± 0.00" not in text


def _records(groups_on: dict) -> list:
    """(run_dir, done record) per (dataset, group) in ``groups_on`` (group -> datasets), one seed at lr 0.1."""
    return [(f"/r/{d}/{g}", dict(task="finetune", dataset=d, model="m", component=g, optimizer="sgd", lr=0.1, seed=0,
                                 status="done", best_val_acc=0.8, test_acc=0.8 + 0.01 * i, trainable_params=10))
            for g, datasets in groups_on.items() for i, d in enumerate(datasets)]


def test_an_average_over_fewer_datasets_says_so_in_table6_and_the_figure():
    """LoRA run on one target of three: its average row is marked "(1 of 3)" in Table 6 and table6.csv
    holds each average's dataset count; its bar is hatched and its label says over how many datasets."""
    from plasticity.report.figures import accuracy_figure
    from plasticity.report.markdown import table6_md
    from plasticity.report.tables import done_cells, table6

    rows = table6(done_cells(_records({"mha": DATASETS, "fc1": DATASETS, "mha_lora_r8": DATASETS[:1]})))
    average = {r["group"]: r for r in rows if r["dataset"] == "average"}
    assert {g: r["n_datasets"] for g, r in average.items()} == {"mha": 3, "fc1": 3, "mha_lora_r8": 1}
    last = table6_md(rows).strip().splitlines()[-1]
    assert last == "| average | 81.00 | 81.00 | 80.00 (1 of 3) |"
    ax = accuracy_figure(rows).axes[0]
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["MHA", "FC1", "MHA LoRA r8\n(1 of 3 datasets)"]
    assert [bar.get_hatch() for bar in ax.patches] == [None, None, "//"]


def test_pareto_labels_do_not_overlap_as_rendered():
    """Ten configurations within half a point and a few percent of parameters of each other: every label's
    rendered box (read back through matplotlib's renderer) overlaps no other."""
    from plasticity.report.figures import pareto_figure

    from matplotlib.text import Text

    points = [dict(component=f"mha_lora_r{r}", strategy="lora", label=f"MHA LoRA r{r}", trainable_params=1e5 + 3e3 * i,
                   mean=80.0 + 0.05 * (i % 4), std=0.1, pareto=False) for i, r in enumerate(range(1, 11))]
    points += [dict(component=g, strategy=s, label=g, trainable_params=n, mean=acc, std=0.1, pareto=True)
               for g, s, n, acc in (("ln1", "group", 1e3, 70.0), ("all", "full", 1e8, 90.0))]  # the cluster is narrow
    fig = pareto_figure(points, "d0")
    renderer = fig.canvas.get_renderer()
    for label in fig.axes[0].texts:
        label.update_positions(renderer)
    boxes = [Text.get_window_extent(t, renderer) for t in fig.axes[0].texts]  # the text, without a leader line
    assert len(boxes) == len(points)
    overlapping = [(i, j) for i in range(len(boxes)) for j in range(i) if boxes[i].overlaps(boxes[j])]
    assert overlapping == []

"""The paper's claims C1..C5 on hand-built sweeps with known answers (each statistic against scipy on the same
numbers), Table 1 over 6+ targets, the paper's Table 6 as records, and plasticity through pretraining."""

import json

import numpy as np
import pytest
from scipy import stats

from plasticity.report import write_report
from plasticity.report.claims import CLAIMS, NO_PLASTICITY, PAPER_RANKING
from plasticity.report.collect import read_during_training
from plasticity.report.paper import PAPER_TABLE6, write_table6_sweep
from plasticity.report.pretraining import first_match, ranking_rows
from plasticity.report.summary import pretraining_line
from plasticity.report.writer import sweep_claims
from plasticity.tracking.report_run import TABLES
from tests.test_report import assert_figure, read_rows, write_run

GROUPS = ("ln1", "mha", "ln2", "fc1", "fc2")
TARGETS = tuple(f"t{i}" for i in range(6))
LRS = (0.01, 0.1)  # lr 0.1 is chosen on validation everywhere
SEEDS = (0, 1)
SCORE = {g: 5 - PAPER_RANKING.index(g) for g in GROUPS}  # the paper's ranking: mha 5 ... ln1 1

# Sweep "wins": MHA first in accuracy and steadiest; plasticity and gradient norms in the paper's order, with one
# swap on some targets so that the per-target statistics differ.
WINS = dict(base={"mha": 90.0, "fc1": 89.0, "fc2": 87.0, "ln2": 85.0, "ln1": 84.0, "all": 89.5, "head": 70.0},
            half_seed_gap={"mha": 0.1}, lr_drop={"mha": 1.0}, default_gap=0.5, default_drop=5.0,
            acc_swap={"t5": ("fc2", "ln2", 88.0)},  # t5: LN2 at 88 > FC2 at 87
            plast=SCORE, plast_swap={"t4": ("mha", "fc1")}, grad_swap={"t3": ("ln1", "ln2")})
# Sweep "loses": MHA last in accuracy and the least steady; plasticity reversed (LN1 most plastic), in the order
# of the accuracies; gradient norms in the paper's order (against plasticity).
LOSES = dict(base={"ln1": 90.0, "ln2": 89.0, "fc2": 88.0, "fc1": 87.0, "mha": 85.0, "all": 89.0, "head": 70.0},
             half_seed_gap={"mha": 1.0}, lr_drop={"mha": 8.0}, default_gap=0.1, default_drop=1.0, acc_swap={},
             plast={g: 6 - SCORE[g] for g in GROUPS}, plast_swap={}, grad_swap={}, grad_against=True)


def run_acc(spec, t, g, lr, s):
    """Test accuracy (%) of a run: the group's base + 0.5 per target index, -/+ the seed gap, minus the drop at
    lr 0.01."""
    base = spec["base"][g]
    swap = spec["acc_swap"].get(t)
    if swap and g == swap[1]:
        base = swap[2]
    gap = spec["half_seed_gap"].get(g, spec["default_gap"])
    drop = spec["lr_drop"].get(g, spec["default_drop"]) if lr == 0.01 else 0.0
    return base + 0.5 * int(t[1:]) + (gap if s else -gap) - drop




def plasticity_of(spec, t):
    """Group -> P(f) of target ``t`` (the spec's scores, scaled per target, with its swap)."""
    p = {g: spec["plast"][g] * (1 + 0.1 * int(t[1:])) for g in GROUPS}
    a, b = spec["plast_swap"].get(t, (None, None))
    if a:
        p[a], p[b] = p[b], p[a]
    return p


def grad_norms_of(spec, t):
    """Group -> gradient norms at steps 0, 1, 2 of its runs (mean: the group's score + 1, or against P(f))."""
    scores = {g: 6 - spec["plast"][g] for g in GROUPS} if spec.get("grad_against") else dict(spec["plast"])
    a, b = spec["grad_swap"].get(t, (None, None))
    if a:
        scores[a], scores[b] = scores[b], scores[a]
    return {g: [scores[g] + 0.5, scores[g] + 1.0, scores[g] + 1.5] for g in GROUPS}


def metrics(g, grads, plast=None):
    """A metrics.csv: plasticity of every group at step 0 (at step 50 in the reverse order), then grad norms."""
    cols = [f"grad_norm/{g}"] + ([f"plasticity/{h}" for h in GROUPS] if plast else [])
    lines = ["step," + ",".join(cols)]
    if plast:
        lines.append("0,," + ",".join(str(plast[h]) for h in GROUPS))
        lines.append("50,," + ",".join(str(10 - plast[h]) for h in GROUPS))
    lines += [f"{step},{v}" + "," * (len(cols) - 1) for step, v in enumerate(grads)]
    return "\n".join(lines) + "\n"


def write_analysis(root, t, plast):
    """A task=plasticity record whose plasticity.csv has two blocks per group averaging to ``plast``."""
    run = root / "plasticity" / t / "m" / "embedding_sequential_ref_x" / "seed_0"
    run.mkdir(parents=True)
    (run / "result.json").write_text(json.dumps(dict(task="plasticity", dataset=t, model="m", seed=0, status="done")))
    rows = [f"{g},{b},{plast[g] + d}" for g in GROUPS for b, d in ((0, -0.01), (1, 0.01))]
    (run / "plasticity.csv").write_text("group,block,mean\n" + "\n".join(rows) + "\n")


def write_sweep(root, spec, targets=TARGETS, plasticity="both"):
    """Runs of every group (and full, head) over LRS x SEEDS per target. P(f): ``both`` from task=plasticity records
    on the first three targets and from the runs' metrics.csv on the others; ``none``: nowhere."""
    for t in targets:
        plast, grads = plasticity_of(spec, t), grad_norms_of(spec, t)
        from_analysis = plasticity == "both" and int(t[1:]) < 3
        if from_analysis:
            write_analysis(root, t, plast)
        for g in (*GROUPS, "all", "head"):
            for lr in LRS:
                for s in SEEDS:
                    test = run_acc(spec, t, g, lr, s) / 100
                    val = test + (0.02 if lr == 0.1 else -0.02)
                    record = dict(task="finetune", dataset=t, model="m", component=g, optimizer="sgd", lr=lr, seed=s,
                                  status="done", best_val_acc=round(val, 6), test_acc=round(test, 6))
                    in_metrics = plast if plasticity == "both" and not from_analysis else None
                    text = metrics(g, grads[g], in_metrics) if g in GROUPS else None
                    write_run(root, t, g, lr, s, record, text)


def expected_acc(spec, t):
    """Table 6 accuracy per group: the mean over seeds at lr 0.1 (chosen on validation)."""
    return {g: np.mean([run_acc(spec, t, g, 0.1, s) for s in SEEDS]) for g in GROUPS}


def by_claim(rows):
    """Claim id -> (its verdict row, its detail rows)."""
    out = {}
    for cid in CLAIMS:
        mine = [r for r in rows if r["claim"].startswith(cid + " ")]
        heads = [r for r in mine if r["level"] == "claim"]
        assert len(heads) == 1 and mine[0] is heads[0]  # one verdict row, first
        out[cid] = (heads[0], {r["target"]: r for r in mine[1:]})
    return out


def num(value):
    return float("nan") if value in (None, "") else float(value)


@pytest.fixture(scope="module")
def wins(tmp_path_factory):
    root = tmp_path_factory.mktemp("wins")
    write_sweep(root, WINS)
    return root, write_report(root)


def test_claims_csv_has_the_required_columns_first_and_a_verdict_per_claim(wins):
    root, _ = wins
    rows = read_rows(root / "report" / "claims.csv")
    assert list(rows[0])[:6] == ["claim", "statistic", "value", "p_value", "n", "verdict"]
    assert {r["verdict"] for r in rows if r["level"] != "note"} <= {"supported", "contradicted", "inconclusive"}
    heads, _ = zip(*by_claim(rows).values())
    assert [h["claim"][:2] for h in heads] == ["C1", "C2", "C3", "C4", "C5"]


def test_report_opens_with_the_claims_section(wins):
    root, result = wins
    text = result.path.read_text()
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[0] == "## Claims"
    assert "| C3 MHA is better than FC2, LN2, LN1 and no worse than FC1 | supported |" in text
    written = {p.stem for p in (root / "report").glob("*.csv")} - {"runs"}
    assert "claims" in written and written <= set(TABLES)  # every report table goes to W&B


def test_mha_wins_everywhere_every_claim_supported(wins):
    root, _ = wins
    claims = by_claim(read_rows(root / "report" / "claims.csv"))
    assert {cid: head["verdict"] for cid, (head, _) in claims.items()} == dict.fromkeys(CLAIMS, "supported")


def test_c1_one_ranking_by_its_exact_permutation_p_against_scipy(wins):
    """C1 tests the one ranking of the groups' mean P(f) over targets (not the six per-target taus as replicates:
    they repeat one model's ranking); per target, tau and scipy's exact p."""
    root, _ = wins
    head, details = by_claim(read_rows(root / "report" / "claims.csv"))["C1"]
    for t in TARGETS:
        p = plasticity_of(WINS, t)
        want = stats.kendalltau([p[g] for g in PAPER_RANKING], [5, 4, 3, 2, 1], method="exact")
        row = details[t]
        assert num(row["value"]) == pytest.approx(want.statistic) and num(row["p_value"]) == pytest.approx(want.pvalue)
        assert row["n"] == "5" and ("task=plasticity" in row["statistic"]) == (int(t[1:]) < 3)
    assert num(details["t4"]["value"]) == pytest.approx(0.8) and details["t4"]["verdict"] == "inconclusive"
    assert num(details["t4"]["p_value"]) == pytest.approx(10 / 120)  # |tau| >= 0.8: 2 + 8 of the 120 orderings
    assert num(head["value"]) == pytest.approx(1.0) and head["n"] == "5" and head["verdict"] == "supported"
    assert num(head["p_value"]) == pytest.approx(2 / 120) and num(head["mde"]) == pytest.approx(1.0)


def test_plasticity_from_metrics_is_the_first_step_not_a_later_one(wins):
    root, _ = wins
    _, details = by_claim(read_rows(root / "report" / "claims.csv"))["C2"]
    p, acc = plasticity_of(WINS, "t5"), expected_acc(WINS, "t5")  # t5: P(f) from metrics.csv step 0
    want = stats.spearmanr([p[g] for g in GROUPS], [acc[g] for g in GROUPS])
    assert "finetuning metrics step 0" in details["t5"]["statistic"]
    assert num(details["t5"]["value"]) == pytest.approx(want.statistic) == pytest.approx(0.9)


def test_c2_and_c4_spearman_per_target_and_pooled_against_scipy(wins):
    root, _ = wins
    claims = by_claim(read_rows(root / "report" / "claims.csv"))
    for cid, other in (("C2", lambda t: expected_acc(WINS, t)),
                       ("C4", lambda t: {g: np.mean(v) for g, v in grad_norms_of(WINS, t).items()})):
        head, details = claims[cid]
        rhos = []
        for t in TARGETS:
            x, y = [plasticity_of(WINS, t)[g] for g in GROUPS], [other(t)[g] for g in GROUPS]
            want = stats.spearmanr(x, y).statistic
            exact = stats.permutation_test((x, y), lambda a, b: stats.spearmanr(a, b).statistic,
                                           permutation_type="pairings", n_resamples=np.inf).pvalue
            assert num(details[t]["value"]) == pytest.approx(want)
            assert num(details[t]["p_value"]) == pytest.approx(exact)
            rhos.append(want)
        assert num(head["value"]) == pytest.approx(np.mean(rhos)) and head["n"] == "6"
        assert num(head["p_value"]) == pytest.approx(stats.wilcoxon(rhos, method="exact").pvalue)
        half = stats.t.ppf(0.975, 5) * np.std(rhos, ddof=1) / np.sqrt(6)
        assert num(head["ci_low"]) == pytest.approx(np.mean(rhos) - half)
        assert num(head["mde"]) == pytest.approx((stats.t.ppf(0.975, 5) + stats.t.ppf(0.8, 5))
                                                 * np.std(rhos, ddof=1) / np.sqrt(6))
        assert min(rhos) < 1  # a swap on some target: the statistic is not trivially 1


def test_table1_and_c3_over_six_targets_against_scipy(wins):
    root, _ = wins
    table1 = {r["group"]: r for r in read_rows(root / "report" / "table1.csv")}
    _, details = by_claim(read_rows(root / "report" / "claims.csv"))["C3"]
    mha = np.array([expected_acc(WINS, t)["mha"] for t in TARGETS])
    for g, label in (("fc2", "FC2"), ("ln2", "LN2"), ("ln1", "LN1"), ("fc1", "FC1")):
        other = np.array([expected_acc(WINS, t)[g] for t in TARGETS])
        p = stats.wilcoxon(mha, other, method="exact").pvalue
        for got in (table1[g], details[f"vs {label}"]):
            assert num(got.get("mean_decrease", got.get("value"))) == pytest.approx(np.mean(mha - other))
            assert num(got["p_value"]) == pytest.approx(p)
        assert details[f"vs {label}"]["n"] == "6" and details[f"vs {label}"]["verdict"] == "supported"
    assert table1["fc1"]["significant"] == "True"  # 6 targets, all the same sign: p = 1/32


def test_c5_spread_over_the_lr_seed_grid(wins):
    root, _ = wins
    head, details = by_claim(read_rows(root / "report" / "claims.csv"))["C5"]
    spread = {g: np.mean([np.std([run_acc(WINS, t, g, lr, s) for lr in LRS for s in SEEDS], ddof=1)
                          for t in TARGETS]) for g in GROUPS}
    assert min(spread, key=spread.get) == "mha"
    assert num(head["value"]) == 4 and head["verdict"] == "supported"  # steadier than each of the 4 others
    for g, label in (("ln1", "LN1"), ("fc2", "FC2")):
        assert num(details[f"vs {label}"]["value"]) == pytest.approx(spread[g] - spread["mha"])
        assert details[f"vs {label}"]["verdict"] == "supported" and details[f"vs {label}"]["n"] == "6"


def test_mha_never_wins_every_claim_contradicted_but_c2(tmp_path):
    write_sweep(tmp_path, LOSES)
    rows, problems = sweep_claims(tmp_path)
    claims = by_claim(rows)
    verdicts = {cid: head["verdict"] for cid, (head, _) in claims.items()}
    # accuracy follows the (reversed) plasticity: C2 holds although C1 and C3 do not
    assert verdicts == {"C1": "contradicted", "C2": "supported", "C3": "contradicted", "C4": "contradicted",
                        "C5": "contradicted"} and problems == []
    assert num(claims["C1"][0]["value"]) == pytest.approx(-1.0)
    fc1 = claims["C3"][1]["vs FC1"]  # MHA 2 points below FC1 on all 6 targets: significantly worse
    mha = [expected_acc(LOSES, t)["mha"] for t in TARGETS]
    fc1_acc = [expected_acc(LOSES, t)["fc1"] for t in TARGETS]
    assert num(fc1["value"]) == pytest.approx(-2.0) and fc1["verdict"] == "contradicted"
    assert num(fc1["p_value"]) == pytest.approx(stats.wilcoxon(mha, fc1_acc, method="exact").pvalue)
    assert num(claims["C5"][0]["value"]) == 0
    assert all(num(r["value"]) < 0 and r["verdict"] == "contradicted" for r in claims["C5"][1].values())


def test_without_plasticity_c1_c2_c4_are_inconclusive(tmp_path):
    write_sweep(tmp_path, WINS, plasticity="none")
    claims = by_claim(sweep_claims(tmp_path)[0])
    for cid in ("C1", "C2", "C4"):
        head, details = claims[cid]
        assert head["verdict"] == "inconclusive" and head["reason"] == NO_PLASTICITY and not details
    assert claims["C3"][0]["verdict"] == "supported" and claims["C5"][0]["verdict"] == "supported"


def test_five_targets_cannot_reach_significance(tmp_path):
    """Over 5 targets no Wilcoxon p goes below 2/2^5: inconclusive, not contradicted. C1's one ranking does not
    depend on the number of targets."""
    write_sweep(tmp_path, WINS, targets=TARGETS[:5])
    claims = by_claim(sweep_claims(tmp_path)[0])
    for cid in ("C2", "C3", "C4"):
        head, _ = claims[cid]
        assert head["verdict"] == "inconclusive" and "5 target(s)" in head["reason"], cid
    assert num(claims["C2"][0]["p_value"]) == pytest.approx(0.0625)  # 2 / 2**5: the smallest there is
    assert claims["C1"][0]["verdict"] == "supported"


# --- the paper's Table 6 as records ------------------------------------------------------------------------------

PAPER_COLUMNS = ("mha", "fc1", "fc2", "ln2", "ln1", "all")


@pytest.fixture(scope="module")
def paper(tmp_path_factory):
    root = write_table6_sweep(tmp_path_factory.mktemp("paper"))
    return root, write_report(root)


def paper_means(group):
    return np.array([cells[PAPER_COLUMNS.index(group)][0] for cells in PAPER_TABLE6.values()])


def test_paper_table6_records_reproduce_the_table(paper):
    root, _ = paper
    rows = {(r["dataset"], r["group"]): r for r in read_rows(root / "report" / "table6.csv")}
    assert len(PAPER_TABLE6) == 11
    for target, cells in PAPER_TABLE6.items():
        for group, (mean, std) in zip(PAPER_COLUMNS, cells):
            assert float(rows[(target, group)]["mean"]) == pytest.approx(mean)
            assert float(rows[(target, group)]["std"]) == pytest.approx(std)
    t1 = {r["group"]: float(r["mean_decrease"]) for r in read_rows(root / "report" / "table1.csv")}
    assert round(t1["fc1"], 2) == 0.07 and round(t1["fc2"], 2) == 0.44  # the paper's Table 1


def test_claims_on_the_paper_table6(paper):
    root, result = paper
    claims = by_claim(read_rows(root / "report" / "claims.csv"))
    for cid in ("C1", "C2", "C4"):
        assert claims[cid][0]["verdict"] == "inconclusive" and claims[cid][0]["reason"] == NO_PLASTICITY
    head, details = claims["C3"]
    mha = paper_means("mha")
    for g, label in (("fc2", "FC2"), ("ln2", "LN2"), ("ln1", "LN1"), ("fc1", "FC1")):
        want = stats.wilcoxon(mha, paper_means(g), method="exact").pvalue
        assert num(details[f"vs {label}"]["value"]) == pytest.approx(np.mean(mha - paper_means(g)))
        assert num(details[f"vs {label}"]["p_value"]) == pytest.approx(want) and details[f"vs {label}"]["n"] == "11"
    assert head["verdict"] == "supported"  # FC2, LN2, LN1 significantly below MHA (p < 0.05), FC1 not
    stds = {g: np.mean([cells[PAPER_COLUMNS.index(g)][1] for cells in PAPER_TABLE6.values()]) for g in GROUPS}
    c5 = claims["C5"]
    assert min(stds, key=stds.get) != "mha" and c5[0]["verdict"] != "supported"
    for g, label in (("fc1", "FC1"), ("ln1", "LN1")):
        assert num(c5[1][f"vs {label}"]["value"]) == pytest.approx(stds[g] - stds["mha"])
    assert result.path.read_text().index("## Claims") < result.path.read_text().index("## Table 6")


# --- plasticity through pretraining ------------------------------------------------------------------------------

# step -> group -> P(f) of two blocks; step 0 (random init) LN1 > LN2 > MHA > FC1 > FC2; the paper's order at step
# 200 only; at step 300 FC2 and LN2 swapped again.
PRETRAIN = {
    0: {"ln1": (0.8, 0.8), "ln2": (0.7, 0.75), "mha": (0.5, 0.5), "fc1": (0.4, 0.45), "fc2": (0.2, 0.15)},
    100: {"ln1": (0.5, 0.5), "ln2": (0.6, 0.6), "mha": (0.9, 1.1), "fc1": (0.7, 0.7), "fc2": (0.4, 0.4)},
    200: {"ln1": (0.3, 0.3), "ln2": (0.5, 0.5), "mha": (2.0, 2.0), "fc1": (1.2, 1.4), "fc2": (0.8, 0.8)},
    300: {"ln1": (0.3, 0.3), "ln2": (0.9, 0.9), "mha": (2.5, 2.5), "fc1": (1.5, 1.5), "fc2": (0.8, 0.8)},
}
NO_ALL_ROW = 100  # this step has the per-block rows only: the mean is computed


def during_csv(curves, no_all=()):
    lines = ["step,group,block,mean"]
    for step, groups in curves.items():
        for g, blocks in groups.items():
            lines += [f"{step},{g},{b},{v}" for b, v in enumerate(blocks)]
            if step not in no_all:
                lines.append(f"{step},{g},all,{np.mean(blocks)}")
    return "\n".join(lines) + "\n"


def hand_distance(p):
    """Pairs (a above b in the paper) with P(a) <= P(b), counted one by one."""
    return sum(1 for i, a in enumerate(PAPER_RANKING) for b in PAPER_RANKING[i + 1:] if p[a] <= p[b])


def write_pretrain(root, model="m", task="pretrain"):
    run = root / task / "fm" / model / "all" / "adamw_lr_0.003" / "seed_0"
    run.mkdir(parents=True)
    record = dict(task=task, dataset="fm", model=model, component="all", optimizer="adamw", lr=0.003, seed=0,
                  status="done", best_val_acc=0.8, test_acc=0.8)
    (run / "result.json").write_text(json.dumps(record))
    (run / "plasticity_during_training.csv").write_text(during_csv(PRETRAIN, no_all=(NO_ALL_ROW,)))
    return run


def test_pretraining_ranking_first_match_and_final_distance_by_hand(tmp_path):
    run = write_pretrain(tmp_path)
    curves = read_during_training(run / "plasticity_during_training.csv")
    assert curves[NO_ALL_ROW]["mha"] == pytest.approx(1.0)  # mean of the blocks where no "all" row
    rows = ranking_rows(curves)
    means = {s: {g: np.mean(b) for g, b in groups.items()} for s, groups in PRETRAIN.items()}
    assert [r["step"] for r in rows] == [0, 100, 200, 300]
    for r in rows:
        p = means[r["step"]]
        assert r["kendall_distance"] == hand_distance(p)
        want = stats.kendalltau([p[g] for g in PAPER_RANKING], [5, 4, 3, 2, 1]).statistic
        assert r["kendall_tau"] == pytest.approx(want)
    assert [r["kendall_distance"] for r in rows] == [7, 2, 0, 1]  # step 0: only mha>fc1, mha>fc2, fc1>fc2 hold
    assert first_match(rows) == 200 and rows[-1]["ranking"] == "MHA > FC1 > LN2 > FC2 > LN1"


def test_pretraining_section_figure_csv_and_summary(tmp_path):
    ft = tmp_path / "finetune"
    write_run(tmp_path, "d", "mha", 0.1, 0, dict(task="finetune", dataset="d", model="m", component="mha", lr=0.1,
                                                  seed=0, status="done", best_val_acc=0.5, test_acc=0.4))
    write_pretrain(tmp_path)
    write_pretrain(tmp_path, model="other")  # another model's pretraining: not this sweep's
    finetune_csv = ft / "d" / "m" / "mha" / "sgd_lr_0.1" / "seed_0" / "plasticity_during_training.csv"
    finetune_csv.write_text(during_csv({0: PRETRAIN[200]}))  # a finetuning run's file: not pretraining
    result = write_report(ft / "d")  # a finetune sweep: the pretraining runs are in the sibling folder
    out = result.path.parent
    rows = read_rows(out / "pretraining_ranking.csv")
    assert [(r["step"], r["kendall_distance"], r["matches_paper"]) for r in rows] == [
        ("0", "7", "False"), ("100", "2", "False"), ("200", "0", "True"), ("300", "1", "False")]
    assert {r["run"] for r in rows} == {str(tmp_path / "pretrain" / "fm" / "m" / "all" / "adamw_lr_0.003" / "seed_0")}
    assert (out / "plasticity_during_pretraining.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert_figure(out / "plasticity_during_pretraining.png",  # a curve per group, in the paper's colours
                  ("tab:blue", "tab:red", "tab:cyan", "tab:orange", "tab:green"))
    text = result.path.read_text()
    section = text[text.index("## Plasticity through pretraining"):]
    assert "first matches the paper's MHA > FC1 > FC2 > LN2 > LN1 at step 200" in section
    assert "1 rank swap from the paper's" in section
    line = pretraining_line(tmp_path, "m")
    assert "at step 200" in line and "1 rank swap" in line and "adamw_lr_0.003" in line
    assert pretraining_line(tmp_path, "absent") is None


def test_a_pretraining_that_never_matches_says_so(tmp_path):
    curves = {s: {g: float(np.mean(b)) for g, b in PRETRAIN[0].items()} for s in (0, 50)}
    rows = ranking_rows(curves)
    assert first_match(rows) is None and rows[-1]["kendall_distance"] == 7
    run = write_pretrain(tmp_path)
    (run / "plasticity_during_training.csv").write_text(during_csv({0: PRETRAIN[0], 50: PRETRAIN[0]}))
    assert "never matches" in pretraining_line(tmp_path, "m") and "7 rank swaps" in pretraining_line(tmp_path, "m")


def test_the_report_task_prints_the_averages_and_every_verdict(wins, capsys):
    from plasticity.recipes.report import headline

    root, _ = wins
    headline(root / "report")
    out = capsys.readouterr().out
    averages = {r["label"]: float(r["mean"]) for r in read_rows(root / "report" / "table6.csv")
                if r["dataset"] == "average"}
    assert "over the 6 targets" in out and f"MHA {averages['MHA']:.2f}" in out and f"LN1 {averages['LN1']:.2f}" in out
    for cid in CLAIMS:
        assert any(line.startswith(f"│ {cid} ") and "│ supported" in line for line in out.splitlines()), cid


# --- verdicts that say when they cannot tell ------------------------------------------------------------------------


def test_exact_rank_p_is_scipys_exact_kendall_p_for_every_ordering_of_five():
    from itertools import permutations

    from plasticity.report.claims import decidable, exact_rank_p

    x = [0.9, 0.7, 0.4, 0.2, 0.1]
    for order in permutations(range(5)):
        want = stats.kendalltau(x, list(order), method="exact").pvalue
        assert exact_rank_p(x, list(order)) == pytest.approx(want)
    # 6 items: orderings with <= 1 inversion (1 + 5) or their reverses: p = 12/720 at |tau| = 13/15; with 2 (14
    # more) p = 40/720 > 0.05. 5 items: only the order or its reverse, p = 2/120.
    assert decidable(5) == pytest.approx(1.0) and decidable(6) == pytest.approx(13 / 15)


def write_noisy(root, targets=TARGETS, gap=0.3):
    """MHA ``gap`` points above every group on average, the sign flipping from target to target (a small effect in
    noise of +-2 points): no test can tell."""
    for i, t in enumerate(targets):
        for g in GROUPS:
            for s in SEEDS:
                noise = (2.0 if (i + GROUPS.index(g)) % 2 else -2.0) if g != "mha" else 0.0
                test = (80.0 + (gap if g == "mha" else 0.0) + noise) / 100
                record = dict(task="finetune", dataset=t, model="m", component=g, optimizer="sgd", lr=0.1, seed=s,
                              status="done", best_val_acc=test, test_acc=test, majority_acc=0.5)
                write_run(root, t, g, 0.1, s, record, None)


def test_a_small_effect_in_noise_is_inconclusive_with_what_the_design_detects(tmp_path):
    write_noisy(tmp_path)
    claims = by_claim(sweep_claims(tmp_path)[0])
    head, parts = claims["C3"]
    assert head["verdict"] == "inconclusive"
    for label in ("FC2", "LN2", "LN1"):
        part = parts[f"vs {label}"]
        assert part["verdict"] == "inconclusive" and "the design detects" in part["reason"]
        assert num(part["mde"]) > abs(num(part["value"])) and num(part["ci_low"]) < 0 < num(part["ci_high"])


def test_a_target_stuck_at_the_majority_class_is_left_out(tmp_path):
    write_noisy(tmp_path, gap=5.0)
    for g in GROUPS:  # a seventh target where every run predicts the majority class (61.7%)
        for s in SEEDS:
            record = dict(task="finetune", dataset="stuck", model="m", component=g, optimizer="sgd", lr=0.1, seed=s,
                          status="done", best_val_acc=0.6, test_acc=0.617, majority_acc=0.617)
            write_run(tmp_path, "stuck", g, 0.1, s, record, None)
    rows = sweep_claims(tmp_path)[0]
    notes = [r for r in rows if r["level"] == "note"]
    assert [n["target"] for n in notes] == ["stuck"] and "majority class (61.7%" in notes[0]["reason"]
    assert all(r["target"] != "stuck" for r in rows if r["level"] == "detail")
    assert by_claim(rows)["C3"][1]["vs FC2"]["n"] == 6


def test_groups_are_compared_on_one_learning_rate_grid(tmp_path):
    write_noisy(tmp_path, gap=5.0)
    record = dict(task="finetune", dataset="t0", model="m", component="mha", optimizer="sgd", lr=1.0, seed=0,
                  status="done", best_val_acc=0.99, test_acc=0.99, majority_acc=0.5)
    write_run(tmp_path, "t0", "mha", 1.0, 0, record, None)  # only MHA ran lr 1.0, and it would win there
    rows = sweep_claims(tmp_path)[0]
    notes = [r["reason"] for r in rows if r["level"] == "note" and r["target"] == "t0"]
    assert any("learning rates 1.0 not run by every group" in n for n in notes)
    part = by_claim(rows)["C3"][1]["vs FC2"]
    assert num(part["value"]) == pytest.approx(5.0)  # lr 0.1 everywhere: 1.0's 99% is left out

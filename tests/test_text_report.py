"""The report across modalities: P(f) of a target comes from one measurement mode."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from plasticity.report import write_report
from plasticity.report.collect import analysis_plasticity
from plasticity.report.tables import AVERAGE
from tests.test_claims import by_claim
from tests.test_report import read_rows, table6_of


def write_plasticity(run: Path, values: dict[str, list[float]]) -> Path:
    run.mkdir(parents=True)
    with open(run / "plasticity.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, ["group", "block", "mean"])
        writer.writeheader()
        for group, means in values.items():
            writer.writerows({"group": group, "block": b, "mean": m} for b, m in enumerate(means))
    return run


def test_embedding_mode_is_used_where_a_target_has_it_and_modes_are_never_averaged(tmp_path):
    emb = write_plasticity(tmp_path / "a", {"mha": [1.0, 3.0], "fc1": [2.0, 2.0]})
    layer = write_plasticity(tmp_path / "b", {"mha": [10.0, 10.0], "fc1": [20.0, 20.0]})
    only_layer = write_plasticity(tmp_path / "c", {"mha": [5.0, 7.0], "fc1": [1.0, 1.0]})
    analysis = [(emb, {"dataset": "t1", "model": "m", "mode": "embedding"}),
                (layer, {"dataset": "t1", "model": "m", "mode": "layer"}),
                (only_layer, {"dataset": "t2", "model": "m", "mode": "layer"})]
    assert analysis_plasticity(analysis, []) == {"t1": {"mha": 2.0, "fc1": 2.0}, "t2": {"mha": 6.0, "fc1": 1.0}}


@pytest.mark.slow
def test_the_committed_text_study_gives_the_verdicts_its_config_records(tmp_path):
    """Golden values: the report over the 448 committed records of ``experiment=text_study`` gives the
    verdicts and effects written in its config header and the README (a change to the claims'
    statistics that moves them shows here)."""
    study = Path(__file__).resolve().parent.parent / "results" / "text_study"
    result = write_report(study, "val", out_dir=tmp_path)
    assert (result.runs, result.done) == (448, 448)
    claims = by_claim(read_rows(tmp_path / "claims.csv"))
    assert {c: head["verdict"] for c, (head, _) in claims.items()} == {
        "C1": "inconclusive", "C2": "inconclusive", "C3": "inconclusive", "C4": "contradicted", "C5": "contradicted"}
    assert float(claims["C1"][0]["value"]) == pytest.approx(-0.4)
    assert float(claims["C2"][0]["value"]) == pytest.approx(0.0176, abs=5e-4)
    assert float(claims["C4"][0]["value"]) == pytest.approx(-0.4875, abs=5e-4)
    c3 = claims["C3"][1]
    assert {t: r["verdict"].split(" ")[0] for t, r in c3.items()} == {
        "vs FC2": "inconclusive", "vs LN2": "inconclusive", "vs LN1": "supported", "vs FC1": "inconclusive"}
    assert float(c3["vs LN1"]["value"]) == pytest.approx(1.074, abs=5e-3)
    average = {g: float(r["mean"]) for (d, g), r in table6_of(tmp_path).items() if d == AVERAGE}
    assert {g: round(a, 1) for g, a in average.items()} == {
        "ln1": 79.1, "mha": 80.1, "ln2": 80.1, "fc1": 80.8, "fc2": 80.7, "all": 80.2, "head": 77.4}

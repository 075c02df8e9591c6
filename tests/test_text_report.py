"""The report across modalities: P(f) of a target comes from one measurement mode."""

from __future__ import annotations

import csv
from pathlib import Path

from plasticity.report.collect import analysis_plasticity


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

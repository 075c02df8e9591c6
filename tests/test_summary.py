"""The quickstart summary: best run per component next to plasticity and its bound."""

import json

from plasticity.summary import summary_table


def test_summary_picks_best_val_run_and_ranks(tmp_path):
    base = tmp_path / "finetune" / "ds" / "m"
    runs = [("mha", 0.01, 0.80, 0.79), ("mha", 0.1, 0.70, 0.95), ("ln1", 0.01, 0.60, 0.61)]
    for component, lr, val, test in runs:
        d = base / component / f"lr_{lr}" / "seed_0"
        d.mkdir(parents=True)
        (d / "result.json").write_text(json.dumps(dict(component=component, lr=lr, status="done", best_val_acc=val,
                                                       test_acc=test, trainable_params=7)))
    p = tmp_path / "plasticity" / "ds" / "m" / "x" / "seed_0"
    p.mkdir(parents=True)
    (p / "plasticity.csv").write_text("group,block,mean\nmha,0,2.0\nmha,1,4.0\nln1,0,0.5\nln1,1,0.7\n")
    b = tmp_path / "bounds" / "ds" / "m" / "x" / "seed_0"
    b.mkdir(parents=True)
    (b / "bounds.csv").write_text("group,block,bound,value\nmha,0,prop3_rms,10\nmha,0,prop3_max,99\nln1,0,prop1,3\n")
    table = summary_table(tmp_path, "ds", "m")
    cells = {col.header: list(col.cells) for col in table.columns}
    assert cells["component"] == ["ln1", "mha"]
    assert cells["test acc %"] == ["61.00", "79.00"]  # mha: the lr with the best validation accuracy
    assert cells["acc rank"] == ["2", "1"]
    assert cells["plasticity P(f)"] == ["0.600", "3.000"] and cells["P rank"] == ["2", "1"]
    assert cells["upper bound"] == ["3", "10"]

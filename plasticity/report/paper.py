"""The paper's Table 6 as run records, so that the report (Table 1, the claims) runs on the paper's own numbers.

``python -m plasticity.report.paper OUT_DIR`` writes ``OUT_DIR/finetune/<target>/vit_base_patch16_224/<group>/
sgd_lr_0.01/seed_<s>/result.json`` for the 11 targets and the configurations MHA, FC1, FC2, LN2, LN1 and full
finetuning (three seeds whose test accuracies are mean - std, mean, mean + std: their mean and sample
std are the table's), and one linear-probe record per target; then ``python launch.py task=report sweep_dir=OUT_DIR``.

The table gives only the best accuracy over each learning-rate grid and no plasticity per target,
so every record has the same placeholder learning rate (:data:`PLACEHOLDER_LR`), validation
accuracy equal to test accuracy, and there is nothing for C1, C2 and C4 (not testable), while
Table 1, C3 and C5 (over seeds only) are computed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from plasticity.runs.io import write_json_atomic
from plasticity.runs.record import RESULT_FILE

__all__ = ["PAPER_TABLE6", "PAPER_PROBE", "PLACEHOLDER_LR", "SEEDS", "table6_records", "write_table6_sweep"]

MODEL = "vit_base_patch16_224"
PLACEHOLDER_LR = 0.01
"""The learning rate of every record: Table 6 gives the best over each grid, not which rate it was."""
SEEDS = (0, 42, 3407)
"""The paper's three seeds (Figs. 19 to 21)."""
GROUP_ORDER = ("mha", "fc1", "fc2", "ln2", "ln1", "all")
"""The columns of Table 6, full finetuning last (then linear probing, :data:`PAPER_PROBE`)."""
PAPER_TABLE6: dict[str, tuple[tuple[float, float], ...]] = {
    "cifar10": ((98.91, 0.07), (99.09, 0.05), (98.91, 0.06), (98.72, 0.05), (98.67, 0.03), (99.02, 0.02)),
    "cifar100": ((92.65, 0.07), (92.85, 0.07), (92.31, 0.11), (91.93, 0.11), (91.43, 0.07), (92.74, 0.05)),
    "cifar10_c/contrast": ((97.09, 0.11), (97.06, 0.08), (96.28, 0.11), (96.67, 0.20), (96.89, 0.19), (97.23, 0.18)),
    "cifar10_c/gaussian_noise": ((89.41, 0.53), (89.49, 0.16), (88.49, 0.51), (89.55, 0.04), (88.99, 0.24),
                                 (87.14, 1.16)),
    "cifar10_c/motion_blur": ((94.72, 0.21), (94.53, 0.06), (94.04, 0.16), (93.95, 0.34), (93.25, 0.29),
                              (94.67, 0.14)),
    "cifar10_c/snow": ((95.47, 0.13), (95.52, 0.20), (95.27, 0.29), (95.51, 0.11), (95.15, 0.10), (95.42, 0.13)),
    "cifar10_c/speckle_noise": ((90.07, 0.32), (89.85, 0.34), (89.22, 0.31), (89.71, 0.17), (89.74, 0.31),
                                (89.58, 0.43)),
    "domainnet/clipart": ((77.31, 0.41), (76.47, 0.24), (76.54, 0.17), (74.37, 0.08), (74.65, 0.16), (78.50, 0.49)),
    "domainnet/sketch": ((69.23, 0.05), (69.31, 0.18), (69.49, 0.20), (65.27, 0.15), (65.76, 0.10), (71.30, 0.26)),
    "flowers102": ((99.03, 0.08), (99.05, 0.06), (98.86, 0.06), (99.21, 0.07), (98.99, 0.20), (99.15, 0.05)),
    "pets": ((94.37, 0.13), (94.26, 0.26), (93.98, 0.20), (94.39, 0.13), (94.46, 0.11), (94.57, 0.29)),
}
"""Target -> (mean, std) of the top-1 test accuracy (%) over three seeds per :data:`GROUP_ORDER` (paper, Table 6)."""
PAPER_PROBE = {"cifar10": 91.95, "cifar100": 65.43, "cifar10_c/contrast": 73.25, "cifar10_c/gaussian_noise": 49.20,
               "cifar10_c/motion_blur": 59.70, "cifar10_c/snow": 59.25, "cifar10_c/speckle_noise": 51.15,
               "domainnet/clipart": 42.76, "domainnet/sketch": 29.08, "flowers102": 96.34, "pets": 88.33}
"""Target -> linear-probing accuracy (%) (Table 6, last column; one number, no seeds)."""


def table6_records() -> list[tuple[Path, dict]]:
    """(relative run folder, record) of every finetuning and linear-probe record of Table 6."""
    out = []
    for target, cells in PAPER_TABLE6.items():
        for group, (mean, std) in zip(GROUP_ORDER, cells):
            for seed, acc in zip(SEEDS, (mean - std, mean, mean + std)):
                record = dict(task="finetune", dataset=target, model=MODEL, component=group, optimizer="sgd",
                              lr=PLACEHOLDER_LR, seed=seed, status="done", best_val_acc=round(acc / 100, 6),
                              test_acc=round(acc / 100, 6), source="paper Table 6")
                out.append((Path("finetune", target, MODEL, group, f"sgd_lr_{PLACEHOLDER_LR}", f"seed_{seed}"), record))
        probe = dict(task="linear_probe", dataset=target, model=MODEL, component="probe", strategy="probe", lr=None,
                     seed=0, status="done", best_val_acc=None, test_acc=round(PAPER_PROBE[target] / 100, 6),
                     source="paper Table 6")
        out.append((Path("linear_probe", target, MODEL, "probe", "seed_0"), probe))
    return out


def write_table6_sweep(root: str | Path) -> Path:
    """Writes :func:`table6_records` under ``root`` as ``result.json`` files; returns ``root``."""
    root = Path(root)
    for folder, record in table6_records():
        write_json_atomic(root / folder / RESULT_FILE, record)
    return root


def main(argv: list[str] | None = None) -> None:
    """``python -m plasticity.report.paper OUT_DIR``: writes the records; prints the report command."""
    parser = argparse.ArgumentParser(prog="python -m plasticity.report.paper", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    root = write_table6_sweep(parser.parse_args(argv).out_dir)
    print(f"wrote the paper's Table 6 as records under {root}; report: python launch.py task=report sweep_dir={root}")


if __name__ == "__main__":
    main()

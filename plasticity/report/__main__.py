"""``python -m plasticity.report <sweep_dir> [--select val|test] [--out DIR] [--optimizer NAME]``: writes the report.

Prints the path of ``report.md``. A bad ``sweep_dir`` (missing, a file, no ``result.json`` under
it) prints the problem and its fix to stderr and exits 2, having written nothing; files that could
not be used are counted on stderr and listed in report.md (exit 0).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from plasticity.report.writer import ReportError, write_report


def main(argv: list[str] | None = None) -> int:
    """Runs the command line; returns the exit status (0, or 2 for a bad ``sweep_dir``)."""
    p = argparse.ArgumentParser(prog="python -m plasticity.report", description=__doc__.splitlines()[0])
    p.add_argument("sweep_dir", type=Path)
    p.add_argument("--select", choices=("val", "test"), default="val",
                   help="choose each learning rate by mean validation (default) or test accuracy")
    p.add_argument("--out", type=Path, default=None,
                   help="output directory (default <sweep_dir>/report; <sweep_dir>/report_<optimizer> with "
                        "--optimizer)")
    p.add_argument("--optimizer", default=None,
                   help="only the finetuning runs of this optimizer, e.g. adamw (the AdamW ablation shares the SGD "
                        "grid's folder); linear probes are kept")
    args = p.parse_args(argv)
    try:
        result = write_report(args.sweep_dir, args.select, args.out, optimizer=args.optimizer)
    except ReportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(result.path)
    if result.problems:
        print(f"{len(result.problems)} file(s) could not be used: listed under Problems in {result.path}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

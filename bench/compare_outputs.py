"""Whether two output folders of the same commands hold the same results.

    python bench/compare_outputs.py <before>/outputs <after>/outputs

Compares every ``result.json`` (all fields but the timings and the paths, which differ between two
checkouts of the same commands), and ``claims.csv``, ``table1.csv``, ``table6.csv`` and
``report.md`` byte for byte after the folder's own path is replaced. Prints each difference and
exits 1 when there is one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TIMINGS = ("wall_s", "train_s", "auto_s", "cost_s", "elapsed_s", "measure_s", "seconds")
FILES = ("claims.csv", "table1.csv", "table6.csv", "report.md")


def comparable(value, root: Path):
    """``value`` without timing fields, its paths made relative to ``root``."""
    if isinstance(value, dict):
        return {k: comparable(v, root) for k, v in value.items() if k not in TIMINGS and not k.endswith("_s")}
    if isinstance(value, list):
        return [comparable(v, root) for v in value]
    if isinstance(value, str):
        return value.replace(str(root.resolve()), "<root>").replace(str(root), "<root>")
    return value


def main(before: Path, after: Path) -> int:
    differences = 0
    names = sorted({p.relative_to(before) for p in before.rglob("result.json")}
                   | {p.relative_to(after) for p in after.rglob("result.json")})
    names = [n for n in names if not any(part.startswith(".") for part in n.parts)]
    for name in names:
        a, b = before / name, after / name
        if not (a.is_file() and b.is_file()):
            print(f"only in {'before' if a.is_file() else 'after'}: {name}")
            differences += 1
            continue
        ra, rb = comparable(json.loads(a.read_text()), before), comparable(json.loads(b.read_text()), after)
        for key in sorted(set(ra) | set(rb)):
            if ra.get(key) != rb.get(key):
                print(f"{name}: {key}: {str(ra.get(key))[:120]} != {str(rb.get(key))[:120]}")
                differences += 1
    files = sorted({p.relative_to(before) for f in FILES for p in before.rglob(f)})
    for name in files:
        a, b = before / name, after / name
        ta = a.read_text().replace(str(before.resolve()), "<root>")
        tb = b.read_text().replace(str(after.resolve()), "<root>") if b.is_file() else None
        if ta != tb:
            print(f"{name}: differs" if tb is not None else f"only in before: {name}")
            differences += 1
    print(f"{len(names)} records and {len(files)} tables compared: {differences} differences")
    return int(differences > 0)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))

"""Library size: lines holding a Python token that is not a comment or a docstring.

    python bench/lines.py            # the library: plasticity/, launch.py, hydra_plugins/
    python bench/lines.py --per-file  # and each file, largest first

A docstring is a string expression standing alone as a statement (module, class, function or
attribute docstring); its lines do not count, nor do blank lines or comment-only lines.
"""

from __future__ import annotations

import argparse
import ast
import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ("plasticity", "launch.py", "hydra_plugins")


def code_lines(source: str) -> int:
    """The number of lines holding a token that is neither a comment nor part of a docstring."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            docstrings.update(range(node.lineno, node.end_lineno + 1))
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in skip:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - docstrings)


def files(paths: tuple[str, ...] = LIBRARY) -> list[Path]:
    out = []
    for name in paths:
        path = ROOT / name
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-file", action="store_true")
    args = parser.parse_args()
    counts = {path: (code_lines(path.read_text()), len(path.read_text().splitlines())) for path in files()}
    if args.per_file:
        for path, (code, total) in sorted(counts.items(), key=lambda item: -item[1][0]):
            print(f"{code:6d} {total:6d}  {path.relative_to(ROOT)}")
    code, total = (sum(c[i] for c in counts.values()) for i in (0, 1))
    print(f"library: {code} code lines, {total} lines, {len(counts)} files")


if __name__ == "__main__":
    main()

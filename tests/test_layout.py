"""The package's shape: no import cycle (function-level imports included), a docstring per module,
a light top-level import, and README's layout section matching the tree."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "plasticity"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in ast.walk(node):
                lines.add(getattr(child, "lineno", -1))
    return lines


def imports_of(name: str) -> set[str]:
    """Every plasticity module ``name`` imports, at module level or inside functions
    (``if TYPE_CHECKING:`` blocks excluded: they never run)."""
    path = MODULES[name]
    tree = ast.parse(path.read_text())
    skip = _type_checking_lines(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        found |= {t for t in targets if t in MODULES and t != name}
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_package_has_no_import_cycle():
    graph = {name: imports_of(name) for name in MODULES}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_the_cycle_finder_finds_a_hidden_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_every_module_starts_with_a_docstring():
    missing = [name for name, path in MODULES.items() if not ast.get_docstring(ast.parse(path.read_text()))]
    assert missing == []


def test_importing_the_entry_point_modules_loads_no_torch():
    code = ("import sys; import plasticity, plasticity.cli, plasticity.sweep, plasticity.job, plasticity.recipes; "
            "heavy = sorted(m for m in ('torch', 'timm', 'lightning') if m in sys.modules); print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_readme_layout_names_every_module_and_subpackage():
    readme = (ROOT / "README.md").read_text()
    layout = readme[readme.index("## Layout"):]
    for name in MODULES:
        short = name.removeprefix("plasticity").lstrip(".")
        if short and not short.split(".")[-1].startswith("_"):
            leaf = short.split(".")[-1]
            assert any(f"`{form}`" in layout for form in (leaf, f"{leaf}/", short)), name


def test_every_task_yaml_has_a_recipe_and_every_recipe_a_yaml():
    from plasticity.recipes import get, names

    yamls = {p.stem for p in (ROOT / "conf" / "task").glob("*.yaml")}
    assert set(names()) == yamls
    assert all(get(n).name == n for n in names())

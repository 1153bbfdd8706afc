"""The stages of ``arith/`` import one way, in the order a run flows through them: each stage
only the stages before it, the run config only the stages, the commands anything, and no
modules import each other in a cycle. Imports inside functions count; ``if TYPE_CHECKING:``
ones do not for the order (a type hint may name the run config) but do for cycles."""

from __future__ import annotations

import ast
from pathlib import Path

from import_graph import assert_acyclic

ARITH = Path(__file__).resolve().parents[1] / "arith"
# The base (the one error type, the strict dict -> dataclass loader), the stages, the run
# config that composes them; the commands (cli, train, predict, bench, ...) come after all.
ORDER = (
    ("errors", "dataconf"),
    ("problems",),
    ("text",),
    ("data",),
    ("model",),
    ("evaluation",),
    ("training",),
    ("config",),
)
STAGES = ("problems", "text", "data", "model", "evaluation", "training")


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ARITH.parent).with_suffix("").parts).removesuffix(".__init__")


def _imports(node: ast.AST, typing_too: bool) -> list[str]:
    """The ``arith`` modules imported (``from arith.model import gpt``: arith.model.gpt)."""
    found = []
    for child in ast.iter_child_nodes(node):
        typing_only = isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)
        if typing_only and not typing_too:
            continue
        if isinstance(child, ast.ImportFrom) and (child.module or "").startswith("arith"):
            found += [child.module] + [f"{child.module}.{alias.name}" for alias in child.names]
        elif isinstance(child, ast.Import):
            found += [a.name for a in child.names if a.name.startswith("arith")]
        found += _imports(child, typing_too)
    return found


def _graph(typing_too: bool = False) -> dict[str, set[str]]:
    modules = {_module(p): p for p in sorted(ARITH.rglob("*.py"))}
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {m for m in _imports(tree, typing_too) if m in modules} - {name}
        # ``from arith.model import gpt`` names the package only on the way to its module.
        graph[name] = {m for m in imported if not any(o.startswith(m + ".") for o in imported)}
    return graph


def _rank(module: str) -> int | None:
    """Where a module stands in ORDER; None for a command or the package's face."""
    parts = module.split(".")
    if len(parts) < 2:
        return None
    for rank, names in enumerate(ORDER):
        if parts[1] in names:
            return rank
    return None


def test_every_module_has_its_place():
    loose = [m for m in _graph() if _rank(m) is None and m.count(".") > 1]
    assert loose == [], "a sub-package not in ORDER"


def test_stages_import_only_the_ones_before():
    wrong = []
    for module, imported in _graph().items():
        rank = _rank(module)
        if rank is None:
            continue  # a command, or arith/__init__
        for other in imported:
            other_rank = _rank(other)
            if other_rank is None or other_rank > rank:
                wrong.append(f"{module} imports {other}")
    assert wrong == []


def test_no_import_cycles():
    assert_acyclic(_graph(typing_too=True))


def test_the_stages_are_packages():
    for stage in STAGES:
        assert (ARITH / stage / "__init__.py").is_file(), stage

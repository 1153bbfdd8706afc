"""The packages of ``sweeps/`` import one way: each only the packages before it in LAYERS (and
``arith``), the commands (the top-level modules) anything, no package a command, and no modules
import each other in a cycle. Imports inside functions count; ``if TYPE_CHECKING:`` ones do not."""

from __future__ import annotations

import ast
from pathlib import Path

from import_graph import assert_acyclic

SWEEPS = Path(__file__).resolve().parents[1] / "sweeps"
LAYERS = ("spec", "analysis", "tracking", "cluster", "runtime")


def _module(path: Path) -> str:
    return ".".join(path.relative_to(SWEEPS.parent).with_suffix("").parts).removesuffix(".__init__")


def _imports(node: ast.AST) -> list[str]:
    """The ``sweeps`` modules imported (``from sweeps.spec import space``: sweeps.spec.space)."""
    found = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            continue
        if isinstance(child, ast.ImportFrom) and (child.module or "").startswith("sweeps"):
            parts = child.module.split(".")
            if len(parts) == 1 or (len(parts) == 2 and parts[1] in LAYERS):
                found += [f"{child.module}.{alias.name}" for alias in child.names]
            else:
                found.append(child.module)
        elif isinstance(child, ast.Import):
            found += [a.name for a in child.names if a.name.startswith("sweeps")]
        found += _imports(child)
    return found


def _graph() -> dict[str, set[str]]:
    paths = sorted(SWEEPS.rglob("*.py"))
    modules = {_module(p): p for p in paths}
    return {
        name: {m for m in _imports(ast.parse(path.read_text(encoding="utf-8"))) if m in modules}
        - {name}
        for name, path in modules.items()
    }


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_packages_import_only_the_ones_below():
    wrong = []
    for module, imported in _graph().items():
        if _layer(module) is None:
            continue  # a command (or sweeps/__init__)
        for other in imported:
            if _layer(other) is None or _layer(other) > _layer(module):
                wrong.append(f"{module} imports {other}")
    assert wrong == []


def test_no_import_cycles():
    assert_acyclic(_graph())


def test_the_commands_stay_few():
    top = sorted(p.stem for p in SWEEPS.glob("*.py"))
    assert len(top) <= 12, top


def _foreign_imports(package: str, names: tuple[str, ...], skip: tuple[str, ...] = ()) -> list[str]:
    """``file: module`` for each import of one of ``names`` (top-level packages) in a sweeps
    package, lazy imports included."""
    found = []
    for path in sorted((SWEEPS / package).rglob("*.py")):
        if path.name in skip:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = []
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            found += [f"{path.name}: {m}" for m in modules if m.split(".")[0] in names]
    return found


def test_the_spec_is_data_without_ray_or_mlflow():
    """sweeps/spec/ validates the search-space file; Tune's objects are built in runtime/
    (sweeps.runtime.tune_space), MLflow is written by tracking/."""
    assert _foreign_imports("spec", ("ray", "optuna", "mlflow")) == []


def test_a_sweeps_state_and_checks_import_light():
    """Reading a sweep's sweep.json or running its checks before Ray starts pulls in none of
    MLflow, pandas, matplotlib or scipy (they load once a check needs them)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import sweeps.runtime.state, sweeps.runtime.preflight, sweeps.runtime.resume\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'mlflow', 'pandas', 'matplotlib', 'scipy'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_tracking_imports_ray_only_in_its_tune_callback():
    """sweeps/tracking/ is MLflow's; Tune reaches it through one adapter, the callback in
    tracker.py (``SweepRecords`` in records.py holds the logic)."""
    assert _foreign_imports("tracking", ("ray",), skip=("tracker.py",)) == []

"""The Ray versions a sweep runs on: one declared range, stated alike in pyproject.toml,
docs/clusters.md ("Ray versions"), CI and ``sweeps.cluster.tunefix``; a sweep outside it stops
in one line before anything starts; and only ``sweeps.cluster.tunefix`` reaches into Ray's (or
MLflow's) insides."""

from __future__ import annotations

import ast
import re
import tomllib
import warnings
from pathlib import Path

import pytest
import ray
from sweep_procs import SMOKE, call_main

from sweeps.cluster import tunefix

ROOT = Path(__file__).resolve().parents[1]
# The one module allowed private names of dependencies (it checks Ray's version).
GATE = ROOT / "sweeps" / "cluster" / "tunefix.py"


def test_the_declared_range_is_stated_alike_everywhere():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert f"ray[default,tune]{tunefix.RAY_RANGE}" in project["dependencies"]
    docs = (ROOT / "docs" / "clusters.md").read_text(encoding="utf-8")
    assert f"ray{tunefix.RAY_RANGE}" in docs.replace("`", "")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    oldest, newest = tunefix.RAY_TESTED
    # The newest is what the range resolves to today; the oldest then replaces it, Ray alone.
    assert re.search(rf'OLDEST_RAY="{re.escape(oldest)}\.\d+"', ci), ci
    assert "pip install --quiet 'ray[default,tune]==${OLDEST_RAY}' && python -m pip check" in ci
    assert ci.index("==${OLDEST_RAY}") < ci.index("pytest -q -m faults")
    # .ci/install takes further requirements (the oldest Ray) with the project
    install = (ROOT / ".ci" / "install").read_text()
    assert 'pip install --quiet --no-compile -e ".[dev]" "$@"' in install
    assert ray.__version__.startswith(f"{oldest}.") or ray.__version__.startswith(f"{newest}.")


def test_the_installed_ray_is_supported():
    assert tunefix.UNSUPPORTED is None
    assert tunefix.unsupported_ray() is None


@pytest.mark.parametrize("version", ["2.54.1", "2.61.0", "3.0.0", "2.55.0rc1", "nightly"])
def test_an_unsupported_ray_is_one_line_before_anything_starts(tmp_path, monkeypatch, version):
    """The one stand-in here: a third Ray cannot be installed in the test, so the installed
    one's version string is changed."""
    monkeypatch.setattr(ray, "__version__", version)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code, err = call_main([str(SMOKE), "--out", str(tmp_path / "out"), "--tracking-uri", uri])
    assert code == 2
    assert err.startswith(
        f"error: ray {version} is installed, but arith-sweeps supports ray{tunefix.RAY_RANGE} "
        "(tested: 2.55 and 2.60); install one with pip install "
    ), err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists() and not (tmp_path / "mlflow.db").exists()


def test_a_sweep_silences_warnings_only_by_message(monkeypatch):
    """No process-wide silencing: a DeprecationWarning is how a coming Ray change shows."""
    from sweeps.runtime.driver import QUIET_WARNINGS, _quiet_logs

    for name in ("RAY_DEDUP_LOGS", "RAY_AIR_NEW_OUTPUT", "MLFLOW_LOGGING_LEVEL"):
        monkeypatch.delenv(name, raising=False)
    with warnings.catch_warnings():
        before = list(warnings.filters)
        _quiet_logs()
        added = [f for f in warnings.filters if f not in before]
        assert added and all(action == "ignore" and message for action, message, *_ in added)
        assert {(f[2], f[1].pattern) for f in added} == set(QUIET_WARNINGS)
        with warnings.catch_warnings(record=True) as seen:  # keeps the filters
            warnings.warn("a coming change", DeprecationWarning, stacklevel=1)
            warnings.warn("Tip: something else", FutureWarning, stacklevel=1)
            warnings.warn(
                "Tip: In future versions of Ray, Ray will no longer override accelerator "
                "visible devices env var if num_gpus=0",
                FutureWarning,
                stacklevel=1,
            )
        assert [str(w.message) for w in seen] == ["a coming change", "Tip: something else"]


def private_uses(path: Path, own: set[str]) -> list[str]:
    """Private names of other packages that ``path`` uses: imports from a private module or of
    a private name, and ``x._name`` attributes that the project itself never defines."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in ("arith", "sweeps"):
                continue
            private = [a.name for a in node.names if _private(a.name)]
            if _private_module(node.module) or private:
                found.append(f"{path.name}:{node.lineno} from {node.module} import {private}")
        elif isinstance(node, ast.Import):
            found += [f"{path.name}:{node.lineno} import {a.name}" for a in node.names
                      if _private_module(a.name)]  # fmt: skip
        elif isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own:
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
    return found


def own_private_names(paths: list[Path]) -> set[str]:
    """Private names the project defines: functions, classes, module names, ``self._x``."""
    own = set()
    for path in paths:
        own.add(path.stem)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
                own.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
            ):
                own.add(node.attr)
    return {name for name in own if _private(name)}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_module(module: str) -> bool:
    return any(_private(part) for part in module.split("."))


def test_only_the_gate_module_reaches_into_dependencies():
    """In ``sweeps/`` (``arith/`` is torch's side and imports neither Ray nor MLflow)."""
    paths = sorted((ROOT / "sweeps").rglob("*.py"))
    own = own_private_names(paths + sorted((ROOT / "arith").rglob("*.py")))
    found = [use for path in paths if path != GATE for use in private_uses(path, own)]
    assert found == []


def test_the_detector_sees_what_the_issue_listed(tmp_path):
    """The names issue 20 found, as the old code used them, are all caught."""
    sample = tmp_path / "old.py"
    sample.write_text(
        "from ray.tune.search.sample import _BackwardsCompatibleNumpyRng\n"
        "from ray.train._internal.session import _TrainingResult\n"
        "steps = {m.key: m.step for m in run.data._metric_objs}\n"
        "tuner._local_tuner.get_run_config()\n"
        "self._resetting_trials.discard(trial)\n",
        encoding="utf-8",
    )
    assert len(private_uses(sample, own=set())) == 5

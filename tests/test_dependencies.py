"""The dependencies pyproject.toml declares are the ones arith/ and sweeps/ import: none
declared and unused, none imported and undeclared (the standard library aside)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Distribution name -> the module it installs, where they differ.
MODULE_OF = {"pyyaml": "yaml", "grpcio": "grpc"}


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = {
        re.split(r"[\[<>=!~; ]", dep, maxsplit=1)[0].lower() for dep in project["dependencies"]
    }
    return {MODULE_OF.get(name, name) for name in names}


def imported() -> set[str]:
    found = set()
    for package in ("arith", "sweeps"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    found |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"arith", "sweeps", "__future__"}


def test_every_declared_dependency_is_imported():
    assert declared() - imported() == set()


def test_every_imported_package_is_declared():
    assert imported() - declared() == set()

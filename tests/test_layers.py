"""The two layers: arith/ is torch only and never imports Ray or MLflow."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ARITH = Path(__file__).resolve().parents[1] / "arith"


def test_arith_imports_neither_ray_nor_mlflow():
    modules = sorted(
        ".".join(p.relative_to(ARITH.parent).with_suffix("").parts).removesuffix(".__init__")
        for p in ARITH.rglob("*.py")
    )
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'mlflow')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"

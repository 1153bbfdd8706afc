"""A sweep's start: the driver imports torch, pandas and matplotlib while its local Ray starts,
not before (a smoke sweep 29.7 -> 25.6 s, medians of 5 paired runs on 2 cores:
docs/development.md), and on a machine without GPUs it tells so without torch."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "pandas", "matplotlib", "scipy")


def _modules_after(code: str) -> list[str]:
    """The HEAVY modules a fresh interpreter holds after running ``code``."""
    check = f"import sys\n{code}\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    result = subprocess.run(
        [sys.executable, "-c", check],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return ast.literal_eval(result.stdout.strip().splitlines()[-1])


def test_the_driver_module_imports_none_of_the_heavy_libraries():
    assert _modules_after("import sweeps.runtime.driver") == []


@pytest.mark.skipif(
    any(Path("/dev").glob("nvidia*")) or Path("/dev/kfd").exists() or Path("/dev/dxg").exists(),
    reason="a machine with GPU device files: torch is asked",
)
def test_a_machine_without_gpu_device_files_is_read_without_torch():
    code = (
        "from sweeps.runtime.cluster_view import plainly_without_gpus, this_machine\n"
        "assert plainly_without_gpus()\n"
        "view = this_machine()\n"
        "assert view.total('gpus') == 0 and view.total('cpus') == __import__('os').cpu_count()\n"
    )
    assert _modules_after(code) == []


def test_what_the_driver_needs_later_is_imported_ahead():
    code = "from sweeps.runtime import driver\ndriver._import_ahead()\n"
    assert _modules_after(code) == sorted(HEAVY)

"""Smoke test of ``python -m arith.bench --quick``: the real command, tiny sizes, no timings."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from arith import bench

NUMBER = re.compile(r"^[\d,]+(\.\d+)?(e[+-]?\d+)?$")


def _cells(table: str, first: str) -> list[str]:
    """The cells of the markdown row whose first cell is ``first``."""
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} in:\n{table}")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> tuple[str, dict]:
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "arith.bench", "--quick", "--device", "cpu", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert result.returncode == 0, result.stderr
    return result.stdout, json.loads(out.read_text())


def test_tables_have_every_row_with_numbers(quick_run) -> None:
    table, _ = quick_run
    for title in ("Peak matmul", "Data generation", "Training", "Evaluation"):
        assert f"## {title}" in table
    rows = {
        "fp32": 1,
        **{case: 3 for case in bench.DATA_CASES},
        **{case.label: 6 for case in bench.QUICK.models},
        "batched (predict_answers)": 2,
        "one at a time (greedy_decode, batch 1)": 2,
    }
    for first, n_numbers in rows.items():
        cells = _cells(table, first)
        numbers = [cell for cell in cells[1:] if NUMBER.match(cell)]
        assert len(numbers) >= n_numbers, cells
    assert NUMBER.match(_cells(table, "speed-up")[-1])


def test_json_holds_positive_figures(quick_run) -> None:
    _, results = quick_run
    assert results["device"] == "cpu"
    assert results["peak"][0]["peak_flops"] > 0
    assert len(results["data"]) == len(bench.DATA_CASES)
    assert all(row["examples_per_s"] > 0 and row["pct_of_step"] > 0 for row in results["data"])
    assert [row["model"] for row in results["train"]] == [m.label for m in bench.QUICK.models]
    assert all(row["mfu"] > 0 and row["tokens_per_s"] > 0 for row in results["train"])
    assert [row["case"] for row in results["eval"]][-1] == "speed-up"


def test_markdown_table_formats_numbers() -> None:
    text = bench.markdown_table("T", {"a": "A", "b": "B"}, [{"a": "x", "b": 1234.5}])
    assert text.splitlines() == ["## T", "", "| A | B |", "|---|---|", "| x | 1,234 |"]

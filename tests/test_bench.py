"""Smoke test of ``python -m arith.bench --quick``: the real command at tiny sizes, its figures
checked against the counts and times they are computed from."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from arith import bench
from arith import config as config_lib
from arith.bench_report import markdown_table
from arith.training.cost import step_cost
from arith.training.throughput import gpu_peak_flops

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
        "bf16": 1,
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


def test_train_figures_are_the_counts_over_the_time_of_the_steps_after_warm_up(quick_run):
    _, results = quick_run
    assert results["device"] == "cpu"
    cases = [(m, precision) for precision in ("fp32", "bf16") for m in bench.QUICK.models]
    assert [(row["model"], row["precision"]) for row in results["train"]] == [
        (m.label, precision) for m, precision in cases
    ]
    peaks = {r["dtype"]: r["peak_flops"] for r in results["peak"]}
    assert set(peaks) == {"fp32", "bf16"} and min(peaks.values()) > 0
    for row, (case, precision) in zip(results["train"], cases, strict=True):
        peak = peaks[precision]  # each precision's MFU against its own peak
        config = bench.train_config(case, bench.QUICK, "cpu", peak, precision=precision)
        assert config.train.precision == precision
        cost = step_cost(config)
        assert row["steps_timed"] == bench.QUICK.train_steps  # every step after warm-up
        assert row["tokens"] == bench.QUICK.train_steps * cost["tokens"]
        assert 0 < row["seconds"] < row["wall_s"]
        assert row["tokens_per_s"] == pytest.approx(row["tokens"] / row["seconds"], rel=1e-9)
        assert row["steps_per_s"] == pytest.approx(row["steps_timed"] / row["seconds"], rel=1e-9)
        flops_per_s = row["tokens_per_s"] * cost["flops_per_token"]
        assert row["model_flops"] == pytest.approx(flops_per_s, rel=1e-9)
        assert row["mfu"] == pytest.approx(flops_per_s / peak, rel=1e-9)


def test_data_figures_agree_with_each_other(quick_run):
    _, results = quick_run
    assert [row["case"] for row in results["data"]] == list(bench.DATA_CASES)
    reference = next(row for row in results["train"] if row["model"] == bench.REFERENCE)
    for row in results["data"]:
        assert row["examples_per_s"] == pytest.approx(
            row["batch_size"] / (row["ms_per_batch"] / 1e3), rel=1e-9
        )
        step_ms = 1e3 / reference["steps_per_s"]
        assert row["pct_of_step"] == pytest.approx(100 * row["ms_per_batch"] / step_ms, rel=1e-9)
    assert [row["case"] for row in results["eval"]][-1] == "speed-up"
    batched, single, ratio = (row["examples_per_s"] for row in results["eval"])
    assert ratio == pytest.approx(batched / single, rel=1e-9)


def test_the_step_clock_times_steps_after_warm_up_only():
    """Evaluations call ``progress`` again for a step; only the first call ends the step."""
    clock = bench.StepClock()
    for step in (0, 1, 2, 3):
        clock(step, 3, {})
    clock(3, 3, {"val/exact_match": 0.0})  # the final evaluation, later
    assert clock.seconds(1, 3) == clock.ended_at[3] - clock.ended_at[1]
    assert clock.seconds(1, 3) < clock.seconds(0, 3)


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", 989e12),
        ("NVIDIA H100 PCIe", 756e12),
        ("NVIDIA L4", 121e12),
        ("NVIDIA L40S", 362e12),
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("NVIDIA A10", 125e12),
        ("NVIDIA A10G", None),  # not the A10: unknown, so no MFU without train.peak_flops
        ("Tesla T4", None),
        ("NVIDIA H100", None),
    ],
)
def test_gpu_peaks_match_exact_device_names(name, peak):
    assert gpu_peak_flops(name) == peak


@pytest.mark.parametrize(
    ("value", "shown"), [("0", "0.0"), ("-5", "-5.0"), (".inf", "inf"), (".nan", "nan")]
)
def test_peak_flops_must_be_finite_and_positive(value, shown):
    allowed = r"must be a finite number > 0 \(FLOP/s\) or null"
    with pytest.raises(
        config_lib.ConfigError, match=rf"^train\.peak_flops: {allowed}, got {shown}$"
    ):
        config_lib.load(None, [f"train.peak_flops={value}"])


def test_markdown_table_formats_numbers() -> None:
    text = markdown_table("T", {"a": "A", "b": "B"}, [{"a": "x", "b": 1234.5}])
    assert text.splitlines() == ["## T", "", "| A | B |", "|---|---|", "| x | 1,234 |"]

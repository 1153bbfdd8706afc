"""``python -m sweeps.bench --gpu`` without CUDA: one line, exit 0. Its CUDA path (the tests of
tests/test_cuda.py, throughput, the main job) runs on a GPU only."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sweeps import bench_gpu
from sweeps.analysis.gpu_report import write_report

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(torch.cuda.is_available(), reason="the one line is for machines without CUDA")
def test_without_cuda_it_says_so_in_one_line_and_exits_0():
    done = subprocess.run(
        [sys.executable, "-m", "sweeps.bench", "--gpu"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == bench_gpu.NO_CUDA
    assert done.stdout.count("\n") == 1


def test_the_sizes_are_bench_pack_shapes():
    from sweeps.bench_pack import PACK_SIZES

    for plan in (bench_gpu.GPU, bench_gpu.REHEARSAL):
        assert set(plan.graph_sizes) | set(plan.pack_sizes) <= set(PACK_SIZES)


def test_the_report_shows_every_figure_measured(tmp_path):
    figures = bench_gpu.Figures("NVIDIA H200", "2.13.0", "2026-11-28 19:00:00", total_s=401.0)
    figures.parts = {
        "main_job": {"ok": True, "exit_code": 0, "seconds": 58.2, "best_test": 0.9965},
        "ctrl_c_resume": {"ok": True, "stop_exit_code": 130, "resume_exit_code": 0},
        "cuda_tests": {"ok": True, "summary": "8 passed in 30.1s"},
        "eager_vs_compiled": {"rows": [{"size": "100k", "n_params": 101_000,
                              "eager_steps_per_s": 70.5, "graph_steps_per_s": 412.25,
                              "graph_ratio": 5.85, "compiled_steps_per_s": 140.0,
                              "compiled_ratio": 1.99, "eager_eval_s": 2.5,
                              "graph_eval_s": 0.4, "graph_eval_ratio": 6.25}]},
        "packs": {"skipped": "12 s left, ~90 s needed"},
        "sharing": {"rows": [{"size": "100k", "n_params": 101_000, "trials": 16, "at_once": 16,
                              "fractional_trials_per_h": 900, "packed_trials_per_h": 2700,
                              "ratio": 3.0}]},
    }  # fmt: skip
    write_report(tmp_path, figures)
    report = (tmp_path / "report.md").read_text()
    shown = ["NVIDIA H200", "best_test: 0.9965", "stop_exit_code: 130", "8 passed in 30.1s"]
    shown += ["| 100k | 101000 | 70.5 | 412.2 | 5.85 | 140 | 1.99 | 2.5 | 0.4 | 6.25 |"]
    shown += ["12 s left, ~90 s needed", "| 100k | 101000 | 16 | 16 | 900 | 2700 | 3 |"]
    shown += ["401 s"]
    for text in shown:
        assert text in report, text
    assert json.loads((tmp_path / "figures.json").read_text())["parts"] == figures.parts


def test_the_acceptance_run_rehearsed_on_the_cpu(tmp_path):
    # every part but the CUDA-only ones, on the CPU at tiny sizes: the main job (here the smoke
    # sweep) and a Ctrl-C then --resume through sweeps.run, eager against the graphed step,
    # packs, the report
    code = bench_gpu.gpu_main(tmp_path / "report", bench_gpu.REHEARSAL)
    figures = json.loads((tmp_path / "report" / "figures.json").read_text())
    parts = figures["parts"]
    assert code == 0, parts
    assert parts["main_job"]["exit_code"] == 0 and parts["main_job"]["trials"] == 4
    assert parts["main_job"]["devices"] == ["cpu"] and parts["main_job"]["best_val"] >= 0
    stop = parts["ctrl_c_resume"]
    assert stop["pressed_after_a_report"] and stop["stop_exit_code"] == 130
    assert stop["resume_exit_code"] == 0 and stop["finished_trials"] == 4
    assert [row["pack"] for row in parts["packs"]["rows"]] == [1, 2]
    assert [row["size"] for row in parts["eager_vs_compiled"]["rows"]] == ["1k"]
    (shared,) = parts["sharing"]["rows"]  # 4 trials, 2 at once, against one pack of 4
    assert shared["trials"] == 4 and shared["at_once"] == 2 and shared["ratio"] > 0


def test_part_4_times_each_step_mode_against_eager():
    # the rehearsal's modes (eager and the graphed step, eager here) at the tiniest size
    plan = dataclasses.replace(bench_gpu.REHEARSAL, graph_steps=8)
    (row,) = bench_gpu.eager_vs_compiled(plan)["rows"]
    assert row["size"] == "1k" and row["eager_steps_per_s"] > 0 and row["graph_steps_per_s"] > 0
    assert row["graph_ratio"] == round(row["graph_steps_per_s"] / row["eager_steps_per_s"], 2)
    # and one evaluation, greedy decoding against decoding at fixed shapes
    assert row["eager_eval_s"] > 0 and row["graph_eval_s"] > 0
    assert row["graph_eval_ratio"] == round(row["eager_eval_s"] / row["graph_eval_s"], 2)


def test_the_main_job_is_the_flagship():
    from sweeps.bench import FLAGSHIP

    assert bench_gpu.MAIN_JOB == FLAGSHIP


def test_the_unpacked_side_can_be_timed_on_a_sample_of_the_members():
    from sweeps.bench_pack import run_pack_bench

    (row,) = run_pack_bench(["1k"], [4], 2, "cpu", unpacked_sample=2)
    assert row["pack"] == 4 and row["unpacked_trials_per_h"] > 0 and row["ratio"] > 0


def test_each_pack_row_names_the_precision_it_trained_in():
    """precision auto keeps small widths in fp32 on CUDA, where an MFU against the card's bf16
    peak would say nothing: each row names its precision, and MFU is given for bf16 rows only
    (here on the CPU, whose 1k pack is 8 wide: fp32, no MFU)."""
    plan = dataclasses.replace(
        bench_gpu.REHEARSAL, pack_sizes=("1k",), packs=(2,), pack_steps=2, unpacked_sample=1
    )
    (row,) = bench_gpu.packs(plan, "NVIDIA H200")["rows"]
    assert row["precision"] == "fp32" and row["mfu"] is None and row["packed_flop_per_s"] > 0

"""``python -m sweeps.bench --gpu`` without CUDA: one line, exit 0. Its CUDA path (the tests of
tests/test_cuda.py, throughput, the main job) runs on a GPU only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sweeps import bench_gpu

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

    assert set(bench_gpu.GPU_SIZES) <= set(PACK_SIZES)


def test_the_main_job_is_the_flagship():
    from sweeps.bench import FLAGSHIP

    assert bench_gpu.MAIN_JOB == FLAGSHIP


def test_the_unpacked_side_can_be_timed_on_a_sample_of_the_members():
    from sweeps.bench_pack import run_pack_bench

    (row,) = run_pack_bench(["1k"], [4], 2, "cpu", unpacked_sample=2)
    assert row["pack"] == 4 and row["unpacked_trials_per_h"] > 0 and row["ratio"] > 0

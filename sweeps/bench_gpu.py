"""``python -m sweeps.bench --gpu``: the GPU acceptance run, at most about 10 minutes on one
CUDA card, in three parts:

1. the CUDA correctness tests (``pytest -m cuda`` on ``CUDA_TESTS``): bf16 logits against
   fp32, a pack against its members trained alone, cached decoding, a resumed run, no
   synchronising call inside a step (``torch.cuda.set_sync_debug_mode("error")``), the GPU's
   hardware record;
2. throughput at 100K, 1M and 10M parameters with 1, 16 and 64 members: trials per hour packed
   against unpacked (``sweeps.bench_pack.run_pack_bench``, in the precision ``auto`` gives, bf16
   where the card has it; the unpacked side timed on ``UNPACKED_SAMPLE`` of the members), and
   each pack's MFU against the card's bf16 peak (``arith.training.hardware.gpu_peak_flops``;
   from the estimated training FLOPs, so the evaluations count as time and not as work);
3. the main job (``search_spaces/width_vs_depth.yaml``, its shipped ``gpu: auto``) through
   ``python -m sweeps.run``, cut at the time left (``sweep.time_budget_s``).

Without CUDA it says so in one line and exits 0 (tests/test_gpu_bench.py). Its parts ran on an
NVIDIA H200, without Ray and MLflow for part 3 (the machine had neither): docs/gpu.md."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The main job, as ``sweeps.bench.FLAGSHIP`` names it (not imported: sweeps.bench imports this).
MAIN_JOB = ROOT / "search_spaces" / "width_vs_depth.yaml"
NO_CUDA = "no CUDA device: the GPU acceptance run needs one (torch.cuda.is_available() is False)"
GPU_SIZES = ["100k", "1m", "10m"]
GPU_PACKS = [1, 16, 64]
# Steps per trial in the throughput part: enough to pass the first steps' warm-up, few enough
# that 3 sizes x (1 + 16 + 64) trials, unpacked and packed, fit the run's 10 minutes.
GPU_STEPS = 30
# On an H200, 64 unpacked 10M trials took over 170 s alone; their rate from 8 of them.
UNPACKED_SAMPLE = 8
CUDA_TESTS = ["tests/test_cuda.py", "tests/test_host_reads.py", "tests/test_hardware_params.py"]
TOTAL_S = 600.0
MAIN_JOB_MIN_S = 60.0


def gpu_main() -> int:
    """The acceptance run (see the module docstring); 0 when every part passed, or without
    CUDA (one line), else 1."""
    import torch

    if not torch.cuda.is_available():
        print(NO_CUDA)
        return 0
    start = time.perf_counter()
    name = torch.cuda.get_device_name()
    print(f"GPU acceptance run on {name}", flush=True)
    tests_ok = run_cuda_tests()
    throughput(name)
    left = TOTAL_S - (time.perf_counter() - start)
    main_ok = run_main_job(max(MAIN_JOB_MIN_S, left - 30))
    print(f"total: {time.perf_counter() - start:.0f} s (target {TOTAL_S:.0f} s)")
    return 0 if tests_ok and main_ok else 1


def run_cuda_tests() -> bool:
    """Part 1: ``pytest -m cuda`` on ``CUDA_TESTS``; True when it passed."""
    print(f"\n1. CUDA correctness (pytest -m cuda {' '.join(CUDA_TESTS)})", flush=True)
    command = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", *CUDA_TESTS]
    return subprocess.run(command, cwd=ROOT, check=False).returncode == 0


def throughput(device_name: str) -> list[dict]:
    """Part 2: packed against unpacked trials per hour, and each pack's MFU, printed."""
    from arith.training.cost import describe
    from arith.training.hardware import gpu_peak_flops
    from sweeps.bench_pack import pack_configs, run_pack_bench

    peak = gpu_peak_flops(device_name)
    print(
        f"\n2. throughput, {GPU_STEPS} steps per trial (unpacked: {UNPACKED_SAMPLE} of the"
        " members timed); trials per hour:",
        flush=True,
    )
    print(f"{'size':>5} {'n_params':>9} {'pack':>5} {'unpacked':>14} {'packed':>14} {'ratio':>6}")
    rows = run_pack_bench(GPU_SIZES, GPU_PACKS, GPU_STEPS, "cuda", UNPACKED_SAMPLE)
    what = f"{peak:.3g} FLOP/s, bf16" if peak else "unknown for this card"
    print(f"MFU of the packed side, against the card's peak ({what}):")
    for row in rows:
        flops = describe(pack_configs(row["size"], 1, GPU_STEPS, "cuda")[0])["total_flops"]
        achieved = flops * row["packed_trials_per_h"] / 3600
        mfu = f"{100 * achieved / peak:5.1f} %" if peak else "  n/a"
        print(f"{row['size']:>5} pack {row['pack']:>3}: {achieved:.3g} FLOP/s, MFU {mfu}")
    return rows


def run_main_job(budget_s: float) -> bool:
    """Part 3: the main job with its shipped ``gpu: auto``, cut at ``budget_s`` seconds; True
    when the command ended well."""
    print(f"\n3. the main job ({MAIN_JOB.name}, gpu: auto), at most {budget_s:.0f} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="sweeps-gpu-") as tmp:
        command = [
            sys.executable, "-m", "sweeps.run", str(MAIN_JOB), "--out", tmp,
            "--tracking-uri", f"sqlite:///{tmp}/mlflow.db",
            "--set", f"sweep.time_budget_s={budget_s:.0f}",
        ]  # fmt: skip
        start = time.perf_counter()
        code = subprocess.run(command, cwd=ROOT, check=False).returncode
    print(f"main job: exit code {code}, {time.perf_counter() - start:.0f} s")
    return code == 0

"""Which device a run trains on and in which precision (``train.device``, ``train.precision``),
and the record of it that a run's summary carries (``hardware.*``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import torch

from arith.training.reported import HARDWARE_KEYS


def pick_device(name: str) -> torch.device:
    """``train.device``: the named device, or for ``auto`` the best one present."""
    if name != "auto":
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


# Where bf16 autocast pays on a CPU with bf16 in hardware: from width 64 (128 x 2 1.8x, 64 wide
# 1.4x on the machine of 2026-11-24); at width 32 it trained slower and validated worse (32 x 1
# 0.394 against 0.540: search_spaces/width_vs_depth.yaml).
CPU_BF16_FROM_WIDTH = 64
# The /proc/cpuinfo flags of bf16 matmuls in hardware (AVX512-BF16, Intel AMX). Without them
# oneDNN emulates bf16: on an AVX2-only AMD EPYC (2026-11-28) 60 steps of the main job's 128 x 2
# took 107 s in bf16 against 13.8 s in fp32.
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# Where bf16 autocast pays on CUDA: not below width 512. On an H200 (docs/gpu.md, 2026-11-26,
# python -m arith.bench --device cuda) small models are launch-bound and the casts add kernels:
# fp32 against bf16 steps/s 84.1 / 81.6 at 100K (2 x 64), 75.3 / 56.5 at 1M (4 x 128), 60.0 /
# 48.0 at 3M (4 x 256). From 512 wide bf16 is kept (its matmul peak is 15x fp32's there; not
# yet measured against fp32 at that width).
CUDA_BF16_FROM_WIDTH = 512


@functools.cache
def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 in hardware (Linux's /proc/cpuinfo; False elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="ignore")
    except OSError:
        return False
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
    return any(flag in flags for flag in NATIVE_BF16_FLAGS)


def resolved_precision(device: torch.device, precision: str, d_model: int | None = None) -> str:
    """``train.precision`` as the run trains: bf16 or fp32 where named; ``auto`` picks bf16 for
    models ``d_model`` >= CUDA_BF16_FROM_WIDTH wide on a CUDA device that has it, and >=
    CPU_BF16_FROM_WIDTH on a CPU with bf16 in hardware; else fp32 (smaller models are faster
    in fp32 on a GPU; an emulated bf16 is many times slower on a CPU)."""
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return _bf16_from(d_model, CUDA_BF16_FROM_WIDTH, torch.cuda.is_bf16_supported)
    if device.type == "cpu":
        return _bf16_from(d_model, CPU_BF16_FROM_WIDTH, cpu_has_native_bf16)
    return "fp32"


def _bf16_from(d_model: int | None, width: int, has_bf16: Callable[[], bool]) -> str:
    """bf16 for models at least ``width`` wide where ``has_bf16()`` (asked only then), else fp32."""
    return "bf16" if d_model is not None and d_model >= width and has_bf16() else "fp32"


def autocast_for(
    device: torch.device, precision: str, d_model: int | None = None, cached: bool = True
):
    """The autocast context of ``train.precision`` (``resolved_precision``): bf16, or a
    disabled one (fp32). ``cached=False`` for a CUDA graph's capture, which must not reuse
    casts made outside it."""
    if resolved_precision(device, precision, d_model) == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16, cache_enabled=cached)
    return torch.autocast(device_type=device.type, enabled=False)


def hardware_record(
    device: torch.device, precision: str, d_model: int | None = None, step: str = "eager"
) -> dict[str, str]:
    """What a run trained on, for its summary: the device (``cuda:0``, not ``cuda``), the GPU's
    name (``none`` off CUDA), the precision ``train.precision`` resolved to (fp32 or bf16), the
    versions of torch and of the CUDA it was built with (``none`` for a CPU build), and how its
    step ran (``train.compile`` resolved: ``eager``, ``graph`` or ``compiled``)."""
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    values = (
        str(device),
        torch.cuda.get_device_name(device) if device.type == "cuda" else "none",
        resolved_precision(device, precision, d_model),
        str(torch.__version__),
        torch.version.cuda or "none",
        step,
    )
    return dict(zip(HARDWARE_KEYS, values, strict=True))

"""The device a run trains on: which one, in which precision, its peak FLOP/s, the throughput
measured against that peak (``perf/...`` metrics, MFU), what crosses between it and the host
without waiting, and the record of it all that a run's summary carries (``hardware.*``)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import torch

from arith.training.reported import PERF_METRICS  # noqa: F401 -- callers' old address


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
    """``train.precision`` as the run trains: bf16 or fp32 where named; ``auto`` picks bf16 on a
    CUDA device that has it, and on a CPU with bf16 in hardware for models ``d_model`` >=
    CPU_BF16_FROM_WIDTH wide; else fp32 (an emulated bf16 is many times slower)."""
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    wide = d_model is not None and d_model >= CPU_BF16_FROM_WIDTH
    if device.type == "cpu" and wide and cpu_has_native_bf16():
        return "bf16"
    return "fp32"


def autocast_for(device: torch.device, precision: str, d_model: int | None = None):
    """The autocast context of ``train.precision`` (``resolved_precision``): bf16, or a
    disabled one (fp32)."""
    if resolved_precision(device, precision, d_model) == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return torch.autocast(device_type=device.type, enabled=False)


HARDWARE_KEYS = (
    "hardware.device",
    "hardware.gpu_name",
    "hardware.precision",
    "hardware.torch",
    "hardware.cuda",
)
"""What ``hardware_record`` holds: strings, which a sweep logs as its run's params."""


def hardware_record(
    device: torch.device, precision: str, d_model: int | None = None
) -> dict[str, str]:
    """What a run trained on, for its summary: the device (``cuda:0``, not ``cuda``), the GPU's
    name (``none`` off CUDA), the precision ``train.precision`` resolved to (fp32 or bf16), and
    the versions of torch and of the CUDA it was built with (``none`` for a CPU build)."""
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    values = (
        str(device),
        torch.cuda.get_device_name(device) if device.type == "cuda" else "none",
        resolved_precision(device, precision, d_model),
        str(torch.__version__),
        torch.version.cuda or "none",
    )
    return dict(zip(HARDWARE_KEYS, values, strict=True))


def synchronize(device: torch.device) -> None:
    """Wait until ``device`` has run everything the host queued on it (nothing to wait for on
    the CPU)."""
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def host_to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on ``device`` without the host waiting: on CUDA a copy from pinned memory,
    queued behind the device's work (a copy from pageable memory waits for the device first)."""
    if device.type != "cuda":
        return tensor.to(device)
    if not tensor.is_pinned():
        tensor = tensor.contiguous().pin_memory()
    return tensor.to(device, non_blocking=True)


class LossReadout:
    """The members' running training losses for a progress bar, read without waiting on the
    device: each copy to the host is queued behind the steps and shown once it has landed (on
    CUDA a step or so late; elsewhere at once)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.pending: tuple[torch.Tensor, list[int], Any] | None = None  # a copy on its way
        self.latest: list[float] | None = None  # each member's mean loss, as last landed

    def poll(self, sums: torch.Tensor, counts: list[int]) -> list[float] | None:
        """Each member's mean loss (``sums`` over ``counts`` steps) as last read, or None
        before a first copy has landed; starts the next copy once the last has landed."""
        if self.pending is not None and self.pending[2].query():
            self._land()
        if self.pending is None:
            host = torch.empty(sums.shape, dtype=sums.dtype, pin_memory=self.cuda)
            host.copy_(sums, non_blocking=self.cuda)
            done = torch.cuda.Event() if self.cuda else None
            if done is not None:
                done.record()
            self.pending = (host, list(counts), done)
            if done is None:
                self._land()
        return self.latest

    def _land(self) -> None:
        host, counts, _ = self.pending
        self.latest = [s / max(c, 1) for s, c in zip(host.tolist(), counts, strict=True)]
        self.pending = None


# Dense bf16 tensor-core peaks (FLOP/s) from the vendors' datasheets, keyed by the exact name
# ``torch.cuda.get_device_name`` reports: one family's parts differ (the H100 PCIe card peaks at
# 756 TFLOP/s, the SXM one at 989), so a substring would pick the wrong one ("L4" is in "L40S").
GPU_PEAK_FLOPS = {
    "NVIDIA H100 80GB HBM3": 989e12,
    "NVIDIA H100 PCIe": 756e12,
    "NVIDIA H100 NVL": 835e12,
    "NVIDIA H200": 989e12,
    "NVIDIA A100-SXM4-40GB": 312e12,
    "NVIDIA A100-SXM4-80GB": 312e12,
    "NVIDIA A100-PCIE-40GB": 312e12,
    "NVIDIA A100 80GB PCIe": 312e12,
    "NVIDIA L40S": 362e12,
    "NVIDIA L4": 121e12,
    "NVIDIA A10": 125e12,
}


def gpu_peak_flops(device_name: str) -> float | None:
    """The bf16 peak of a GPU named exactly as torch names it; ``None`` for any other name
    (set ``train.peak_flops`` for MFU there)."""
    return GPU_PEAK_FLOPS.get(device_name.strip())


def device_peak(device: torch.device, autocast) -> float | None:
    """The peak MFU is measured against: a known GPU's bf16 peak when training in bf16."""
    if device.type != "cuda" or autocast.fast_dtype != torch.bfloat16:
        return None
    return gpu_peak_flops(torch.cuda.get_device_name(device))


class Throughput:
    """Examples and tokens per second of a member's training steps since its last evaluation
    (evaluation time excluded).

    In a pack every step trains all members at once, so a member's ``perf/tokens_per_s`` and
    ``perf/mfu`` are its share: its own tokens over the pack's step time (the active members'
    figures add up to the pack's). ``perf/pack_tokens_per_s`` and ``perf/pack_mfu`` are the
    whole pack's: every row the step computed, stopped members' included. A pack of one
    reports the same figure under both names.
    """

    def __init__(self, flops_per_token: int, peak_flops: float | None) -> None:
        self.flops_per_token, self.peak_flops = flops_per_token, peak_flops
        self.seconds, self.examples, self.tokens, self.pack_tokens = 0.0, 0, 0, 0

    def add(self, seconds: float, examples: int, tokens: int, pack_tokens: int) -> None:
        self.seconds += seconds
        self.examples += examples
        self.tokens += tokens
        self.pack_tokens += pack_tokens

    def pop(self) -> dict[str, float]:
        """The figures since the last call (none before any step), and start counting again."""
        if self.seconds == 0:
            return {}
        out = {
            "perf/examples_per_s": self.examples / self.seconds,
            "perf/tokens_per_s": self.tokens / self.seconds,
            "perf/pack_tokens_per_s": self.pack_tokens / self.seconds,
        }
        if self.peak_flops:
            for kind in ("", "pack_"):
                flops = out[f"perf/{kind}tokens_per_s"] * self.flops_per_token
                out[f"perf/{kind}mfu"] = flops / self.peak_flops
        self.seconds, self.examples, self.tokens, self.pack_tokens = 0.0, 0, 0, 0
        return out

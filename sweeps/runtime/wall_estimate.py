"""How long a sweep would take on this machine, estimated for ``--dry-run`` from its training
FLOPs (``arith.training.cost``) and this machine's speed, measured in a fraction of a second.

The speed is one trial's matmul peak (``arith.bench.peak_matmul_flops`` on 256 x 256 matrices,
with the threads a trial holds, in each precision its trials train in here), of which a sweep
reaches ``CPU_BOUND_SHARE``: what the main job measured, evaluations included. Trials go to
the slots that run at once in Tune's order, each to the first free one, each with
``PER_TRIAL_S`` of its own, after ``START_S`` for the sweep's start and end. An estimate,
never a measurement: a target or early stopping ends trials sooner, and another load on the
machine makes it later. Small models on a GPU are bound by kernel launches, not arithmetic
(docs/gpu.md: 60-84 steps/s from 100K to 3M parameters), so a sweep whose trials train on one
gets no estimate from FLOPs.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

# The main job reached 23 % of its FLOP bound on 2 CPU cores, from start to exit: the bound
# 53 s (46.2 TFLOP at each trial's precision's one-core peak, over 2 cores), the run 234 s
# (docs/running.md, "The main job at the compute bound").
CPU_BOUND_SHARE = 0.23
# Ray's start (~10 s) beside a fresh MLflow database's (sweeps.runtime.driver), then the tables
# and plots at the end: the seconds a sweep of nothing would take.
START_S = 20.0
# A trial's own overhead: its data built, a worker's first torch calls, its model and
# diagnostics logged (about 2.5 s with a fresh worker per trial: sweeps.runtime.tuning).
PER_TRIAL_S = 2.5
# The side of the square matmuls timed: big enough for a core's fp32 peak (within 10 % of
# 1024's on the machine of 2026-11-28), small enough to take well under a second even where
# bf16 is emulated.
PEAK_SIZE = 256


@dataclass(frozen=True)
class WallEstimate:
    """``seconds`` from start to exit (None: not estimated, ``why``), and what it rests on."""

    seconds: float | None
    why: str


def estimate_wall(
    units: Sequence[tuple[float, str]], at_once: int, device: str, threads: int
) -> WallEstimate:
    """The wall time of ``units`` (each a Tune trial's training FLOPs and precision, in Tune's
    order) run ``at_once`` at a time on ``device`` (``cpu``, ``cuda``, ``mps``), each trial
    holding ``threads`` CPU threads."""
    if device != "cpu":
        return WallEstimate(None, f"small models on {device} are bound by kernel launches, not "
                                  "FLOPs (docs/gpu.md)")  # fmt: skip
    peaks = core_peaks(sorted({precision for _, precision in units}), threads)
    seconds = [
        PER_TRIAL_S + flops / (CPU_BOUND_SHARE * peaks[precision]) for flops, precision in units
    ]
    measured = ", ".join(f"{p} {peaks[p] / 1e9:.3g} GFLOP/s" for p in sorted(peaks))
    total = sum(flops for flops, _ in units)
    why = (
        f"{total:.2e} training FLOPs at {CPU_BOUND_SHARE:.0%} of the matmul peak measured "
        f"now with {threads} thread(s) ({measured}), {at_once} trial(s) at once"
    )
    return WallEstimate(START_S + makespan(seconds, at_once), why)


def makespan(seconds: Sequence[float], slots: int) -> float:
    """When the last of the jobs ends, each started in order on the first free of ``slots``."""
    free = [0.0] * max(1, slots)
    for job in seconds:
        heapq.heapreplace(free, free[0] + job)
    return max(free)


def core_peaks(
    precisions: Sequence[str], threads: int, sizes: tuple[int, ...] = (PEAK_SIZE,)
) -> dict[str, float]:
    """The matmul FLOP/s of ``threads`` threads in each of ``precisions`` (fp32, bf16), the best
    over square matrices of ``sizes``. Only the precisions asked for: bf16's peak took 57 s on a
    CPU without bf16 in hardware at the bench's sizes (fp32's 1 s; 2026-11-28)."""
    import torch

    from arith.bench import PRECISIONS, peak_matmul_flops

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    try:
        cpu = torch.device("cpu")
        return {p: peak_matmul_flops(cpu, PRECISIONS[p], sizes) for p in precisions}
    finally:
        torch.set_num_threads(before)


def duration(seconds: float) -> str:
    """``~40 s``, ``~4.2 min``, ``~3.5 h``: an estimate's precision, no more."""
    if seconds < 90:
        return f"~{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"~{seconds / 60:.2g} min"
    return f"~{seconds / 3600:.2g} h"

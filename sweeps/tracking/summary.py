"""A trial's summary as the tracker records it: train()'s own (the trainable's last report), or
a stand-in for a trial that ended without one (sizes from its config, the steps it trained).

Either is one metrics record at the trial's last step, marked ``summary`` so that a replay of
the journal can tell it from a result's metrics; its tags say which it is (``SUMMARY_TAG``).
A real summary's params record the hardware the trial trained on (``hardware.*``).
"""

from __future__ import annotations

import math
from typing import Any

from arith.training.reported import HARDWARE_KEYS, SUMMARY_KEYS
from sweeps.tracking.outbox import Record
from sweeps.tracking.state import REAL, STAND_IN, SUMMARY_TAG, TrialState

RAY_KEY = "hardware.ray"
"""Ray's version, which the trainable adds to train()'s hardware record."""

_STATUS = {
    "early_stopping": "EARLY_STOPPED",
    "diverged": "DIVERGED",
    "target_reached": "TERMINATED",
}


def final_status(stopped_reason: str | None) -> str:
    """The ``sweep.status`` of a trial that train() stopped for ``stopped_reason``."""
    return _STATUS.get(stopped_reason or "", "TERMINATED")


def real_summary(state: TrialState, result: dict[str, Any], trial_id: str) -> Record | None:
    """The record of train()'s summary ``result``, with the trial's final status in the same
    write (it is the trial's last report); None when it went out already."""
    if state.summary:
        return None
    summary = {
        k: float(result[k])
        for k in result
        if (k in SUMMARY_KEYS or k.startswith("best/"))
        and isinstance(result[k], int | float)
        and not isinstance(result[k], bool)
    }
    step = int(result.get("steps", state.last_step(0)))
    reason = str(result["stopped_reason"])
    status = final_status(reason)
    state.summary, state.stopped_reason, state.status_logged = True, reason, status
    tags = {"sweep.stopped_reason": reason, "sweep.status": status, SUMMARY_TAG: REAL}
    if "final_weights" in result:  # which weights the test sets measured: best or last
        tags["sweep.final_weights"] = str(result["final_weights"])
    record = _summary_record(trial_id, state.not_logged(summary, step), step, tags)
    record["params"] = hardware_params(result)
    return record


def hardware_params(result: dict[str, Any]) -> dict[str, str]:
    """What the trial trained on, as its run's params: train()'s ``hardware.*`` (device, GPU,
    precision, torch and CUDA versions) and the trainable's ``hardware.ray``; none from a
    trainable older than them."""
    return {key: str(result[key]) for key in (*HARDWARE_KEYS, RAY_KEY) if key in result}


def stand_in_summary(
    state: TrialState,
    trial_id: str,
    sizes: dict[str, Any] | None,
    wall_time_s: Any,
    reason: str,
) -> Record:
    """The record of a stand-in summary (``SUMMARY_TAG``), which a summary from train()
    replaces: ``sizes`` from describe() of the trial's config (no model built), or None;
    ``wall_time_s``: Tune's time_total_s of its last result, if any."""
    summary: dict[str, float] = {}
    if sizes is not None:
        summary = {k: float(sizes[k]) for k in SUMMARY_KEYS if k in sizes}
    step = state.last_step(0)
    # describe() plans the whole run; what was spent is the steps actually trained.
    for key in ("steps", "tokens", "flops"):
        summary.pop(key, None)
    if step > 0:
        summary["steps"] = float(step)
        if sizes is not None:
            summary["tokens"] = float(step * sizes["tokens_per_step"])
            summary["flops"] = float(step * sizes["flops_per_step"])
    if isinstance(wall_time_s, int | float):
        summary["wall_time_s"] = float(wall_time_s)
    summary = {k: v for k, v in summary.items() if math.isfinite(v)}
    state.stopped_reason = reason
    tags = {"sweep.stopped_reason": reason, SUMMARY_TAG: STAND_IN}
    return _summary_record(trial_id, state.not_logged(summary, step), step, tags)


def _summary_record(trial_id: str, summary: dict, step: int, tags: dict[str, str]) -> Record:
    return {
        "op": "metrics",
        "trial": trial_id,
        "metrics": summary,
        "step": step,
        "tags": tags,
        "summary": True,
        "what": f"summary of {trial_id}",
    }

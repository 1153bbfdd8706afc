"""Learning phases of a trial, after Liu et al. 2022 ("Towards Understanding Grokking: An
Effective Theory of Representation Learning"), from when its training and validation exact match
first reach ``train.threshold``:

- ``confusion``: training exact match never reaches the threshold within the budget;
- ``memorisation``: training does, validation never does;
- ``grokking``: validation does, but late: more than ``GROKKING_DELAY`` times the steps
  training took (generalisation long after the training set was fitted);
- ``comprehension``: validation does within ``GROKKING_DELAY`` times training's steps (or first).

Liu et al. draw the line between comprehension and grokking at a number of steps fitted to their
budget; a ratio reads runs of any length and learning rate with one rule. The rule and its
constant are fixed here, before any run, never tuned on one. A trial cut short before it reached
both thresholds (it errored, or its patience, the scheduler or a time budget stopped it) has no
phase: "never, within the budget" would be a guess. A diverged trial is classified as it got:
its learning rate and weight decay did that.

The steps come from each trial's evaluations: validation's from ``val/steps_to_threshold`` (the
first evaluation at the threshold, which ``arith`` records), training's from the history of
``train/exact_match`` (its training sample at each evaluation), read back from MLflow.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

import pandas as pd

from arith.training.trainconf import TrainConfig

COMPREHENSION, GROKKING = "comprehension", "grokking"
MEMORISATION, CONFUSION = "memorisation", "confusion"
PHASES = (COMPREHENSION, GROKKING, MEMORISATION, CONFUSION)
GROKKING_DELAY = 2.0
"""Validation later than this many times training's steps to the threshold is grokking: the
wait after fitting the training set is longer than fitting it took."""
PHASE_COLUMN = "phase"
TRAIN_STEPS = "train/steps_to_threshold"
VAL_STEPS = "val/steps_to_threshold"
PHASE_METRICS = ("train/exact_match",)
"""The curves a phase reads besides the trials' summaries."""
THRESHOLD_KEY = "train.threshold"
CUT_SHORT = frozenset({"early_stopping", "scheduler", "time_budget"})
"""The ``stopped_reason`` of a trial that stopped before its budget of steps ran out."""


def classify_phase(train_step: float | None, val_step: float | None) -> str:
    """The phase of a trial that reached the threshold on training data at ``train_step`` and
    on validation data at ``val_step`` (``None`` or NaN: never, within its budget)."""
    if _missing(train_step):
        return CONFUSION
    if _missing(val_step):
        return MEMORISATION
    # A first evaluation at step 0 counts as one step, so the ratio stays finite.
    return GROKKING if val_step > GROKKING_DELAY * max(train_step, 1) else COMPREHENSION


def first_step_at(history: Iterable[tuple[float, float]], threshold: float) -> float:
    """The first step of ``(step, value)`` evaluations whose value reaches ``threshold``; NaN
    when none does."""
    return next((step for step, value in sorted(history) if value >= threshold), math.nan)


def with_phase(trials: pd.DataFrame, curves: pd.DataFrame) -> pd.DataFrame:
    """The trials with ``train/steps_to_threshold`` (from the ``train/exact_match`` curves) and
    ``phase`` columns; unchanged when no trial has a training exact match curve."""
    train = curves[curves["metric"] == PHASE_METRICS[0]] if len(curves) else curves
    if trials.empty or train.empty:
        return trials
    histories = {
        trial: list(zip(group["step"], group["value"], strict=True))
        for trial, group in train.groupby("trial_id")
    }
    frame = trials.copy()
    blank = pd.Series(None, index=frame.index, dtype=object)
    thresholds = frame.get(THRESHOLD_KEY, blank).fillna(TrainConfig.threshold)
    frame[TRAIN_STEPS] = [
        first_step_at(histories.get(trial, []), threshold)
        for trial, threshold in zip(frame["trial_id"], thresholds, strict=True)
    ]
    errored = frame.get("status", blank).eq("ERROR")
    cut = errored | frame.get("stopped_reason", blank).isin(CUT_SHORT)
    rows = pd.DataFrame(
        {
            "train": frame[TRAIN_STEPS],
            "val": frame.get(VAL_STEPS, blank),
            "cut": cut,
            "curve": frame["trial_id"].isin(histories),
        }
    )
    phases = [_phase(r.train, r.val, r.cut) if r.curve else None for r in rows.itertuples()]
    at = frame.columns.get_loc("convergence") + 1 if "convergence" in frame else len(frame.columns)
    frame.insert(at, PHASE_COLUMN, phases)
    return frame


def _phase(train_step: float | None, val_step: float | None, cut_short: bool) -> str | None:
    """``classify_phase``; None for a trial cut short before it reached both thresholds."""
    if cut_short and (_missing(train_step) or _missing(val_step)):
        return None
    return classify_phase(train_step, val_step)


def majority_phase(phases: Iterable[str | None]) -> tuple[str | None, int]:
    """The most common phase of a cell's trials and how many trials have it; a tie goes to the
    phase first in ``PHASES``; ``(None, 0)`` when no trial has one."""
    counts = Counter(p for p in phases if isinstance(p, str))
    if not counts:
        return None, 0
    best = max(PHASES, key=lambda p: (counts[p], -PHASES.index(p)))
    return best, counts[best]


def _missing(step: float | None) -> bool:
    return step is None or (isinstance(step, float) and math.isnan(step))

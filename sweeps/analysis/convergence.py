"""Convergence flags: one rule that says how a trial ended, from its monitored-metric history.

The rule, in order (the first that applies wins):

1. ``diverged``: the trial's status is DIVERGED (or it stopped for ``diverged``).
2. ``unknown``: the trial's status is ERROR: it crashed, and where its curve stopped says
   nothing about where it was heading.
3. ``diverged``: a value of its history is not finite.
4. ``early_stopped``: it was stopped before its budget, by its own patience (status
   EARLY_STOPPED, reason ``early_stopping``) or by the scheduler (ASHA, reason ``scheduler``).
5. ``time_budget``: its wall-clock budget (``train.time_budget_s``, reason ``time_budget``)
   stopped it: how far it got measures the machine as much as the configuration.
6. ``converged``: it stopped because it reached its target (reason ``target_reached``).
7. ``unknown``: fewer than two evaluations: one point has no trend.
8. ``still_improving``: over the *window* (the last third of its training steps, and at least
   its last ``min_evals`` evaluations) the metric improved by more than the threshold between
   the window's first and last evaluation: for a fraction of right answers (exact match,
   normalised match, accuracy: ``sweeps.spec.metrics.is_fraction``) by more than ``abs_tol``
   (0.01, one percentage point); for any other metric (a loss) by more than ``rel_tol`` (2 %)
   of its value at the window's start. "Improved" follows the metric's
   direction (``metric_direction``: down for a loss, an error or steps to a target, else
   up). Such a cell is budget-limited: more steps (``train.max_steps``) would change it.
9. ``converged``: otherwise (flat over the window, or worse at its end than at its start).

A trial with no history of the metric and none of the statuses above is ``unknown``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from sweeps.spec.metrics import is_fraction, metric_direction

DIVERGED, EARLY_STOPPED, TIME_BUDGET = "diverged", "early_stopped", "time_budget"
STILL_IMPROVING, CONVERGED, UNKNOWN = "still_improving", "converged", "unknown"
LABELS = (CONVERGED, STILL_IMPROVING, DIVERGED, EARLY_STOPPED, TIME_BUDGET, UNKNOWN)
# The key to raise when a cell is still improving at the end of its budget (the default one;
# ``budget_key`` names the one a sweep's trials used).
BUDGET_KEY = "train.max_steps"
# The MLflow tag of a trial's label, set by the driver's tracker as the trial ends.
CONVERGENCE_TAG = "sweep.convergence"
# Metrics a trial's history is read from, first present wins (the sweep metric goes first
# unless it is measured only at the end, as test/* is).
MONITORED = ("val/exact_match", "val/loss", "train/loss")


@dataclass(frozen=True)
class ConvergenceRule:
    """The thresholds of the rule in the module docstring."""

    window_fraction: float = 1 / 3
    """The window covers this last fraction of the trial's steps ..."""
    min_evals: int = 3
    """... and at least this many last evaluations."""
    abs_tol: float = 0.01
    """A fraction metric still improves when it rose by more than this."""
    rel_tol: float = 0.02
    """Any other metric still improves when it improved by more than this share of its value."""


RULE = ConvergenceRule()


def classify(
    history: Sequence[tuple[float, float]],
    status: str | None = None,
    stopped_reason: str | None = None,
    *,
    metric: str = "val/exact_match",
    rule: ConvergenceRule = RULE,
) -> str:
    """One of LABELS for a trial: ``history`` is its (step, value) evaluations of ``metric``."""
    points = sorted((float(s), float(v)) for s, v in history)
    if status == "DIVERGED" or stopped_reason == "diverged":
        return DIVERGED
    if status == "ERROR":
        return UNKNOWN
    if any(not math.isfinite(v) for _, v in points):
        return DIVERGED
    if status == "EARLY_STOPPED" or stopped_reason in ("early_stopping", "scheduler"):
        return EARLY_STOPPED
    if stopped_reason == "time_budget":
        return TIME_BUDGET
    if stopped_reason == "target_reached":
        return CONVERGED
    if len(points) < 2:
        return UNKNOWN
    start = _window_start(points, rule)
    first, last = points[start][1], points[-1][1]
    gain = first - last if metric_direction(metric) == "min" else last - first
    tolerance = rule.abs_tol if is_fraction(metric) else rule.rel_tol * abs(first)
    return STILL_IMPROVING if gain > tolerance else CONVERGED


def _window_start(points: Sequence[tuple[float, float]], rule: ConvergenceRule) -> int:
    """Index of the window's first evaluation (see the module docstring)."""
    first_step, last_step = points[0][0], points[-1][0]
    cut = last_step - rule.window_fraction * (last_step - first_step)
    by_steps = next(i for i, (step, _) in enumerate(points) if step >= cut)
    return max(0, min(by_steps, len(points) - rule.min_evals))


def monitored_metric(curves: pd.DataFrame, metric: str | None = None) -> str | None:
    """The metric whose history decides: ``metric`` when the curves have it at more than one
    step (test/* never does), else the first of MONITORED they have; None without curves."""
    if curves.empty:
        return None
    counts = curves.groupby("metric")["step"].nunique()
    for name in (metric, *MONITORED):
        if name is not None and counts.get(name, 0) > 1:
            return name
    return next((m for m in MONITORED if m in counts.index), None)


def convergence_column(
    trials: pd.DataFrame, curves: pd.DataFrame, metric: str | None = None
) -> pd.Series:
    """The label of every trial (aligned with ``trials``), from ``curves`` in long format
    (trial_id, metric, step, value) and the trials' status and stopped_reason columns."""
    name = monitored_metric(curves, metric)
    rows = curves[curves["metric"] == name] if name is not None else curves.iloc[0:0]
    histories = {
        trial: list(zip(group["step"], group["value"], strict=True))
        for trial, group in rows.groupby("trial_id", sort=False)
    }
    labels = [
        classify(
            histories.get(row.get("trial_id"), []),
            _text(row.get("status")),
            _text(row.get("stopped_reason")),
            metric=name or "val/exact_match",
        )
        for _, row in trials.iterrows()
    ]
    return pd.Series(labels, index=trials.index, name="convergence", dtype=object)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def budget_key(trials: pd.DataFrame) -> str:
    """The key that sets the trials' length: ``train.flops_budget`` or ``train.tokens_budget``
    where a trial used one, ``train.epochs`` where one trained by epochs, else max_steps."""
    for key in ("train.flops_budget", "train.tokens_budget", "train.epochs"):
        if key in trials.columns and trials[key].notna().any():
            return key
    return BUDGET_KEY


def improving_line(trials: pd.DataFrame) -> str | None:
    """The end-of-sweep line on budget-limited trials, None when no trial was still improving."""
    if "convergence" not in trials.columns:
        return None
    improving = trials[trials["convergence"] == STILL_IMPROVING]
    if improving.empty:
        return None
    return (
        f"still improving: {len(improving)} of {len(trials)} trials were still improving when "
        f"they stopped (budget-limited); raise {budget_key(improving)} to see where they level off"
    )

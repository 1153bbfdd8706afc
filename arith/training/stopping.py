"""Per-run stopping bookkeeping: best value, patience, target, thresholds reached.

Each member of a packed run keeps its own, so one member stops alone while the others go on.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch

from arith.training.trainconf import TrainConfig


@dataclass
class LoopState:
    """What the loop knows besides the model: step, early-stopping bookkeeping, thresholds."""

    step: int = 0
    last_report_step: int = -1
    best: float | None = None
    """The monitor's best value so far, whatever ``min_delta`` is (``best/<monitor>``)."""
    best_at: int | None = None
    """The step of ``best``: the weights early stopping keeps (``best_weights``) are its."""
    patience_best: float | None = None
    """The value patience counts from: the last one that beat its predecessor by more than
    ``min_delta``. It lags ``best`` when small gains add up without one counting."""
    evals_without_improvement: int = 0
    steps_to_100pct: int | None = None
    steps_to_threshold: int | None = None
    elapsed_before: float = 0.0
    elapsed_at_save: float = 0.0
    stopped_reason: str | None = None
    """Why this run stopped, once it has (a member of a pack stops alone)."""
    best_weights: dict[str, torch.Tensor] | None = None
    """With ``train.patience``, the monitor's best weights so far (a second copy of the model:
    these models are small); kept in the checkpoint so a resumed run ends on the same model."""
    best_step: int = 0
    """The step of ``best_weights``."""
    final_weights: str = "last"
    """Which weights the run's final sets were measured on: ``best`` or ``last``."""
    final_metrics: dict[str, Any] | None = None
    """A stopped run's last report, which a pack resumed after it stopped summarises."""
    wall_time_s: float = 0.0
    """Seconds from the start to the stop of this run (resumes included)."""

    def to_dict(self) -> dict[str, Any]:
        """Every field, tensors uncopied, for ``torch.save``."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def update(self, metrics: dict[str, float], step: int, tc: TrainConfig) -> str | None:
        """Record an evaluation; the reason to stop, if any."""
        self.step = step
        if self.steps_to_100pct is None and metrics.get("train/exact_match", 0.0) >= 1.0:
            self.steps_to_100pct = step
        if self.steps_to_threshold is None and metrics.get("val/exact_match", 0.0) >= tc.threshold:
            self.steps_to_threshold = step
        value = metrics.get(tc.monitor)
        if value is None:
            return None
        sign = 1.0 if tc.higher_is_better else -1.0
        # a checkpoint from before ``patience_best`` kept that value in ``best``
        reference = self.best if self.patience_best is None else self.patience_best
        if self.best is None or sign * (value - self.best) > 0:
            self.best, self.best_at = value, step
        if reference is None or sign * (value - reference) > tc.min_delta:
            self.patience_best, self.evals_without_improvement = value, 0
        else:
            self.evals_without_improvement += 1
        if step < tc.min_steps:
            return None
        if tc.target is not None and sign * (value - tc.target) >= 0:
            return "target_reached"
        if tc.patience is not None and self.evals_without_improvement >= tc.patience:
            return "early_stopping"
        return None

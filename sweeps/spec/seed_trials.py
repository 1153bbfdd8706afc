"""Optuna's trials over several seeds (``sweep.seeds`` with ``search: optuna``).

Each config the searcher draws trains once per seed, the seeds packed into one stacked model
(they differ in ``train.seed`` alone, so they share every shape: ``arith.training.packing``).
Each seed is a trial of its own in MLflow, ``trials.csv`` and the tables (``<id>s<seed>``, its
``train.seed`` among its params), as a repeat over seeds is in a grid sweep. The searcher and
the scheduler see one figure for the config (``SeedsFigure``): each metric's mean over the
seeds, and ``val/steps_to_threshold`` as the worst seed's, so that a recipe is as fast as its
slowest seed, not its luckiest.
"""

from __future__ import annotations

import math
import re
from typing import Any

SEED_KEY = "train.seed"
STEPS_KEY = "val/steps_to_threshold"


def uses_seed_trials(settings) -> bool:
    """Whether a sweep's trials are seed trials: Optuna with more than one seed."""
    return settings.search == "optuna" and settings.seeds is not None and len(settings.seeds) > 1


def seed_points(config: dict[str, Any], seeds: list[int]) -> list[dict[str, Any]]:
    """The drawn ``config`` once per seed."""
    return [{**config, SEED_KEY: seed} for seed in seeds]


def seed_trial_id(trial_id: str, seed: int) -> str:
    """``abcde_00003`` (Optuna's trial) and seed 2 -> ``abcde_00003s2``."""
    return f"{trial_id}s{seed}"


def drawn_trial_id(seed_trial: str) -> str:
    """``seed_trial_id``'s inverse: ``abcde_00003s2`` -> ``abcde_00003``, the drawn config's."""
    return re.sub(r"s\d+$", "", seed_trial)


class SeedsFigure:
    """The figures of one config over its seeds, report by report. A seed's steps to its
    threshold are the step its ``val/exact_match`` first reached ``train.threshold``; while
    it has not, its budget (``train.max_steps``) plus the share of the threshold it still
    misses times that budget, so that a seed short of the threshold always counts worse than
    one there, and a nearer one better than a farther one."""

    def __init__(self, thresholds: list[float], budgets: list[int]) -> None:
        self.thresholds, self.budgets = thresholds, budgets
        self.reached: list[int | None] = [None] * len(thresholds)
        self.last = [0.0] * len(thresholds)

    def update(self, evaluated: dict[int, dict[str, Any]]) -> dict[str, float]:
        """The config's figures after the members ``evaluated`` reported (member -> metrics,
        an evaluation's or a summary's)."""
        for i, metrics in evaluated.items():
            accuracy = metrics.get("val/exact_match")
            if isinstance(accuracy, int | float) and math.isfinite(accuracy):
                self.last[i] = float(accuracy)
            summary_steps = metrics.get(STEPS_KEY)
            if isinstance(summary_steps, int | float) and self.reached[i] is None:
                self.reached[i] = int(summary_steps)
            step = metrics.get("step")
            if self.reached[i] is None and step is not None and self.last[i] >= self.thresholds[i]:
                self.reached[i] = int(step)
        figures = _means(evaluated)
        figures[STEPS_KEY] = float(max(self.steps(i) for i in range(len(self.thresholds))))
        return figures

    def steps(self, i: int) -> float:
        if self.reached[i] is not None:
            return float(self.reached[i])
        missing = max(0.0, 1.0 - self.last[i] / self.thresholds[i]) if self.thresholds[i] else 0.0
        return self.budgets[i] * (1.0 + missing)


def _means(evaluated: dict[int, dict[str, Any]]) -> dict[str, float]:
    """Each numeric metric's mean over the members that reported it."""
    values: dict[str, list[float]] = {}
    for metrics in evaluated.values():
        for key, value in metrics.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                values.setdefault(key, []).append(float(value))
    return {key: sum(v) / len(v) for key, v in values.items() if key != STEPS_KEY}

"""The sweep's MLflow records as a Tune callback: the one module of ``sweeps.tracking`` that
imports Ray.

``MLflowTracker`` adds to ``sweeps.tracking.records.SweepRecords`` only what Tune needs: its
hooks, each of which reads what the records need off Tune's ``Trial`` (its id, config, last
result, error file, checkpoint folder) and hands it on as plain values, and the state Tune
keeps of it in the experiment (the parent run's id). As Ray keeps ``MLflowLoggerCallback``
apart from its MLflow utility, the MLflow logic is tested without Tune
(``tests/test_trial_records.py``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ray.tune import Callback

from sweeps.tracking.records import SweepRecords


class MLflowTracker(SweepRecords, Callback):
    """``SweepRecords`` fed by Tune's hooks (see the module docstring); the driver calls the
    records' own methods (parent run, outputs, the outbox) on it as on ``SweepRecords``."""

    _budget_ends: float | None = None  # wall-clock time the sweep's time budget ends

    def setup(self, stop=None, num_samples=None, total_num_samples=None, **info) -> None:
        # Tune's sweep-wide time_budget_s stops running trials as a scheduler would; its end,
        # kept here, tells a trial it cut from one ASHA stopped (the labels of
        # sweeps.analysis.convergence). Set once: a lost-trial round (sweeps.runtime.lost) and
        # --resume set Tune up again, and Tune restores its TimeoutStopper with the budget it
        # had left, counted down in wall-clock time from its last check, so the end stays the
        # first setup's (kept in Tune's state for --resume).
        budget = info.get("time_budget_s")
        budget = budget.total_seconds() if hasattr(budget, "total_seconds") else budget
        if budget and self._budget_ends is None:
            self._budget_ends = time.time() + budget

    # ---- state: MLflow is the truth; Tune's copy remembers the parent run, the budget's end ----
    def get_state(self) -> dict[str, Any]:
        # Tune calls this as it snapshots the experiment (TuneController.save_to_dir), and only
        # then; the snapshot reaches the storage --resume reads after this returns. Every record
        # queued so far may come from a result the snapshot holds, which a resume will not
        # report again: the journal takes those the writer thread has not delivered or
        # journaled yet, so that a driver killed right after the snapshot loses none. Local
        # disk only, at snapshots only: Tune's loop never waits for the store here.
        self.outbox.persist()
        return {"parent_run_id": self.parent_run_id, "budget_ends": self._budget_ends}

    def set_state(self, state: dict[str, Any]) -> None:
        if self._budget_ends is None:
            self._budget_ends = state.get("budget_ends")
        if self.parent_run_id is None and state.get("parent_run_id"):
            self.attach(state["parent_run_id"])

    # ---- Tune's hooks, handed on as plain values ----
    def on_trial_start(self, iteration: int, trials: list, trial, **info) -> None:
        # A restored trial's checkpoint result says where it restarts from.
        restored = getattr(trial, "latest_checkpoint_result", None)
        self.trial_started(trial.trial_id, trial.config, getattr(restored, "metrics", None))

    def on_trial_result(self, iteration: int, trials: list, trial, result: dict, **info) -> None:
        self.trial_reported(trial.trial_id, trial.config, result)

    def on_trial_complete(self, iteration: int, trials: list, trial, **info) -> None:
        spent = self._budget_ends is not None and time.time() >= self._budget_ends
        with self._local_checkpoint(trial) as checkpoint:
            self.trial_completed(
                trial.trial_id, trial.config, trial.last_result, checkpoint, budget_spent=spent
            )

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        error_file = str(getattr(trial, "error_file", None) or "")
        with self._local_checkpoint(trial) as local:
            self.trial_errored(trial.trial_id, trial.config, trial.last_result, error_file, local)

    @contextmanager
    def _local_checkpoint(self, trial) -> Iterator[Path | None]:
        """The trial's final checkpoint as a local folder while the records copy its model out
        (Tune's storage may be remote), or None without one or without a place for models."""
        checkpoint = getattr(trial, "checkpoint", None)
        if self.model_dir is None or checkpoint is None:
            yield None
            return
        with checkpoint.as_directory() as local:
            yield Path(local)

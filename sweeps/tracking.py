"""MLflow from the driver: a parent run per sweep and a nested child run per trial.

Trials never talk to MLflow; they report to Tune, and this callback (on the driver) is the one
writer. That keeps SQLite usable as the default store and keeps the bookkeeping in one small,
restorable state: the parent run id and, per trial, its run id, the last step logged and
whether its summary was logged. Metrics are logged only for steps past the last one logged, so
a trial restored from a checkpoint never logs a (key, step) pair twice.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from ray.tune import Callback

# Values train() returns in its summary (besides the final metrics) that a child run records.
SUMMARY_METRICS = (
    "n_params",
    "n_params_non_embedding",
    "flops_per_token",
    "steps",
    "wall_time_s",
    "best/val/exact_match",
    "train/steps_to_100pct",
    "val/steps_to_threshold",
)
# Reported keys without a namespace that are still training metrics (the rest are Tune's own).
PLAIN_METRICS = ("epoch", "lr")
_STATUS = {
    "early_stopping": "EARLY_STOPPED",
    "diverged": "DIVERGED",
    "target_reached": "TERMINATED",
}
_BATCH = 100  # MLflow's limit of params per log_batch call


def default_tracking_uri(cwd: Path | None = None) -> str:
    import os

    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    return f"sqlite:///{(cwd or Path.cwd()).resolve() / 'mlflow.db'}"


def artifact_root(tracking_uri: str) -> str | None:
    """Artifacts of a SQLite store go next to the database file (not into ./mlruns of the cwd);
    a server decides for itself."""
    if tracking_uri.startswith("sqlite:///"):
        db = Path(tracking_uri.removeprefix("sqlite:///"))
        return (db.resolve().parent / "mlartifacts").as_uri()
    return None


def training_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The trainer's numeric metrics in a Tune result (namespaced keys, epoch, lr)."""
    out = {}
    for key, value in result.items():
        if not ("/" in key or key in PLAIN_METRICS):
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        out[key] = float(value)
    return out


class MLflowTracker(Callback):
    """A Tune callback that records the sweep in MLflow (see the module docstring).

    ``resolve(trial_config) -> RunConfig`` gives a trial's full config for its params;
    ``describe(RunConfig) -> dict`` gives sizes for trials that end without a summary.
    """

    def __init__(
        self,
        tracking_uri: str,
        experiment_name: str,
        resolve: Callable[[dict[str, Any]], Any],
        describe: Callable[[Any], dict[str, Any]] | None = None,
    ) -> None:
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        self.resolve = resolve
        self.describe = describe
        self.parent_run_id: str | None = None
        self.trials: dict[str, dict[str, Any]] = {}  # trial_id -> run_id, last_step, summary
        self._client = None
        self._experiment: str | None = None

    # ---- state (small, so a restored sweep finds its runs again) ----
    def get_state(self) -> dict[str, Any]:
        return {"parent_run_id": self.parent_run_id, "trials": self.trials}

    def set_state(self, state: dict[str, Any]) -> None:
        self.parent_run_id = state.get("parent_run_id")
        self.trials = dict(state.get("trials", {}))

    def __getstate__(self) -> dict[str, Any]:
        return {
            **self.__dict__,
            "_client": None,
            "_experiment": None,
        }  # Tune pickles callbacks; clients stay behind

    @property
    def client(self):
        if self._client is None:
            from mlflow import MlflowClient

            self._client = MlflowClient(tracking_uri=self.tracking_uri)
        return self._client

    # ---- the parent run ----
    def start_parent(self, spec_yaml: str, tags: dict[str, str] | None = None) -> str:
        """Create the sweep's parent run (once) and attach the spec; returns its run id."""
        if self.parent_run_id is not None:
            return self.parent_run_id
        experiment_id = self._experiment_id()
        run = self.client.create_run(
            experiment_id,
            run_name=self.experiment_name,
            tags={"sweep.name": self.experiment_name, "sweep.role": "parent", **(tags or {})},
        )
        self.parent_run_id = run.info.run_id
        self._log_text(self.parent_run_id, spec_yaml, "spec.yaml")
        return self.parent_run_id

    def finish_parent(self, status: str = "FINISHED") -> None:
        if self.parent_run_id is not None:
            self.client.set_terminated(self.parent_run_id, status=status)

    def log_outputs(self, paths: list[Path]) -> None:
        """Tables under ``tables/`` and figures under ``plots/`` of the parent run."""
        for path in paths:
            folder = "plots" if path.suffix == ".png" else "tables"
            self.client.log_artifact(self.parent_run_id, str(path), folder)

    def _experiment_id(self) -> str:
        if self._experiment is None:
            found = self.client.get_experiment_by_name(self.experiment_name)
            if found is not None:
                self._experiment = found.experiment_id
            else:
                location = artifact_root(self.tracking_uri)
                if location is not None:
                    location = f"{location}/{self.experiment_name}"
                self._experiment = self.client.create_experiment(
                    self.experiment_name, artifact_location=location
                )
        return self._experiment

    # ---- Tune hooks ----
    def on_trial_start(self, iteration: int, trials: list, trial, **info) -> None:
        known = self.trials.get(trial.trial_id)
        if known is not None:  # a retry or a restored sweep: same run, carry on
            self.client.set_tag(known["run_id"], "sweep.status", "RUNNING")
            return
        self.trials[trial.trial_id] = self._start_child(trial)

    def on_trial_result(self, iteration: int, trials: list, trial, result: dict, **info) -> None:
        state = self.trials.get(trial.trial_id)
        if state is None:
            return
        if "stopped_reason" in result:  # the trainable's last report: train()'s summary
            self._log_summary(state, result)
            return
        step = int(result.get("step", state["last_step"] + 1))
        if step <= state["last_step"]:
            return
        self._log_metrics(state["run_id"], training_metrics(result), step)
        state["last_step"] = step

    def on_trial_complete(self, iteration: int, trials: list, trial, **info) -> None:
        state = self.trials.get(trial.trial_id)
        if state is None:
            return
        if state["summary"]:
            status = _STATUS.get(state.get("stopped_reason", ""), "TERMINATED")
        else:  # stopped by the scheduler (ASHA) before train() returned
            status = "EARLY_STOPPED"
            self._log_fallback_summary(state, trial, "scheduler")
        self._end_child(state, status, "FINISHED")

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        state = self.trials.get(trial.trial_id)
        if state is None:
            return
        if not state["summary"]:
            self._log_fallback_summary(state, trial, "error")
        error = getattr(trial, "error_file", None) or ""
        self.client.set_tag(state["run_id"], "sweep.error_file", str(error))
        self._end_child(state, "ERROR", "FAILED")

    # ---- child runs ----
    def _start_child(self, trial) -> dict[str, Any]:
        config = self.resolve(trial.config)
        run = self.client.create_run(
            self._experiment_id(),
            run_name=f"{self.experiment_name}-{trial.trial_id}",
            tags={
                "mlflow.parentRunId": self.parent_run_id,
                "sweep.name": self.experiment_name,
                "sweep.trial_id": trial.trial_id,
                "sweep.role": "trial",
                "sweep.status": "RUNNING",
            },
        )
        run_id = run.info.run_id
        self._log_params(run_id, config.flat())
        self._log_text(run_id, yaml.safe_dump(config.to_dict(), sort_keys=False), "config.yaml")
        return {"run_id": run_id, "last_step": -1, "summary": False}

    def _log_params(self, run_id: str, flat: dict[str, Any]) -> None:
        from mlflow.entities import Param

        params = [Param(k, str(list(v) if isinstance(v, tuple) else v)) for k, v in flat.items()]
        for i in range(0, len(params), _BATCH):
            self.client.log_batch(run_id, params=params[i : i + _BATCH])

    def _log_metrics(
        self, run_id: str, metrics: dict[str, float], step: int, tags: dict[str, str] | None = None
    ) -> None:
        """One ``log_batch`` call per 100 metrics (each call is a database transaction)."""
        from mlflow.entities import Metric, RunTag

        now = int(time.time() * 1000)
        rows = [Metric(k, v, now, step) for k, v in metrics.items()]
        run_tags = [RunTag(k, v) for k, v in (tags or {}).items()]
        for i in range(0, max(len(rows), 1), _BATCH):
            self.client.log_batch(
                run_id, metrics=rows[i : i + _BATCH], tags=run_tags if i == 0 else []
            )

    def _log_summary(self, state: dict[str, Any], result: dict[str, Any]) -> None:
        if state["summary"]:
            return
        summary = {
            k: float(result[k])
            for k in result
            if (k in SUMMARY_METRICS or k.startswith("best/"))
            and isinstance(result[k], int | float)
            and not isinstance(result[k], bool)
        }
        step = int(result.get("steps", max(state["last_step"], 0)))
        reason = str(result["stopped_reason"])
        self._log_metrics(state["run_id"], summary, step, {"sweep.stopped_reason": reason})
        state.update(summary=True, stopped_reason=reason)

    def _log_fallback_summary(self, state: dict[str, Any], trial, reason: str) -> None:
        """Sizes from the config (no model built) for trials that never returned a summary."""
        summary: dict[str, float] = {}
        if self.describe is not None:
            sizes = self.describe(self.resolve(trial.config))
            summary = {k: float(sizes[k]) for k in SUMMARY_METRICS if k in sizes}
        last = trial.last_result or {}
        if state["last_step"] >= 0:
            summary["steps"] = float(state["last_step"])
        if isinstance(last.get("time_total_s"), int | float):
            summary["wall_time_s"] = float(last["time_total_s"])
        summary = {k: v for k, v in summary.items() if math.isfinite(v)}
        tags = {"sweep.stopped_reason": reason}
        self._log_metrics(state["run_id"], summary, max(state["last_step"], 0), tags)
        state.update(summary=True, stopped_reason=reason)

    def _end_child(self, state: dict[str, Any], status: str, run_status: str) -> None:
        self.client.set_tag(state["run_id"], "sweep.status", status)
        self.client.set_terminated(state["run_id"], status=run_status)
        state["status"] = status

    def _log_text(self, run_id: str, text: str, name: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / name
            path.write_text(text)
            self.client.log_artifact(run_id, str(path))

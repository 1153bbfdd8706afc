"""MLflow from the driver: a parent run per sweep and a nested child run per trial.

Trials never talk to MLflow; they report to Tune, and this callback (on the driver) is the one
writer. That keeps SQLite usable as the default store and the bookkeeping in one place:

- MLflow is the source of truth. A resumed sweep (``attach``) finds its parent run and the child
  run of every trial (tag ``sweep.trial_id``) and, per child, the last step logged of every
  metric; a result's metrics are logged only for keys whose last step is before the result's.
  A trial restored from a checkpoint, or a whole sweep restored after its driver was killed,
  therefore never logs a (key, step) pair twice and never gets a second child run.
- Writes go through an ordered buffer (``sweeps.tracking.outbox.Outbox``): when the store is
  unreachable, they wait in order and are retried on later results and, with a bounded wait,
  at the end of the sweep, so a short outage loses nothing and does not stop the trials.
  Each write is a record (``_apply`` carries it out); those that wait are journaled in the
  output folder, and ``replay`` delivers them after a driver killed during an outage, filtered
  by what MLflow holds like any other write.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from ray.tune import Callback

from arith.trainer import SUMMARY_KEYS
from sweeps.analysis.convergence import CONVERGENCE_TAG
from sweeps.spec.packing import PACK_KEY, Member, member_trial_id
from sweeps.tracking.outbox import Outbox, Record, one_line, read_journal
from sweeps.tracking.state import REAL, STAND_IN, SUMMARY_TAG, TrialState, is_real_summary

# Reported keys without a namespace that are still training metrics (the rest are Tune's own).
PLAIN_METRICS = ("epoch", "lr")
_STATUS = {
    "early_stopping": "EARLY_STOPPED",
    "diverged": "DIVERGED",
    "target_reached": "TERMINATED",
}
_BATCH = 100  # MLflow's limit of params per log_batch call
ML_KIND = "custom_model_development"


def default_tracking_uri(cwd: Path | None = None) -> str:
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
        drain_timeout_s: float = 60.0,
        model_dir: Path | None = None,
        metric: str | None = None,
        journal: Path | None = None,
        packs: list[list[Member]] | None = None,
    ) -> None:
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        self.resolve = resolve
        self.describe = describe
        self.drain_timeout_s = drain_timeout_s
        # Where each finished trial's model is copied out of Tune's storage before its upload.
        self.model_dir = model_dir
        # The sweep metric, whose history decides a trial's convergence tag where it has one.
        self.metric = metric
        # A packed sweep's packs (sweeps.spec.packing): each Tune trial is a pack, each member a
        # trial of its own here, with the id and child run it would have had unpacked.
        self.packs = packs
        self.parent_run_id: str | None = None
        self.trials: dict[str, TrialState] = {}
        # Work a restored trial did again: steps and training seconds since its checkpoint.
        self.redone = {"trials": 0, "steps": 0, "seconds": 0.0}
        self.journal = journal
        self.outbox = Outbox(self._apply, journal)
        self._client = None
        self._experiment: str | None = None
        self._budget_ends: float | None = None  # monotonic time the sweep's time budget ends

    def setup(self, stop=None, num_samples=None, total_num_samples=None, **info) -> None:
        # Tune's sweep-wide time_budget_s stops running trials as a scheduler would; its end,
        # kept here, tells a trial it cut from one ASHA stopped (the labels of
        # sweeps.analysis.convergence).
        budget = info.get("time_budget_s")
        budget = budget.total_seconds() if hasattr(budget, "total_seconds") else budget
        self._budget_ends = time.monotonic() + budget if budget else None

    # ---- state: MLflow is the truth; Tune's copy only remembers the parent run ----
    def get_state(self) -> dict[str, Any]:
        return {"parent_run_id": self.parent_run_id}

    def set_state(self, state: dict[str, Any]) -> None:
        if self.parent_run_id is None and state.get("parent_run_id"):
            self.attach(state["parent_run_id"])

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles callbacks; clients and unsent writes stay behind.
        return {**self.__dict__, "_client": None, "_experiment": None, "outbox": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.outbox = Outbox(self._apply, self.journal)

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
        # Through the outbox: a server that goes away right after creating the run must not
        # hold up the trials (the spec waits for it like any other write).
        spec = {"op": "spec", "run_id": self.parent_run_id, "text": spec_yaml}
        self._send({**spec, "what": "the sweep's spec"})
        return self.parent_run_id

    def attach(self, parent_run_id: str) -> None:
        """Continue the sweep of ``parent_run_id``: its child runs and what they hold."""
        from sweeps.analysis.collect import child_runs

        self.parent_run_id = parent_run_id
        parent = self.client.get_run(parent_run_id)
        self._experiment = parent.info.experiment_id
        self.trials = {}
        for run in child_runs(self.client, parent):
            trial_id = run.data.tags.get("sweep.trial_id")
            if trial_id is None:
                continue
            self.trials[trial_id] = TrialState(
                run_id=run.info.run_id,
                # MLflow keeps each key's latest value, i.e. the one at its highest step;
                # RunData's public form with steps is its protobuf message.
                steps={m.key: m.step for m in run.data.to_proto().metrics},
                elapsed=run.data.metrics.get("time/elapsed_s"),
                summary=is_real_summary(run.data.tags),
                stopped_reason=run.data.tags.get("sweep.stopped_reason"),
                status=run.data.tags.get("sweep.status"),
                params=bool(run.data.params),
                created=True,
            )
        self.client.set_terminated(parent_run_id, status="RUNNING")

    def finish_parent(self, status: str = "FINISHED") -> bool:
        """End the parent run (after what is buffered); False if MLflow is unreachable (the
        caller waits for the buffer first, with ``outbox.drain``)."""
        if self.parent_run_id is None:
            return False
        if self.redone["trials"]:
            metrics = {f"resume/redone_{k}": float(v) for k, v in self.redone.items()}
            self.log_parent_figures(metrics, what="the work the resume redid")
        if not self.outbox.flush():
            return False
        try:
            self.client.set_terminated(self.parent_run_id, status=status)
        except Exception as err:  # the end of a sweep must not raise here
            print(f"warning: could not end the parent run: {one_line(err)}", file=sys.stderr)
            return False
        return True

    # ---- the sweep's outputs on the parent run, through the outbox like every write ----
    def log_outputs(self, paths: list[Path]) -> None:
        """Tables under ``tables/`` and figures under ``plots/`` of the parent run (uploading
        them again, after a resume, replaces the same files)."""
        record = {"op": "outputs", "run_id": self.parent_run_id, "paths": [str(p) for p in paths]}
        self._send({**record, "what": "the sweep's tables and plots"})

    def log_parent_figures(
        self,
        metrics: dict[str, float],
        params: dict[str, str] | None = None,
        tags: dict[str, str] | None = None,
        what: str = "the sweep's figures",
    ) -> None:
        """Figures of the whole sweep on the parent run, at step 0; each metric and param once
        (``_log_parent_figures``), so an end of sweep done again on resume adds nothing twice."""
        record = {"op": "parent", "run_id": self.parent_run_id, "metrics": metrics}
        self._send({**record, "params": params or {}, "tags": tags or {}, "what": what})

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
            # Model training, not GenAI: the UI's kind tag (MLflow 3.17's UI reads its kind
            # from the address, see sweeps.tracking.ui, but older and newer ones read this tag).
            self.client.set_experiment_tag(self._experiment, "mlflow.experimentKind", ML_KIND)
        return self._experiment

    # ---- Tune hooks ----
    def units(self, trial) -> list[tuple[str, dict[str, Any], int | None]]:
        """What a Tune trial is to MLflow: itself (``(trial_id, config, None)``), or in a packed
        sweep each member of its pack (``(member's trial id, member's config, position)``)."""
        if self.packs is None:
            return [(trial.trial_id, dict(trial.config), None)]
        members = self.packs[trial.config[PACK_KEY]]
        return [(member_trial_id(trial.trial_id, m), m.point, i) for i, m in enumerate(members)]

    def on_trial_start(self, iteration: int, trials: list, trial, **info) -> None:
        for trial_id, config, _ in self.units(trial):
            self._start(trial_id, config, trial)

    def _start(self, trial_id: str, config: dict[str, Any], trial) -> None:
        state = self.trials.get(trial_id)
        setup = {"op": "setup", "trial": trial_id, "config": config}
        if state is None:
            state = self.trials[trial_id] = TrialState()
            self._send({"op": "child", "trial": trial_id, "what": f"child run of {trial_id}"})
            self._send({**setup, "what": f"params of {trial_id}"})
        elif not state.params:  # created, but its driver died before the params went out
            self._send({**setup, "what": f"params of {trial_id}"})
        else:  # a retry or a restored sweep: the same run carries on
            self._count_redo(state, trial)
            self._send({"op": "running", "trial": trial_id, "what": f"status of {trial_id}"})

    def on_trial_result(self, iteration: int, trials: list, trial, result: dict, **info) -> None:
        if self.packs is None:
            self._result(trial.trial_id, result)
            return
        for trial_id, _, i in self.units(trial):
            if str(i) in result.get("members", {}):
                self._result(trial_id, result["members"][str(i)])

    def _result(self, trial_id: str, result: dict[str, Any]) -> None:
        state = self.trials.get(trial_id)
        if state is None:
            return
        if "stopped_reason" in result:  # the trainable's last report: train()'s summary
            self._log_summary(state, result, trial_id)
            return
        step = int(result.get("step", state.last_step(-1) + 1))
        metrics = state.not_logged(training_metrics(result), step)
        if not metrics:
            return
        if "time/elapsed_s" in metrics:
            state.elapsed = metrics["time/elapsed_s"]
        self._send(
            {
                "op": "metrics",
                "trial": trial_id,
                "metrics": metrics,
                "step": step,
                "what": f"metrics of {trial_id} at step {step}",
            }
        )

    def on_trial_complete(self, iteration: int, trials: list, trial, **info) -> None:
        for trial_id, config, i in self.units(trial):
            state = self.trials.get(trial_id)
            if state is None:
                continue
            if state.summary:
                status = _STATUS.get(state.stopped_reason or "", "TERMINATED")
            else:  # stopped by the scheduler (ASHA) or the time budget before train() returned
                spent = self._budget_ends is not None and time.monotonic() >= self._budget_ends
                status = "TERMINATED" if spent else "EARLY_STOPPED"
                reason = "time_budget" if spent else "scheduler"
                self._log_fallback_summary(state, trial_id, config, trial, reason)
            self._send_model(state, trial, trial_id, i)
            self._end_child(state, status, "FINISHED", trial_id)

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        for trial_id, config, _ in self.units(trial):
            if trial_id not in self.trials:  # failed before it started: MLflow still shows it
                self._start(trial_id, config, trial)
            state = self.trials[trial_id]
            if not state.summary:
                self._log_fallback_summary(state, trial_id, config, trial, "error")
            error = str(getattr(trial, "error_file", None) or "")
            tags = {"sweep.error_file": error}
            self._end_child(state, "ERROR", "FAILED", trial_id, tags)

    def on_experiment_end(self, trials: list, **info) -> None:
        self.outbox.flush()

    # ---- writes: records, carried out (now or after an outage) by _apply ----
    def _send(self, record: Record, journaled: bool = False) -> None:
        self.outbox.send(record, journaled)

    def _apply(self, record: Record) -> None:
        op, trial_id = record["op"], record.get("trial")
        state = self.trials.get(trial_id)
        if op == "child":
            self._start_child(trial_id)
        elif op == "setup":
            self._log_setup(trial_id, record["config"])
        elif op == "running":
            self._set_running(state)
        elif op == "metrics":
            run_id = record.get("run_id") or state.run_id
            self._log_metrics(run_id, record["metrics"], record["step"], record.get("tags"))
        elif op == "end":
            self._end_run(state, record["tags"], record["run_status"])
        elif op == "spec":
            self._log_text(record["run_id"], record["text"], "spec.yaml")
        elif op == "model":  # the trial's final model, copied out of Tune's storage
            self.client.log_artifacts(state.run_id, record["folder"], "model")
        elif op == "outputs":
            from sweeps.analysis.collect import log_outputs_to_parent

            paths = [Path(p) for p in record["paths"] if Path(p).is_file()]
            log_outputs_to_parent(self.client, record["run_id"], paths)
        elif op == "parent":
            self._log_parent_figures(record)
        else:
            raise ValueError(f"unknown MLflow write {op!r}")

    def replay(self) -> int:
        """Deliver the writes a killed driver left in the journal, in order, each skipped or cut
        down to what MLflow (read by ``attach``) does not hold yet; returns how many were read.
        Call after ``attach``, before Tune restarts the trials."""
        records = read_journal(self.journal) if self.journal is not None else []
        # All queued before any is tried: the journal is cut down only once all are delivered.
        for record in records:
            record = self._still_missing(record)
            if record is not None:
                self.outbox.enqueue(record, journaled=True)
        self.outbox.flush()
        self.outbox.settle_journal(stale=True)
        return len(records)

    def _still_missing(self, record: Record) -> Record | None:
        """The part of a journaled write that MLflow does not hold yet, or None."""
        op, trial_id = record["op"], record.get("trial")
        if trial_id is None:
            return record
        state = self.trials.get(trial_id)
        if op == "child":
            if state is not None:
                return None
            self.trials[trial_id] = TrialState()
            return record
        if state is None:  # its child run was never journaled: nothing to attach it to
            return None
        if op == "setup":
            return None if state.params else record
        if op == "running":
            return None  # Tune sets a trial it restarts running again
        if op == "model":  # uploading it again replaces the same files
            return record if Path(record["folder"]).is_dir() else None
        if op == "metrics" and record.get("summary"):
            if state.summary:
                return None
            reason = record["tags"]["sweep.stopped_reason"]
            state.summary, state.stopped_reason = is_real_summary(record["tags"]), reason
            return {**record, "metrics": state.not_logged(record["metrics"], record["step"])}
        if op == "metrics":
            metrics = state.not_logged(record["metrics"], record["step"])
            return {**record, "metrics": metrics} if metrics else None
        if op == "end":
            state.status = record["tags"].get("sweep.status", state.status)
        return record

    # ---- child runs ----
    def _start_child(self, trial_id: str) -> None:
        state = self.trials[trial_id]
        if state.created:  # a retry: the store may have made the run before the error
            found = self._find_child(trial_id)
            if found is not None:
                state.run_id = found
                return
        state.created = True
        run = self.client.create_run(
            self._experiment_id(),
            run_name=f"{self.experiment_name}-{trial_id}",
            tags={
                "mlflow.parentRunId": self.parent_run_id,
                "sweep.name": self.experiment_name,
                "sweep.trial_id": trial_id,
                "sweep.role": "trial",
                "sweep.status": "RUNNING",
            },
        )
        state.run_id = run.info.run_id

    def _find_child(self, trial_id: str) -> str | None:
        runs = self.client.search_runs(
            [self._experiment_id()],
            filter_string=f"tags.`mlflow.parentRunId` = '{self.parent_run_id}' "
            f"and tags.`sweep.trial_id` = '{trial_id}'",
            max_results=1,
        )
        return runs[0].info.run_id if runs else None

    def _log_setup(self, trial_id: str, trial_config: dict[str, Any]) -> None:
        """config.yaml, then the params (their presence marks a complete setup on resume)."""
        from mlflow.entities import Param

        state = self.trials[trial_id]
        config = self.resolve(trial_config)
        self._log_text(
            state.run_id, yaml.safe_dump(config.to_dict(), sort_keys=False), "config.yaml"
        )
        flat = config.flat()
        # The trial's swept values first (MLflow keeps the order of a batch), then the rest.
        swept = [k for k in trial_config if k in flat]
        flat = {**{k: flat[k] for k in swept}, **flat}
        params = [Param(k, str(list(v) if isinstance(v, tuple) else v)) for k, v in flat.items()]
        for i in range(0, len(params), _BATCH):
            self.client.log_batch(state.run_id, params=params[i : i + _BATCH])
        state.params = True

    def _set_running(self, state: TrialState) -> None:
        self.client.set_tag(state.run_id, "sweep.status", "RUNNING")
        state.status = "RUNNING"
        # A trial restored after its summary had set its final status: that tag is RUNNING now,
        # so its end must write the status again (found by tests/test_chaos.py)
        state.status_logged = None

    def _count_redo(self, state: TrialState, trial) -> None:
        """Steps (and training seconds) a restored trial will train again: from its checkpoint
        to the last step MLflow holds."""
        logged = state.last_step(-1)
        if logged < 0:
            return
        restored = getattr(trial, "latest_checkpoint_result", None)
        metrics = getattr(restored, "metrics", None) or {}
        from_step = int(metrics.get("step", 0))
        self.redone["trials"] += 1
        self.redone["steps"] += max(0, logged - from_step)
        if state.elapsed is not None:
            seconds = state.elapsed - float(metrics.get("time/elapsed_s", 0.0))
            self.redone["seconds"] += max(0.0, seconds)

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

    def _log_summary(self, state: TrialState, result: dict[str, Any], trial_id: str) -> None:
        if state.summary:
            return
        summary = {
            k: float(result[k])
            for k in result
            if (k in SUMMARY_KEYS or k.startswith("best/"))
            and isinstance(result[k], int | float)
            and not isinstance(result[k], bool)
        }
        step = int(result.get("steps", state.last_step(0)))
        reason = str(result["stopped_reason"])
        # The summary is a trial's last report: its final status goes in the same write.
        status = _STATUS.get(reason, "TERMINATED")
        state.summary, state.stopped_reason, state.status_logged = True, reason, status
        tags = {"sweep.stopped_reason": reason, "sweep.status": status, SUMMARY_TAG: REAL}
        if "final_weights" in result:  # which weights the test sets measured: best or last
            tags["sweep.final_weights"] = str(result["final_weights"])
        self._send(_summary_record(trial_id, state.not_logged(summary, step), step, tags))

    def _log_fallback_summary(
        self, state: TrialState, trial_id: str, config: dict[str, Any], trial, reason: str
    ) -> None:
        """Sizes from the config (no model built) for trials that never returned a summary: a
        stand-in (``SUMMARY_TAG``), which a summary from train() replaces."""
        summary: dict[str, float] = {}
        if self.describe is not None:
            sizes = self.describe(self.resolve(config))
            summary = {k: float(sizes[k]) for k in SUMMARY_KEYS if k in sizes}
        last = trial.last_result or {}
        step = state.last_step(0)
        # describe() plans the whole run; what was spent is the steps actually trained.
        for key in ("steps", "tokens", "flops"):
            summary.pop(key, None)
        if step > 0:
            summary["steps"] = float(step)
            if self.describe is not None:
                summary["tokens"] = float(step * sizes["tokens_per_step"])
                summary["flops"] = float(step * sizes["flops_per_step"])
        if isinstance(last.get("time_total_s"), int | float):
            summary["wall_time_s"] = float(last["time_total_s"])
        summary = {k: v for k, v in summary.items() if math.isfinite(v)}
        state.stopped_reason = reason
        tags = {"sweep.stopped_reason": reason, SUMMARY_TAG: STAND_IN}
        summary = state.not_logged(summary, step)
        self._send(_summary_record(trial_id, summary, step, tags))

    def _end_child(
        self,
        state: TrialState,
        status: str,
        run_status: str,
        trial_id: str,
        tags: dict[str, str] | None = None,
    ) -> None:
        state.status = status
        if not tags and state.status_logged == status:
            tags = {}  # the summary's write set it already
        else:
            tags = {**(tags or {}), "sweep.status": status}
        record = {"op": "end", "trial": trial_id, "tags": tags, "run_status": run_status}
        self._send({**record, "what": f"end of {trial_id}"})

    def _end_run(self, state: TrialState, tags: dict[str, str], run_status: str) -> None:
        from mlflow.entities import RunTag

        # The metric writes before this one are delivered (the outbox keeps order), so the
        # run's history in MLflow is the whole curve the convergence label is read from.
        status = tags.get("sweep.status", state.status or "")
        label = self._convergence(state.run_id, status, state.stopped_reason)
        tags = {**tags, CONVERGENCE_TAG: label}
        self.client.log_batch(state.run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        self.client.set_terminated(state.run_id, status=run_status)

    def _send_model(
        self, state: TrialState, trial, trial_id: str, member: int | None = None
    ) -> None:
        """The trial's final model (model.pt with its config) as the child run's ``model/``
        artifact: copied out of Tune's storage now, uploaded through the outbox. ``member``:
        its position in the pack whose checkpoint holds it (packed sweeps)."""
        checkpoint = getattr(trial, "checkpoint", None)
        if self.model_dir is None or checkpoint is None:
            return
        from arith.checkpoint import export_model

        folder = self.model_dir / trial_id
        try:
            with checkpoint.as_directory() as local:
                export_model(local, folder, member)
        except Exception as err:  # a model lost must not stop the sweep; say so
            print(f"warning: no model for {trial_id}: {one_line(err)}", file=sys.stderr)
            return
        self._send(
            {"op": "model", "trial": trial_id, "folder": str(folder),
             "what": f"model of {trial_id}"}
        )  # fmt: skip

    def _convergence(self, run_id: str, status: str, stopped_reason: str | None) -> str:
        """The trial's sweeps.analysis.convergence label, from its metric history in MLflow."""
        import pandas as pd

        from sweeps.analysis.convergence import MONITORED, classify, monitored_metric

        records = [
            (name, m.step, m.value)
            for name in dict.fromkeys([self.metric, *MONITORED])
            if name is not None
            for m in self.client.get_metric_history(run_id, name)
        ]
        curves = pd.DataFrame.from_records(records, columns=["metric", "step", "value"])
        name = monitored_metric(curves, self.metric)
        rows = curves[curves["metric"] == name]
        history = list(zip(rows["step"], rows["value"], strict=True))
        return classify(history, status, stopped_reason, metric=name or "val/exact_match")

    def _log_parent_figures(self, record: Record) -> None:
        """The metrics and params of ``record`` the parent run does not hold yet (MLflow is the
        truth: a resumed sweep ends again, or replays the journal), and its tags."""
        from mlflow.entities import Param

        run_id = record["run_id"]
        held = self.client.get_run(run_id).data
        metrics = {k: v for k, v in record["metrics"].items() if k not in held.metrics}
        params = [Param(k, v) for k, v in record["params"].items() if k not in held.params]
        self._log_metrics(run_id, metrics, 0, record["tags"])
        for i in range(0, len(params), _BATCH):
            self.client.log_batch(run_id, params=params[i : i + _BATCH])

    def _log_text(self, run_id: str, text: str, name: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / name
            path.write_text(text)
            self.client.log_artifact(run_id, str(path))


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

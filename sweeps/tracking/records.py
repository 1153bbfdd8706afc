"""MLflow from the driver: a parent run per sweep and a nested child run per trial.

Trials never talk to MLflow; they report to Tune, and the driver's callback
(``sweeps.tracking.tracker``, the one module here that knows Tune) hands each of Tune's events
on as plain values (a trial's id, its config, its results) to ``SweepRecords``, which turns
them into records, the only writes there are. That keeps SQLite usable as the default store
and the bookkeeping in one place:

- MLflow is the source of truth. A resumed sweep (``attach``, ``sweeps.tracking.replay``)
  reads what every child run holds; a result's metrics are logged only for keys whose last
  step is before the result's, so a trial restored from a checkpoint, or a whole sweep
  restored after its driver was killed, never logs a (key, step) pair twice and never gets a
  second child run.
- Records go through an ordered buffer (``sweeps.tracking.outbox.Outbox``) whose writer thread
  delivers them, so a slow store never holds up Tune's event loop; when the store is
  unreachable, they wait in order and are retried, with a bounded wait at the end of the sweep,
  so a short outage loses nothing and does not stop the trials. Whatever a record needs from a
  folder Tune deletes (a checkpoint) is copied out before it is queued; reads of MLflow that
  depend on earlier writes run in the record's ``apply``, in order (a trial's metric history
  for its convergence label), or after ``outbox.flush``/``drain`` on the driver.
  ``sweeps.tracking.writer`` carries each out; each is journaled in the output folder until
  it is delivered, and ``replay`` delivers those a killed driver left there.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from arith.cli import one_line
from sweeps.spec.identity import POINT_KEY, identity_tags
from sweeps.spec.packing import PACK_KEY, Member, member_trial_id
from sweeps.spec.seed_trials import SEED_KEY, seed_points, seed_trial_id
from sweeps.tracking.outbox import Record
from sweeps.tracking.replay import attach_sweep, count_redo, replay_journal
from sweeps.tracking.state import TrialState
from sweeps.tracking.summary import final_status, real_summary, stand_in_summary
from sweeps.tracking.writer import MLflowWriter

# Reported keys without a namespace that are still training metrics (the rest are Tune's own).
PLAIN_METRICS = ("epoch", "lr")


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


class SweepRecords:
    """A sweep's runs in MLflow, fed its trials' events as plain values (see the module
    docstring).

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
        seeds: list[int] | None = None,
        figures_step: int = 0,
    ) -> None:
        # The one writer to MLflow: it also holds the parent run and each trial's state.
        self.writer = MLflowWriter(tracking_uri, experiment_name, resolve, metric)
        self.resolve = resolve
        self.describe = describe
        self.drain_timeout_s = drain_timeout_s
        # Where each finished trial's model is copied out of its checkpoint before its upload.
        self.model_dir = model_dir
        # A packed sweep's packs (sweeps.spec.packing): each Tune trial is a pack, each member a
        # trial of its own here, with the id and child run it would have had unpacked.
        self.packs = packs
        # Optuna's trials over seeds (sweeps.spec.seed_trials): each seed a trial of its own here.
        self.seeds = seeds
        # The step of the sweep's figures on the parent run: its --extend round (0 before any).
        self.figures_step = figures_step
        # Work a restored trial did again: steps and training seconds since its checkpoint.
        self.redone = {"trials": 0, "steps": 0, "seconds": 0.0}
        # The status a --resume found on the parent (KILLED: Ctrl-C; None: no resume).
        self.resumed_from: str | None = None
        self.journal = journal
        self.outbox = self.writer.outbox(journal)

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its callbacks, and these records with them: unsent writes stay behind
        # (and the writer's client).
        return {**self.__dict__, "outbox": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.outbox = self.writer.outbox(self.journal)

    # ---- what the driver and the tests read: the writer's ----
    @property
    def client(self):
        return self.writer.client

    @property
    def tracking_uri(self) -> str:
        return self.writer.tracking_uri

    @property
    def parent_run_id(self) -> str | None:
        return self.writer.parent_run_id

    @property
    def trials(self) -> dict[str, TrialState]:
        return self.writer.trials

    # ---- the parent run ----
    def start_parent(self, spec_yaml: str, tags: dict[str, str] | None = None) -> str:
        """Create the sweep's parent run (once) and attach the spec; returns its run id."""
        if self.parent_run_id is not None:
            return self.parent_run_id
        parent_run_id = self.writer.create_parent(tags or {})
        self.log_spec(spec_yaml)
        return parent_run_id

    def log_spec(self, spec_yaml: str) -> None:
        """The spec as the parent run's ``spec.yaml`` (an extended sweep's replaces the first).
        Through the outbox: a server that goes away right after creating the run must not hold
        up the trials (the spec waits for it like any other write)."""
        spec = {"op": "spec", "run_id": self.parent_run_id, "text": spec_yaml}
        self._send({**spec, "what": "the sweep's spec"})

    def attach(self, parent_run_id: str) -> None:
        """Continue the sweep of ``parent_run_id``: its child runs and what they hold (read
        once what is queued is delivered: the writer thread must not write meanwhile)."""
        self.outbox.flush()
        self.resumed_from = attach_sweep(self.writer, parent_run_id)

    def replay(self) -> int:
        """Deliver the writes a killed driver left in the journal (``replay_journal``); returns
        how many were read. Call after ``attach``, before Tune restarts the trials."""
        return replay_journal(self.journal, self.trials, self.outbox)

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
        (the writer checks what the parent run holds), so an end of sweep done again on resume
        adds nothing twice."""
        record = {"op": "parent", "run_id": self.parent_run_id, "metrics": metrics}
        record["step"] = self.figures_step
        self._send({**record, "params": params or {}, "tags": tags or {}, "what": what})

    # ---- a trial's events ----
    def units(
        self, trial_id: str, config: dict[str, Any]
    ) -> list[tuple[str, dict[str, Any], int | None]]:
        """What trial ``trial_id`` with Tune's ``config`` is to MLflow: itself (``(trial_id,
        config, None)``), or in a packed sweep each member of its pack (``(member's trial id,
        member's config, position)``)."""
        if POINT_KEY in config:  # an --extend's trial: its point is one key's value
            return [(trial_id, dict(config[POINT_KEY]), None)]
        if self.seeds is not None:
            points = seed_points(dict(config), self.seeds)
            return [(seed_trial_id(trial_id, p[SEED_KEY]), p, i) for i, p in enumerate(points)]
        if self.packs is None:
            return [(trial_id, dict(config), None)]
        members = self.packs[config[PACK_KEY]]
        return [(member_trial_id(trial_id, m), m.point, i) for i, m in enumerate(members)]

    def trial_started(
        self, trial_id: str, config: dict[str, Any], restored: dict[str, Any] | None = None
    ) -> None:
        """A trial (re)starts; ``restored``: the metrics of the checkpoint it restarts from."""
        for unit_id, unit_config, _ in self.units(trial_id, config):
            self._start(unit_id, unit_config, restored)

    def trial_reported(self, trial_id: str, config: dict[str, Any], result: dict) -> None:
        """A trial's result: its new metrics at the result's step, or train()'s summary."""
        if self.packs is None and self.seeds is None:
            self._result(trial_id, result)
            return
        for unit_id, _, i in self.units(trial_id, config):
            if str(i) in result.get("members", {}):
                self._result(unit_id, result["members"][str(i)])

    def trial_completed(
        self,
        trial_id: str,
        config: dict[str, Any],
        last_result: dict | None = None,
        checkpoint: Path | None = None,
        budget_spent: bool = False,
    ) -> None:
        """A trial ended without an error: its status, its model and diagnostics from the
        local folder ``checkpoint`` (if any). One that ended without train()'s summary was
        stopped by the scheduler (ASHA) or, ``budget_spent``, by the sweep's time budget."""
        for unit_id, unit_config, i in self.units(trial_id, config):
            state = self.trials.get(unit_id)
            if state is None:
                continue
            if state.summary:
                status = final_status(state.stopped_reason)
            else:
                status = "TERMINATED" if budget_spent else "EARLY_STOPPED"
                reason = "time_budget" if budget_spent else "scheduler"
                self._log_fallback_summary(state, unit_id, unit_config, last_result, reason)
            if checkpoint is not None:
                self._send_files(checkpoint, unit_id, unit_config, i)
            self._end_child(state, status, "FINISHED", unit_id)

    def trial_errored(
        self,
        trial_id: str,
        config: dict[str, Any],
        last_result: dict | None = None,
        error_file: str | None = None,
        checkpoint: Path | None = None,
    ) -> None:
        """A trial failed (``error_file``: where Tune keeps its traceback); one that failed
        before it started still gets its child run. A pack's member that had finished (its
        summary in) keeps its end, and its model from ``checkpoint``: the pack's error came
        after it."""
        for unit_id, unit_config, i in self.units(trial_id, config):
            if unit_id not in self.trials:
                self._start(unit_id, unit_config, None)
            state = self.trials[unit_id]
            if i is not None and state.summary:
                if checkpoint is not None:
                    self._send_files(checkpoint, unit_id, unit_config, i)
                self._end_child(state, final_status(state.stopped_reason), "FINISHED", unit_id)
                continue
            if not state.summary:
                self._log_fallback_summary(state, unit_id, unit_config, last_result, "error")
            tags = {"sweep.error_file": error_file or ""}
            self._end_child(state, "ERROR", "FAILED", unit_id, tags)

    def end_unfinished(self) -> None:
        """End KILLED the runs of trials that started and have not ended (a sweep stopped by
        Ctrl-C); ``--resume`` sets them running again and carries them on."""
        for trial_id, state in self.trials.items():
            if state.status == "RUNNING":
                self._end_child(state, "KILLED", "KILLED", trial_id)

    # ---- records, carried out (now or after an outage) by the writer ----
    def _send(self, record: Record, journaled: bool = False) -> None:
        self.outbox.send(record, journaled)

    def _start(self, trial_id: str, config: dict[str, Any], restored: dict | None) -> None:
        state = self.trials.get(trial_id)
        setup = {"op": "setup", "trial": trial_id, "config": config}
        if state is None:
            state = self.trials[trial_id] = TrialState()
            # Created with what makes it this trial, for a later --extend (sweeps.spec.identity).
            tags = identity_tags(self.resolve(config))
            child = {"op": "child", "trial": trial_id, "tags": tags}
            self._send({**child, "what": f"child run of {trial_id}"})
            self._send({**setup, "what": f"params of {trial_id}"})
        elif not state.params:  # created, but its driver died before the params went out
            self._send({**setup, "what": f"params of {trial_id}"})
        else:  # a retry or a restored sweep: the same run carries on
            count_redo(self.redone, state, restored or {})
            self._send({"op": "running", "trial": trial_id, "what": f"status of {trial_id}"})
            # A trial restored after its summary had set its final status: that tag is
            # RUNNING now, so its end must write the status again.
            state.status, state.status_logged = "RUNNING", None
        # Marked here, as metrics are once queued: the writer thread delivers the params before
        # anything of this trial queued after them (or they wait, in order, in the journal).
        state.params = True

    def _result(self, trial_id: str, result: dict[str, Any]) -> None:
        state = self.trials.get(trial_id)
        if state is None:
            return
        if "stopped_reason" in result:  # the trainable's last report: train()'s summary
            record = real_summary(state, result, trial_id)
            if record is not None:
                self._send(record)
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

    def _log_fallback_summary(
        self,
        state: TrialState,
        trial_id: str,
        config: dict[str, Any],
        last_result: dict | None,
        reason: str,
    ) -> None:
        """A stand-in summary (sizes from the config, no model built) for a trial that never
        returned one."""
        sizes = self.describe(self.resolve(config)) if self.describe is not None else None
        wall_time_s = (last_result or {}).get("time_total_s")
        self._send(stand_in_summary(state, trial_id, sizes, wall_time_s, reason))

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

    def _send_files(
        self, checkpoint: Path, trial_id: str, config: dict[str, Any], member: int | None = None
    ) -> None:
        """The trial's final model (``model/``) and diagnostics (the run's root), copied out of
        ``checkpoint`` now (gone once Tune's hook returns); their figures drawn (about 0.3 s a
        trial) and uploaded by the outbox's writer thread, off Tune's loop. ``member``: its
        place in the pack whose checkpoint holds it."""
        if self.model_dir is None:
            return
        from arith.training import diagnostics
        from arith.training.checkpoint import export_model
        from sweeps.analysis.plot_diagnostics import trial_title

        folder = self.model_dir / trial_id
        extra = self.model_dir.parent / "diagnostics" / trial_id
        try:
            export_model(checkpoint, folder, member)
        except Exception as err:  # a model lost must not stop the sweep; say so
            print(f"warning: no model for {trial_id}: {one_line(err)}", file=sys.stderr)
            folder = None
        try:
            numbers = diagnostics.export(checkpoint, extra, member)
        except Exception as err:  # nor diagnostics lost
            print(f"warning: no diagnostics for {trial_id}: {one_line(err)}", file=sys.stderr)
            numbers = []
        if folder is not None:
            self._send(
                {"op": "model", "trial": trial_id, "folder": str(folder),
                 "what": f"model of {trial_id}"}
            )  # fmt: skip
        if numbers:
            self._send(
                {"op": "files", "trial": trial_id, "folder": str(extra),
                 "draw": [str(path) for path in numbers], "what": f"diagnostics of {trial_id}",
                 "title": trial_title(self.writer.experiment_name, trial_id,
                                      self.resolve(config).flat())}
            )  # fmt: skip

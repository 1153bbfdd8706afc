"""A resumed sweep picks up what MLflow holds, then what a killed driver left in the journal.

MLflow is the source of truth. ``attach_sweep`` finds the sweep's parent run and the child run of
every trial (tag ``sweep.trial_id``) and, per child, the last step logged of every metric, so
that a trial restored from a checkpoint never logs a (key, step) pair twice and never gets a
second child run. ``replay_journal`` then delivers the writes that waited in the journal when the
driver died during an outage, each filtered by what MLflow holds like any other write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sweeps.tracking.outbox import Outbox, Record, read_journal
from sweeps.tracking.state import TrialState, is_real_summary
from sweeps.tracking.writer import MLflowWriter


def attach_sweep(writer: MLflowWriter, parent_run_id: str) -> str:
    """Point ``writer`` at the sweep of ``parent_run_id``: its child runs and what they hold;
    the parent run is RUNNING again. Returns its status before: KILLED where Ctrl-C stopped the
    sweep, RUNNING where its driver died without ending it."""
    from sweeps.analysis.collect import child_runs

    client = writer.client
    writer.parent_run_id = parent_run_id
    parent = client.get_run(parent_run_id)
    before = parent.info.status
    writer.experiment_id = parent.info.experiment_id
    writer.trials = {}
    for run in child_runs(client, parent):
        trial_id = run.data.tags.get("sweep.trial_id")
        if trial_id is not None:
            writer.trials[trial_id] = held_state(run)
    client.set_terminated(parent_run_id, status="RUNNING")
    return before


def held_state(run) -> TrialState:
    """A trial's state as its child run ``run`` holds it."""
    return TrialState(
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


def count_redo(redone: dict[str, float], state: TrialState, metrics: dict[str, Any]) -> None:
    """Add to ``redone`` the steps (and training seconds) a restored trial will train again:
    from its checkpoint (whose reported ``metrics`` say where it was) to the last step MLflow
    holds."""
    logged = state.last_step(-1)
    if logged < 0:
        return
    from_step = int(metrics.get("step", 0))
    redone["trials"] += 1
    redone["steps"] += max(0, logged - from_step)
    if state.elapsed is not None:
        seconds = state.elapsed - float(metrics.get("time/elapsed_s", 0.0))
        redone["seconds"] += max(0.0, seconds)


def replay_journal(journal: Path | None, trials: dict[str, TrialState], outbox: Outbox) -> int:
    """Deliver the writes a killed driver left in ``journal``, in order, each skipped or cut
    down to what MLflow (read by ``attach_sweep`` into ``trials``) does not hold yet; returns
    how many were read. Call after ``attach_sweep``, before Tune restarts the trials."""
    records = read_journal(journal) if journal is not None else []
    missing = [still_missing(trials, record) for record in records]
    # All queued before any is tried: the journal is cut down only once all are delivered.
    outbox.enqueue([record for record in missing if record is not None], journaled=True)
    outbox.flush()
    outbox.settle_journal()
    return len(records)


def still_missing(trials: dict[str, TrialState], record: Record) -> Record | None:
    """The part of a journaled write that MLflow does not hold yet, or None (``trials`` is
    updated as if it were delivered, as a live write updates it)."""
    op, trial_id = record["op"], record.get("trial")
    if trial_id is None:
        return record
    state = trials.get(trial_id)
    if op == "child":
        if state is not None:
            return None
        trials[trial_id] = TrialState()
        return record
    if state is None:  # its child run was never journaled: nothing to attach it to
        return None
    if op == "setup":
        return None if state.params else record
    if op == "running":
        return None  # Tune sets a trial it restarts running again
    if op in ("model", "files"):  # uploading them again replaces the same files
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

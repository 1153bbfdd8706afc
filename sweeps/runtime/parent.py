"""The sweep's parent run in MLflow: a new one, whose id and spec are saved in the output
folder for ``--resume``, or the one a resumed sweep continues."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sweeps.analysis.store import STATE_FILE, read_state, write_atomic
from sweeps.spec.sweep_spec import SweepSpec


def start_parent(
    tracker, spec: SweepSpec, out_dir: Path, placement=None, experiment: str | None = None
) -> str:
    """A new sweep's parent run; its id, the spec and the ``placement``
    (``sweeps.runtime.placement``) are saved in ``out_dir`` for --resume and --extend, with
    its Tune ``experiment`` folder, the one --overwrite may delete
    (``sweeps.runtime.earlier``)."""
    out_dir.mkdir(parents=True, exist_ok=True)  # the journal's folder, before any write waits
    if tracker.journal is not None:  # an earlier sweep's undelivered writes are not this one's
        tracker.journal.unlink(missing_ok=True)
    parent_id = tracker.start_parent(spec.to_yaml())
    write_atomic(out_dir / "spec.yaml", spec.to_yaml())  # --resume reads it: never half of it
    state = {"sweep": spec.name, "parent_run_id": parent_id, "tracking_uri": tracker.tracking_uri}
    if placement is not None:
        state["placement"] = placement.to_state()
    if experiment is not None:
        state["experiments"] = [experiment]
    write_atomic(out_dir / STATE_FILE, json.dumps(state, indent=1) + "\n")
    return parent_id


def attach(tracker, parent_id: str, out_dir: Path | None = None, placement=None) -> None:
    """Continue the parent run, first delivering the writes a killed driver left waiting; a
    ``placement`` decided now (a folder from before they were saved) is saved in ``out_dir``."""
    if out_dir is not None and placement is not None:
        state = read_state(out_dir)
        if state and "placement" not in state:
            state["placement"] = placement.to_state()
            write_atomic(out_dir / STATE_FILE, json.dumps(state, indent=1) + "\n")
    tracker.attach(parent_id)
    replayed = tracker.replay()
    if replayed:
        print(f"mlflow: {replayed} writes left waiting by the last run replayed", file=sys.stderr)

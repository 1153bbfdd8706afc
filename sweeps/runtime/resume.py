"""How ``--resume`` finds the sweep it continues (the checks before Ray starts call it:
``sweeps.runtime.preflight``).

- ``parent_to_resume``: the parent run a ``--resume`` continues (the id saved in ``sweep.json``,
  which must be in the store; without one, the newest unfinished parent of the experiment), or
  a one-line reason why there is nothing to resume.
- ``can_resume``: whether Tune's state of the current experiment is there to restore
  (``sweeps.runtime.state.tune_name`` names it).
- ``repair_snapshot``: a snapshot whose copy a killed driver cut short is copied again from
  the driver's staging folder, and the trial decisions it held for saves that died with the
  driver are dropped (``sweeps.cluster.tunefix``).
- ``quiet_unstarted_trials``: Tune's warning about trials that never started, left out.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from sweeps.analysis.store import STATE_FILE, masked
from sweeps.runtime.state import SweepError, experiment_dir, read_state, tune_name
from sweeps.spec.sweep_spec import SweepSpec


class UnstartedTrialsFilter:
    """Drops Tune's "Failed to fetch metrics" warning on --resume when every trial it lists has
    no result file yet. Every trial is made up front (``sweeps.runtime.tuning``), so a driver
    killed early leaves trials that never started; Tune, restoring, reads the result files of
    all of them and warns about those, which simply start now."""

    def filter(self, record) -> bool:
        message = record.getMessage()
        if not message.startswith("Failed to fetch metrics for "):
            return True
        listed = message.splitlines()[1:]
        unstarted = "both result.json and progress.csv were not found"
        return not (listed and all(unstarted in line for line in listed))


def quiet_unstarted_trials() -> None:
    import logging

    logging.getLogger("ray.tune.analysis.experiment_analysis").addFilter(UnstartedTrialsFilter())


def parent_to_resume(
    spec: SweepSpec, out_dir: Path, tracking_uri: str, storage: str | None = None
) -> str:
    """The id of the parent run to continue; SweepError when there is nothing to resume.
    ``storage``: Tune's storage path when not the default ``out_dir/ray``. A sweep stopped
    before Tune saved anything (a Ctrl-C or a kill while it started) resumes by starting its
    trials afresh under its parent run (``forget_unsaved_trials``)."""
    saved_by_tune = _tune_can_restore(experiment_dir(spec, out_dir, storage))
    if not saved_by_tune and not read_state(out_dir).get("parent_run_id"):
        raise SweepError(
            f"--resume: nothing to resume in {out_dir}: no saved state of sweep {spec.name!r} "
            "there (run without --resume to start it)"
        )
    saved = out_dir / "spec.yaml"
    if saved.is_file():
        difference = first_difference(yaml.safe_load(saved.read_text(encoding="utf-8")), spec.raw)
        if difference:
            raise SweepError(
                f"--resume: {difference} differs from the spec the sweep started with ({saved}); "
                "resume with the same spec and --set values"
            )
    parent = _find_parent(spec.name, out_dir, tracking_uri)
    if parent.info.status == "FINISHED":
        raise SweepError(
            f"--resume: sweep {spec.name!r} in {out_dir} already finished (parent run "
            f"{parent.info.run_id}); nothing to resume"
        )
    if not saved_by_tune:
        forget_unsaved_trials(spec, out_dir, storage, tracking_uri, parent)
    return parent.info.run_id


def forget_unsaved_trials(
    spec: SweepSpec, out_dir: Path, storage: str | None, tracking_uri: str, parent
) -> None:
    """Before trials start afresh under ``parent``: what a start that Tune never saved left
    (its experiment folder, child runs of trials Tune would not know) goes, so that no trial
    is recorded twice."""
    from mlflow import MlflowClient

    from sweeps.analysis.collect import child_runs
    from sweeps.cluster import storage as storage_fs

    storage_fs.delete_dir(experiment_dir(spec, out_dir, storage))
    client = MlflowClient(tracking_uri)
    orphans = child_runs(client, parent, left_out=True)
    for run in orphans:
        client.delete_run(run.info.run_id)
    what = f"; {len(orphans)} trial runs it never saved deleted" if orphans else ""
    print(
        f"--resume: sweep {spec.name!r} stopped before Tune saved its state: its trials start "
        f"afresh under parent run {parent.info.run_id}{what}",
        file=sys.stderr,
    )


def repair_snapshot(spec: SweepSpec, out_dir: Path, storage: str | None) -> dict[str, str]:
    """Copy Tune's snapshot again where a killed driver cut its copy short
    (``sweeps.cluster.tunefix.finish_sync``), then drop the decisions it held for saves that died
    with the driver (``forget_decisions_in_flight``); {what: what was done}. Local storage
    only."""
    from sweeps.cluster import tunefix

    if storage and "://" in storage:
        return {}
    root = Path(storage).expanduser().resolve() if storage else out_dir / "ray"
    done = {}
    experiment = root / tune_name(spec, out_dir)
    if tunefix.finish_sync(experiment):
        done["experiment state"] = "copied again from the driver's staging folder"
    if tunefix.forget_decisions_in_flight(experiment):
        done["trial decisions"] = "those waiting on saves the last driver never finished dropped"
    return done


def can_resume(spec: SweepSpec, out_dir: Path, storage: str | None = None) -> bool:
    """Whether Tune's state of the sweep's current experiment is there to restore."""
    return _tune_can_restore(experiment_dir(spec, out_dir, storage))


def _tune_can_restore(experiment_dir: str | Path) -> bool:
    """Tune's own check (tuner.pkl) plus, on a local path, a snapshot of the trials: a driver
    killed before the first snapshot left nothing that names its trials."""
    local = None if "://" in str(experiment_dir) else Path(experiment_dir)
    if local is not None and not local.is_dir():
        return False
    from ray import tune

    if not tune.Tuner.can_restore(str(experiment_dir)):
        return False
    return local is None or any(local.glob("experiment_state-*.json"))


def _find_parent(name: str, out_dir: Path, tracking_uri: str):
    """The parent run that ``sweep.json`` names; without one (a folder from before it was
    written), the newest unfinished parent of the experiment."""
    from mlflow import MlflowClient

    from sweeps.analysis.collect import newest_parent

    client = MlflowClient(tracking_uri)
    state = read_state(out_dir)
    if state.get("parent_run_id"):
        return saved_parent(client, state, out_dir / STATE_FILE, tracking_uri)
    experiment = client.get_experiment_by_name(name)
    parent = None
    if experiment is not None:
        parent = newest_parent(client, experiment.experiment_id, unfinished=True)
    if parent is None:
        raise SweepError(
            f"--resume: no unfinished sweep {name!r} in MLflow at {masked(tracking_uri)} "
            "(use the --tracking-uri of the first run)"
        )
    return parent


def saved_parent(
    client, state: dict[str, Any], saved: Path, tracking_uri: str, flag: str = "--resume"
):
    """The parent run ``saved`` names, or SweepError (after ``flag``): never another sweep's
    parent of the same name in this store, whose trials this folder's checkpoints are not."""
    from mlflow.exceptions import MlflowException

    run_id = state["parent_run_id"]
    try:
        run = client.get_run(run_id)
    except MlflowException as err:
        if err.error_code != "RESOURCE_DOES_NOT_EXIST":
            reason = " ".join(str(err.message).split())[:200]
            raise SweepError(
                f"{flag}: cannot read parent run {run_id} from MLflow at {masked(tracking_uri)} "
                f"({reason})"
            ) from None
        run = None
    if run is None or run.info.lifecycle_stage == "deleted":
        first = state.get("tracking_uri")
        logged = (
            f" (the first run logged to {masked(first)})" if first and first != tracking_uri else ""
        )
        raise SweepError(
            f"{flag}: parent run {run_id}, named in {saved}, is not in MLflow at "
            f"{masked(tracking_uri)}{logged}; pass the --tracking-uri of the store that holds it, "
            "or start over with --overwrite"
        )
    return run


def first_difference(old: Any, new: Any, path: str = "") -> str | None:
    """The first dotted path where two parsed specs differ (``space.model.d_model``), or None."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in list(old) + [k for k in new if k not in old]:
            where = f"{path}.{key}" if path else str(key)
            if key not in old or key not in new:
                return where
            found = first_difference(old[key], new[key], where)
            if found:
                return found
        return None
    return None if old == new else (path or "the spec")

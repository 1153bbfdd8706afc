"""What a sweep checks before Ray starts, and how ``--resume`` finds the sweep it continues.

- ``preflight``: an MLflow server that cannot be reached is one line within seconds (bounded
  retries and timeout), before any trial could start.
- ``start_parent``: a new sweep's parent run; its id and the spec go into the output folder
  (``sweep.json``, ``spec.yaml``), so a resumed sweep finds them even without Tune's state.
- ``parent_to_resume``: the parent run a ``--resume`` continues (the id saved in ``sweep.json``,
  which must be in the store; without one, the newest unfinished parent of the experiment), or
  a one-line reason why there is nothing to resume.
- ``tune_name``: the Tune experiment a ``--resume`` continues, the sweep's own or, after an
  ``--extend``, that round's (``sweeps.runtime.extend``), as ``sweep.json`` names it.
- ``repair_snapshot``: a snapshot whose copy a killed driver cut short is copied again from
  the driver's staging folder, and the trial decisions it held for saves that died with the
  driver are dropped (``sweeps.cluster.tunefix``).
- ``attach``: the resumed sweep's tracker, with the MLflow writes a killed driver left waiting.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from arith.cli import one_line
from sweeps.analysis.collect import STATE_FILE
from sweeps.analysis.store import sqlite_file, write_atomic
from sweeps.spec.sweep_spec import SweepSpec

# Bounded MLflow HTTP calls: without these a dead server blocks each call for minutes
# (7 retries with exponential backoff), stalling the driver and with it every trial.
HTTP_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


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


class SweepError(Exception):
    """A reason not to start (str(err) is the one line shown after ``error: ``)."""


def is_http(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def preflight(tracking_uri: str) -> None:
    """Raise SweepError if the tracking store cannot be used; bounds MLflow's HTTP calls."""
    if is_http(tracking_uri):
        for name, value in HTTP_ENV.items():
            os.environ.setdefault(name, value)
        from mlflow import MlflowClient

        try:
            MlflowClient(tracking_uri).search_experiments(max_results=1)
        except Exception as err:  # whatever it is, the sweep cannot log
            reason = one_line(err, 200)
            raise SweepError(
                f"--tracking-uri: cannot reach the MLflow server at {tracking_uri} ({reason}); "
                "start it or pass another --tracking-uri"
            ) from None
    elif (db := sqlite_file(tracking_uri)) is not None and not db.parent.is_dir():
        raise SweepError(f"--tracking-uri: no folder {db.parent} for the SQLite store")


def start_parent(tracker, spec: SweepSpec, out_dir: Path) -> str:
    """A new sweep's parent run; its id and the spec are saved in ``out_dir`` for --resume."""
    out_dir.mkdir(parents=True, exist_ok=True)  # the journal's folder, before any write waits
    if tracker.journal is not None:  # an earlier sweep's undelivered writes are not this one's
        tracker.journal.unlink(missing_ok=True)
    parent_id = tracker.start_parent(spec.to_yaml())
    (out_dir / "spec.yaml").write_text(spec.to_yaml(), encoding="utf-8")
    state = {"sweep": spec.name, "parent_run_id": parent_id, "tracking_uri": tracker.tracking_uri}
    write_atomic(out_dir / STATE_FILE, json.dumps(state, indent=1) + "\n")
    return parent_id


def attach(tracker, parent_id: str) -> None:
    """Continue the parent run, first delivering the writes a killed driver left waiting."""
    tracker.attach(parent_id)
    replayed = tracker.replay()
    if replayed:
        print(f"mlflow: {replayed} writes left waiting by the last run replayed", file=sys.stderr)


def parent_to_resume(
    spec: SweepSpec, out_dir: Path, tracking_uri: str, storage: str | None = None
) -> str:
    """The id of the parent run to continue; SweepError when there is nothing to resume.
    ``storage``: Tune's storage path when not the default ``out_dir/ray``."""
    if not _tune_can_restore(experiment_dir(spec, out_dir, storage)):
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
    return parent.info.run_id


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


def tune_name(spec: SweepSpec, out_dir: Path) -> str:
    """The name (folder) of the Tune experiment a --resume continues: the sweep's own, or after
    an --extend that round's (``sweeps.runtime.extend``), as ``sweep.json`` names it."""
    return read_state(out_dir).get("tune_name") or spec.name


def extend_tune_name(name: str, round_: int) -> str:
    """The Tune experiment of --extend round ``round_`` (1, 2, ...) of sweep ``name``."""
    return f"{name}-extend{round_}"


def experiment_dir(spec: SweepSpec, out_dir: Path, storage: str | None = None) -> str:
    """Where that Tune experiment lies: in ``storage``, else in ``out_dir/ray``."""
    root = storage.rstrip("/") if storage else str(out_dir / "ray")
    return f"{root}/{tune_name(spec, out_dir)}"


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
            f"--resume: no unfinished sweep {name!r} in MLflow at {tracking_uri} "
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
                f"{flag}: cannot read parent run {run_id} from MLflow at {tracking_uri} ({reason})"
            ) from None
        run = None
    if run is None or run.info.lifecycle_stage == "deleted":
        first = state.get("tracking_uri")
        logged = f" (the first run logged to {first})" if first and first != tracking_uri else ""
        raise SweepError(
            f"{flag}: parent run {run_id}, named in {saved}, is not in MLflow at "
            f"{tracking_uri}{logged}; pass the --tracking-uri of the store that holds it, "
            "or start over with --overwrite"
        )
    return run


def read_state(out_dir: Path) -> dict[str, Any]:
    """The sweep's ``sweep.json`` in ``out_dir`` ({} when there is none)."""
    try:
        return json.loads((out_dir / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


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


def earlier_sweep(spec: SweepSpec, out_dir: Path, storage: str | None = None) -> str | None:
    """Where an earlier run of this sweep left its state (its output folder, or Tune's
    experiment folder in ``storage``), or None: a fresh sweep must not mix with it."""
    if (out_dir / STATE_FILE).is_file():
        return str(out_dir)
    if storage:
        experiment_dir = f"{storage.rstrip('/')}/{spec.name}"
        if "://" in storage:
            from ray import tune

            return experiment_dir if tune.Tuner.can_restore(experiment_dir) else None
        local = Path(experiment_dir)
    else:
        local = out_dir / "ray" / spec.name
    return str(local) if local.is_dir() and any(local.iterdir()) else None


def refuse_earlier(spec: SweepSpec, where: str, out_dir: Path, tracking_uri: str) -> SweepError:
    """The one line for a sweep started again where an earlier one lies: continue it with
    --resume (unless it finished), or start over with --overwrite."""
    status = ""
    state = read_state(out_dir)
    if state.get("parent_run_id"):
        try:
            from mlflow import MlflowClient

            run = MlflowClient(tracking_uri).get_run(state["parent_run_id"])
            status = f", parent run {run.info.run_id} {run.info.status.lower()}"
        except Exception:  # another store, or gone: the folder alone is reason enough
            status = f", parent run {state['parent_run_id']}"
    overwrite = "start over with --overwrite (deletes that sweep's outputs and checkpoints; "
    overwrite += "its MLflow runs stay)"
    if status.endswith("finished"):
        advice = f"{overwrite}, train only its new trials with --extend, or pass another --out"
    else:
        advice = f"continue it with --resume, or {overwrite}"
    return SweepError(f"sweep {spec.name!r} already ran in {where}{status}; {advice}")


def check_removable(spec: SweepSpec, out_dir: Path) -> None:
    """Raise SweepError unless --overwrite may delete ``out_dir``: it does not exist, or this
    project wrote it for this sweep (its ``sweep.json`` names the sweep; one written before
    sweep.json held the name: its ``spec.yaml`` does)."""
    if not out_dir.exists():
        return
    named = read_state(out_dir).get("sweep")
    if named is None and (out_dir / "spec.yaml").is_file():
        try:
            saved = yaml.safe_load((out_dir / "spec.yaml").read_text(encoding="utf-8"))
            named = saved["sweep"]["name"]
        except (OSError, yaml.YAMLError, KeyError, TypeError):
            named = None
    if named != spec.name:
        raise SweepError(
            f"--overwrite: {out_dir} is not a folder of sweep {spec.name!r} (no {STATE_FILE} "
            "naming it), so nothing was deleted; remove it yourself or pass another --out"
        )


def remove_earlier(spec: SweepSpec, out_dir: Path, storage: str | None = None) -> None:
    """--overwrite: delete an earlier run's output folder and Tune experiment folders (the
    sweep's, and one per --extend round); ``check_removable`` said the folder is the sweep's."""
    import shutil

    rounds = int(read_state(out_dir).get("extend_round", 0))
    shutil.rmtree(out_dir, ignore_errors=True)
    if not storage:
        return
    names = [spec.name] + [extend_tune_name(spec.name, k) for k in range(1, rounds + 1)]
    for name in names:
        experiment = f"{storage.rstrip('/')}/{name}"
        if "://" in storage:
            import pyarrow.fs

            filesystem, path = pyarrow.fs.FileSystem.from_uri(experiment)
            if filesystem.get_file_info(path).type != pyarrow.fs.FileType.NotFound:
                filesystem.delete_dir(path)
        else:
            shutil.rmtree(experiment, ignore_errors=True)

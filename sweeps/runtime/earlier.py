"""An earlier sweep where a new one would start (its folder, or its Tune experiment in the
storage): refused in one line, or with ``--overwrite`` removed, but only a folder this project
wrote for that sweep."""

from __future__ import annotations

from pathlib import Path

import yaml

from sweeps.analysis.store import STATE_FILE
from sweeps.runtime.state import SweepError, read_state
from sweeps.spec.sweep_spec import SweepSpec


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
    """--overwrite: delete an earlier run's output folder and the Tune experiments its
    ``sweep.json`` names as its own (``check_removable`` said the folder is the sweep's);
    another sweep's experiment in a shared storage, even one named like an --extend round of
    this one, stays. A folder from before they were named: the sweep's own experiment."""
    import shutil

    from sweeps.cluster import storage as storage_fs

    experiments = read_state(out_dir).get("experiments")
    shutil.rmtree(out_dir, ignore_errors=True)
    if experiments is None:
        experiments = [f"{storage.rstrip('/')}/{spec.name}"] if storage else []
    for experiment in experiments:
        storage_fs.delete_dir(experiment)

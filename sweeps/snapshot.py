"""Repair of Tune's experiment snapshot before ``--resume``, so that no trial is lost.

Tune snapshots the experiment (``experiment_state-*.json``) now and then, while every trial keeps
only its newest ``num_to_keep`` checkpoints and deletes the older ones as new ones arrive. A
driver killed between two snapshots therefore leaves a snapshot that may name, as a trial's
checkpoint, one that is already gone; Tune then fails the trial ("Could not recover from
checkpoint as it does not exist on storage anymore") and the rest of its training is lost.

``repair`` points each such trial at the newest checkpoint that still exists and that the driver
had received (named in the trial's ``result.json``, written by the driver: a checkpoint it names
was completely uploaded), or at none, so the trial starts again. Either way MLflow holds no
duplicate: the tracker logs only steps after the last one MLflow has (``sweeps.tracking``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from arith.checkpoint import FILE as CHECKPOINT_FILE

_FALLBACK = "CLOUDPICKLE_FALLBACK"  # how Tune's JSON encoder stores objects (the manager)


def newest_snapshot(experiment_dir: Path) -> Path | None:
    """The snapshot Tune restores from: the newest by name (names carry the start time)."""
    found = sorted(experiment_dir.glob("experiment_state-*.json"))
    return found[-1] if found else None


def named_checkpoints(experiment_dir: Path) -> dict[str, tuple[str, str | None]]:
    """{trial_id: (status, the checkpoint path the newest snapshot restores it from)}."""
    path = newest_snapshot(experiment_dir)
    if path is None:
        return {}
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:  # being written by Tune (it writes in place)
        return {}
    named = {}
    for trial_json, metadata_json in state["trial_data"]:
        trial, blob = json.loads(trial_json), json.loads(metadata_json).get("checkpoint_manager")
        latest = _unpickle(blob["value"])._latest_checkpoint_result if blob else None
        named[trial["trial_id"]] = (trial["status"], latest and latest.checkpoint.path)
    return named


def repair(experiment_dir: Path) -> dict[str, str]:
    """Rewrite the newest snapshot so that every trial's checkpoint exists; returns
    {"trial <id>" or "experiment state": what was done} for what it changed. Local storage
    only (a URI is left as it is: Tune's own behaviour)."""
    path = newest_snapshot(experiment_dir)
    if path is None:
        return {}
    changed: dict[str, str] = {}
    if _finish_sync(experiment_dir, path):
        changed["experiment state"] = "copied again from the driver's staging folder"
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:  # cut short, and no complete copy: Tune's restore says so itself
        return changed
    for pair in state["trial_data"]:
        trial = json.loads(pair[0])
        metadata = json.loads(pair[1])
        manager_blob = metadata.get("checkpoint_manager")
        if not isinstance(manager_blob, dict) or manager_blob.get("_type") != _FALLBACK:
            continue
        manager = _unpickle(manager_blob["value"])
        latest = manager._latest_checkpoint_result
        if latest is None or _complete(latest.checkpoint.path):
            continue
        replacement = _newest_received(experiment_dir, trial, latest)
        manager._checkpoint_results = [
            r for r in manager._checkpoint_results if _complete(r.checkpoint.path)
        ]
        if replacement is not None:
            manager._checkpoint_results.append(replacement)
            done = f"restored from {Path(replacement.checkpoint.path).name} instead"
        else:
            done = "restarted (no checkpoint left)"
        manager._latest_checkpoint_result = replacement
        metadata["checkpoint_manager"] = {"_type": _FALLBACK, "value": _pickle(manager)}
        pair[1] = json.dumps(metadata, indent=2)
        gone = Path(latest.checkpoint.path).name
        changed[f"trial {trial['trial_id']}"] = f"{gone} is gone: {done}"
    if [k for k in changed if k.startswith("trial ")]:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state), encoding="utf-8")
        os.replace(tmp, path)
    return changed


def _finish_sync(experiment_dir: Path, path: Path) -> bool:
    """Tune writes its snapshot (state, searcher, callbacks) in the driver's staging folder
    under Ray's session folder, then copies the files into the experiment folder, not
    atomically: a driver killed during the copy leaves some files cut short or older than the
    others. The staging folder outlives the kill; when its snapshot is complete and the copy
    differs, copy it again. True if it did."""
    ray_tmp = Path(os.environ.get("RAY_TMPDIR", tempfile.gettempdir())) / "ray"
    pattern = f"session_*/artifacts/*/{experiment_dir.name}/driver_artifacts/{path.name}"
    staged = sorted(ray_tmp.glob(pattern), key=lambda p: p.stat().st_mtime)
    if not staged:
        return False
    staging = staged[-1].parent
    try:
        json.loads(staged[-1].read_text(encoding="utf-8"))
    except ValueError:  # killed while Tune wrote it: the experiment folder's copy is older
        return False
    files = [f for f in staging.iterdir() if f.is_file()]
    differs = [
        f
        for f in files
        if not (experiment_dir / f.name).is_file()
        or (experiment_dir / f.name).read_bytes() != f.read_bytes()
    ]
    for f in differs:
        tmp = experiment_dir / f"{f.name}.tmp"
        shutil.copyfile(f, tmp)
        os.replace(tmp, experiment_dir / f.name)
    return bool(differs)


def _complete(path: str) -> bool:
    return (Path(path) / CHECKPOINT_FILE).is_file()


def _newest_received(experiment_dir: Path, trial: dict[str, Any], gone):
    """The newest complete checkpoint of the trial that the driver received, as Tune's
    (checkpoint, metrics) record; None if there is none."""
    from ray.train._internal.session import _TrainingResult
    from ray.tune import Checkpoint

    trial_dir = Path(gone.checkpoint.path).parent
    if not trial_dir.is_dir():
        trial_dir = experiment_dir / trial.get("relative_logdir", "")
    received = {}
    result_file = trial_dir / "result.json"
    if result_file.is_file():
        for line in result_file.read_text(encoding="utf-8").splitlines():
            try:
                result = json.loads(line)
            except ValueError:
                break  # a line being written when the driver died
            name = result.get("checkpoint_dir_name")
            if name:
                received[name] = result
    for name in sorted(received, reverse=True):  # checkpoint_000012: names sort by index
        if _complete(str(trial_dir / name)):
            checkpoint = Checkpoint(str(trial_dir / name), filesystem=gone.checkpoint.filesystem)
            return _TrainingResult(checkpoint=checkpoint, metrics=received[name])
    return None


def _unpickle(hex_text: str):
    # The snapshot is this sweep's own output folder's, written by Tune on this machine.
    import cloudpickle

    return cloudpickle.loads(bytes.fromhex(hex_text))


def _pickle(value) -> str:
    import cloudpickle

    return cloudpickle.dumps(value).hex()

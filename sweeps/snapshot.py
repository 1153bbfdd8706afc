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

``repair`` also sets Tune's trial generator back in step with the trial list
(``align_searcher``): saved apart from it, it may be ahead (a trial lost) or behind (trials made
twice), with live trials that hold every concurrent slot (a resumed sweep that waits forever).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from arith.checkpoint import FILE as CHECKPOINT_FILE
from sweeps.outbox import plain_number

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
        latest = _unpickle_hex(blob["value"])._latest_checkpoint_result if blob else None
        named[trial["trial_id"]] = (trial["status"], latest and latest.checkpoint.path)
    return named


def repair(experiment_dir: Path, seed: int | None = None) -> dict[str, str]:
    """Rewrite the newest snapshot so that every trial's checkpoint exists and the trial
    generator agrees with the trial list (``align_searcher``; ``seed``: the sweep's); returns
    {"trial <id>", "experiment state" or "search state": what was done} for what it changed.
    Local storage only (a URI is left as it is: Tune's own behaviour)."""
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
    aligned = align_searcher(experiment_dir, state, seed)
    if aligned:
        changed["search state"] = aligned
    for pair in state["trial_data"]:
        trial = json.loads(pair[0])
        metadata = json.loads(pair[1])
        manager_blob = metadata.get("checkpoint_manager")
        if not isinstance(manager_blob, dict) or manager_blob.get("_type") != _FALLBACK:
            continue
        manager = _unpickle_hex(manager_blob["value"])
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
        metadata["checkpoint_manager"] = {"_type": _FALLBACK, "value": _pickle_hex(manager)}
        pair[1] = json.dumps(metadata, indent=2)
        gone = Path(latest.checkpoint.path).name
        changed[f"trial {trial['trial_id']}"] = f"{gone} is gone: {done}"
    if [k for k in changed if k.startswith("trial ")]:
        _write_atomic(path, json.dumps(state).encode("utf-8"))
    return changed


def align_searcher(
    experiment_dir: Path, state: dict[str, Any], seed: int | None = None
) -> str | None:
    """Make the search state Tune restores agree with the snapshot's trial list; returns what
    was done, or None when they agree (or the searcher is not Tune's variant generator).

    Tune saves the trial list (``experiment_state-*.json``) and the variant generator
    (``basic-variant-state-*.json``) one after the other, copies them to the experiment folder
    in the background, and each resumed driver saves under a new name; a driver killed in
    between leaves a generator ahead of the trial list or behind it, and Tune restores each
    from its newest file. Ahead, the trials it made after the list was saved never run (a CI
    chaos run lost one); behind, it makes trials again under ids that exist. Either way its set
    of live trials names trials that finished or that no list holds, and while that set is full
    (``sweep.max_concurrent``) it makes no trial at all: the resumed sweep waits forever (a CI
    resume run timed out). tests/test_resume.py pins both.

    The fix replays Tune's own generation, from the newest saved generator not ahead of the
    list or else from the start (``seed``: the sweep's, which Tune's draws start from), up to
    the list's last trial, checking each trial made against the list's; then the live trials
    are the list's unfinished ones."""
    files = sorted(experiment_dir.glob("basic-variant-state-*.json"), reverse=True)
    newest = _searcher_state(files[0]) if files else None
    if newest is None:
        return None
    prefix = newest["_uuid_prefix"]
    listed = [json.loads(pair[0]) for pair in state["trial_data"]]
    ours = sorted(
        (t for t in listed if t["trial_id"].startswith(prefix)),
        key=lambda t: int(t["trial_id"].removeprefix(prefix)),
    )
    if [t["trial_id"] for t in ours] != [f"{prefix}{i:05d}" for i in range(len(ours))]:
        return None  # not one generator's trials in order: left to Tune
    live = {t["trial_id"] for t in ours if t["status"] != "TERMINATED"}
    made = newest["_iterators"][0].counter
    if made == len(ours) and newest["_live_trials"] == live:
        return None
    older = (_searcher_state(path) for path in files[1:])
    for searcher in (newest, *older, _from_start(newest, seed)):
        if searcher is None or searcher["_uuid_prefix"] != prefix:
            continue
        iterator = searcher["_iterators"][0]
        if iterator.counter > len(ours):
            continue
        expected = [(t["experiment_tag"], t["evaluated_params"]) for t in ours[iterator.counter :]]
        if _replay(iterator, len(ours) - iterator.counter) != expected:
            continue
        searcher["_live_trials"] = live
        searcher["_finished"] = False  # the generator says so again when it runs out
        _write_atomic(files[0], _pickle(searcher))
        return (
            f"the trial generator had made {made} trials and counted "
            f"{len(newest['_live_trials'])} live; set to the trial list's {len(ours)} "
            f"and {len(live)}"
        )
    return (
        f"the trial generator had made {made} trials, the trial list holds {len(ours)}, and "
        "no replay of it matches the list: trials may be missing"
    )


def _from_start(state: dict[str, Any], seed: int | None) -> dict[str, Any] | None:
    """The generator as the sweep built it, before its first trial (its draws start at
    ``seed``); None without a seed."""
    if seed is None:
        return None
    import copy

    from ray.tune.search.sample import _BackwardsCompatibleNumpyRng

    fresh = copy.deepcopy(state)
    iterator = fresh["_iterators"][0]
    fresh["_random_state"] = iterator.random_state = _BackwardsCompatibleNumpyRng(seed)
    iterator.counter = 0
    iterator.num_samples_left = iterator.num_samples
    iterator.variants = None
    return fresh


def _searcher_state(path: Path) -> dict[str, Any] | None:
    """A saved variant generator of the one shape sweeps builds (one eager grid or sample
    iterator, no preset points), or None."""
    try:
        state = _unpickle(path.read_bytes())
    except Exception:  # cut short or foreign: Tune's restore deals with it
        return None
    iterators = state.get("_iterators") if isinstance(state, dict) else None
    if not iterators or len(iterators) != 1 or iterators[0].lazy_eval:
        return None
    if state.get("_points_to_evaluate") or iterators[0].points_to_evaluate:
        return None
    return state


def _replay(iterator, n: int) -> list[tuple[str, dict[str, Any]]]:
    """Advance Tune's trial iterator by ``n`` trials through its own generation (grid order and
    random draws are Tune's), making of each trial only its tag and its values as the trial
    list holds them."""
    from ray.tune.search.basic_variant import _flatten_resolved_vars
    from ray.tune.search.variant_generator import format_vars

    made: list[tuple[str, dict[str, Any]]] = []

    def describe_only(resolved_vars, spec):
        tag = str(iterator.counter)
        if resolved_vars:
            tag += f"_{format_vars(resolved_vars)}"
        values = json.loads(json.dumps(_flatten_resolved_vars(resolved_vars), default=plain_number))
        made.append((tag, values))
        iterator.counter += 1

    iterator.create_trial = describe_only
    try:
        for _ in range(n):
            next(iterator)
    except StopIteration:
        pass
    finally:
        del iterator.create_trial
    return made


def _write_atomic(path: Path, data: bytes) -> None:
    """``data`` as ``path`` in one rename: a kill leaves the old file or the new one."""
    tmp = path.with_name(f".{path.name}.tmp")  # a dot: never matched by Tune's file patterns
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _finish_sync(experiment_dir: Path, path: Path) -> bool:
    """Tune writes its snapshot (state, searcher, callbacks) in the driver's staging folder
    under Ray's session folder, then copies the files into the experiment folder, not
    atomically: a driver killed during the copy leaves some files cut short or older than the
    others. The staging folder outlives the kill; when its snapshot is complete and the copy
    differs, copy it again. True if it did."""
    staged = staged_copies(experiment_dir, path.name)
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
        _write_atomic(experiment_dir / f.name, f.read_bytes())
    return bool(differs)


def staged_copies(experiment_dir: Path, name: str) -> list[Path]:
    """The copies of snapshot file ``name`` in the drivers' staging folders under Ray's session
    folders, oldest first."""
    ray_tmp = Path(os.environ.get("RAY_TMPDIR", tempfile.gettempdir())) / "ray"
    pattern = f"session_*/artifacts/*/{experiment_dir.name}/driver_artifacts/{name}"
    return sorted(ray_tmp.glob(pattern), key=lambda p: p.stat().st_mtime)


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


def _unpickle_hex(hex_text: str):
    return _unpickle(bytes.fromhex(hex_text))


def _unpickle(data: bytes):
    # The snapshot is this sweep's own output folder's, written by Tune on this machine.
    import cloudpickle

    return cloudpickle.loads(data)


def _pickle_hex(value) -> str:
    return _pickle(value).hex()


def _pickle(value) -> bytes:
    import cloudpickle

    return cloudpickle.dumps(value)

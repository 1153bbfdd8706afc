"""``--extend``: a sweep that already ran, run again with a changed spec (one more grid value,
one more seed), trains only the trials it has not finished before.

A trial of the new spec is *the same* as a child run of the sweep's parent when both have the
same resolved run config and the same ``arith`` code (``sweeps.spec.identity``, tags of every
child run). A finished child run (MLflow status FINISHED: ``sweep.status`` TERMINATED,
DIVERGED or EARLY_STOPPED with train()'s own summary; not ERROR, not cut off by a killed
driver, ASHA or the time budget) is reused as it is: it
stays under the same parent run, reopened, and is never written to again, so no metric step is
logged twice. Across a code change it is reused only with ``--reuse-stale``, which the tables'
caption then says (``sweeps.spec.identity.code_note``).

Every other child run is left out of the sweep, not deleted: tag ``sweep.left_out`` (its value
says why: a grid value the spec no longer has, a trial that did not finish and is trained
again as a new child run, other code) keeps it out of ``trials.csv``, the tables and the best
trial (``sweeps.analysis.collect.child_runs``); a later ``--extend`` that wants it back removes
the tag.

The trials to train run as a new Tune experiment, ``<name>-extend<round>`` beside the first
(``sweeps.runtime.state.tune_name``), a grid over exactly those points under one key
(``sweeps.spec.identity.POINT_KEY``; Tune's ``points_to_evaluate`` raises on list-valued
points), so a killed ``--extend`` goes on with ``--resume`` like any sweep. The
parent run's figures (``best/...``, ``trials/...``) are logged again at step ``round``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeps.analysis.store import LEFT_OUT_TAG
from sweeps.runtime import resume
from sweeps.runtime.preflight import check_store
from sweeps.runtime.state import SweepError, extend_tune_name, read_state
from sweeps.spec.identity import CODE_TAG, CONFIG_KEY_TAG, code_fingerprint, config_key
from sweeps.spec.sweep_spec import SweepSpec

NOT_IN_SPEC = "not in the spec of --extend round {round}"
NOT_FINISHED = "did not finish: trained again in --extend round {round}"
NO_KEY = f"logged without {CONFIG_KEY_TAG}: its trial is trained again in --extend round {{round}}"
DUPLICATE = "another finished run of this trial is used from --extend round {round}"
OTHER_CODE = "trained by other arith code ({code}): trained again in --extend round {round}"


@dataclass(frozen=True)
class ChildRun:
    """What ``--extend`` reads of one child run of the sweep."""

    run_id: str
    trial_id: str
    key: str | None  # sweep.config_key; None on runs logged before it existed
    code: str | None  # sweep.code
    finished: bool
    left_out: str | None = None  # the sweep.left_out tag it has now


@dataclass
class Split:
    """The trials of the extended spec: reused child runs and points to train, and the child
    runs left out of the sweep (run id -> why)."""

    reused: list[tuple[dict[str, Any], ChildRun]] = field(default_factory=list)
    stale: list[ChildRun] = field(default_factory=list)  # reused across a code change
    train: list[dict[str, Any]] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)


def split(
    wanted: list[tuple[dict[str, Any], str]],
    runs: list[ChildRun],
    code: str,
    *,
    round_: int,
    reuse_stale: bool = False,
) -> Split:
    """Match each wanted ``(point, config key)`` with a finished child run of that key (one run
    per trial, so repeats of one config need as many runs); same code first, then, with
    ``reuse_stale``, other code. The points left over are trained; the runs left over are out
    of the sweep."""
    result = Split()
    free = [r for r in sorted(runs, key=lambda r: r.trial_id) if r.finished and r.key]
    passes = [lambda r: r.code == code] + ([lambda r: r.code != code] if reuse_stale else [])
    matched: dict[int, ChildRun] = {}
    for same_code in passes:
        for i, (_, key) in enumerate(wanted):
            if i in matched:
                continue
            run = next((r for r in free if r.key == key and same_code(r)), None)
            if run is not None:
                free.remove(run)
                matched[i] = run
    for i, (point, _) in enumerate(wanted):
        if i in matched:
            result.reused.append((point, matched[i]))
            if matched[i].code != code:
                result.stale.append(matched[i])
        else:
            result.train.append(point)
    used = {run.run_id for run in matched.values()}
    wanted_keys = {key for _, key in wanted}
    trained_keys = {key for i, (_, key) in enumerate(wanted) if i not in matched}
    for run in runs:
        if run.run_id in used:
            continue
        if run.key is None:
            why = NO_KEY
        elif run.key not in wanted_keys:
            why = NOT_IN_SPEC
        elif run.key not in trained_keys:  # its trial is reused from another run
            why = DUPLICATE
        elif not run.finished:
            why = NOT_FINISHED
        else:
            why = OTHER_CODE
        result.left_out[run.run_id] = why.format(round=round_, code=run.code)
    return result


def check_grid(spec: SweepSpec) -> None:
    """--extend keys trials on their resolved configs: every trial must be a grid point."""
    s = spec.sweep
    sampled = [d.key for d in spec.space.values() if not d.is_grid]
    if s.search != "grid" or sampled:
        what = f"sweep.search: {s.search}" if s.search != "grid" else f"space.{sampled[0]}"
        raise SweepError(
            f"{what}: --extend needs a grid sweep (search grid, every space value a list): "
            "a sampled trial has no config to find again"
        )
    if s.pack != 1:
        raise SweepError(f"sweep.pack: {s.pack}: --extend trains trials one by one: pack 1")


def wanted_trials(spec: SweepSpec) -> list[tuple[dict[str, Any], str]]:
    """(point, config key) of every trial of the spec, in Tune's order, repeats included."""
    from sweeps.spec.space import resolve_run_config, tune_ordered_points

    points = tune_ordered_points(spec) * spec.sweep.num_samples
    return [(p, config_key(resolve_run_config(spec.base, p, spec.derived))) for p in points]


def ran_to_its_end(run_status: str, tags: dict[str, str]) -> bool:
    """Whether a child run holds a whole trial: FINISHED, not ERROR, and with train()'s own
    summary (a trial cut short by ASHA or the time budget ends FINISHED with a stand-in one)."""
    from sweeps.tracking.state import is_real_summary

    return (
        run_status == "FINISHED" and tags.get("sweep.status") != "ERROR" and is_real_summary(tags)
    )


def read_children(tracking_uri: str, parent_id: str) -> list[ChildRun]:
    """Every child run of the parent, those left out by an earlier --extend included."""
    from mlflow import MlflowClient

    from sweeps.analysis.collect import child_runs

    client = MlflowClient(tracking_uri)
    found = []
    for run in child_runs(client, client.get_run(parent_id), left_out=True):
        tags = run.data.tags
        found.append(
            ChildRun(
                run_id=run.info.run_id,
                trial_id=tags.get("sweep.trial_id", run.info.run_id),
                key=tags.get(CONFIG_KEY_TAG),
                code=tags.get(CODE_TAG),
                finished=ran_to_its_end(run.info.status, tags),
                left_out=tags.get(LEFT_OUT_TAG),
            )
        )
    return found


def plan(
    spec: SweepSpec, tracking_uri: str, parent_id: str, round_: int, *, reuse_stale: bool
) -> tuple[Split, list[ChildRun]]:
    """The split of this --extend and the child runs it was made from."""
    children = read_children(tracking_uri, parent_id)
    found = split(
        wanted_trials(spec), children, code_fingerprint(), round_=round_, reuse_stale=reuse_stale
    )
    return found, children


@dataclass(frozen=True)
class Extension:
    """One --extend: the parent run it reopens, its round, and its split of the trials."""

    parent_id: str
    round_: int
    split: Split
    children: list[ChildRun]


def begin(
    spec: SweepSpec, out_dir: Path, tracking_uri: str, storage: str | None, *, reuse_stale: bool
) -> Extension:
    """Find the sweep to extend, split its trials, print the split and save the round (before
    Ray starts; SweepError when there is nothing to extend)."""
    parent_id, round_ = parent_to_extend(spec, out_dir, tracking_uri, storage)
    found, children = plan(spec, tracking_uri, parent_id, round_, reuse_stale=reuse_stale)
    print_split(spec, found, round_)
    save_round(spec, out_dir, round_, len(found.train), storage)
    return Extension(parent_id, round_, found, children)


def preview(
    spec: SweepSpec, out_dir: Path, tracking_uri: str, storage: str | None, *, reuse_stale: bool
) -> str:
    """What ``--dry-run --extend`` adds to the dry run: the split, nothing written."""
    check_store(tracking_uri)
    parent_id, round_ = parent_to_extend(spec, out_dir, tracking_uri, storage)
    found, _ = plan(spec, tracking_uri, parent_id, round_, reuse_stale=reuse_stale)
    return "\n".join(describe_split(spec, found, round_))


def apply(spec: SweepSpec, tracker, extension: Extension) -> None:
    """Once the parent run is reopened: tag the child runs left out (with why), untag those
    back in, and give the parent the extended spec (the driver's writes, before Tune starts)."""
    client = tracker.client
    for run in extension.children:
        why = extension.split.left_out.get(run.run_id)
        if why is not None and run.left_out is None:
            client.set_tag(run.run_id, LEFT_OUT_TAG, why)
        elif why is None and run.left_out is not None:
            client.delete_tag(run.run_id, LEFT_OUT_TAG)
    tracker.log_spec(spec.to_yaml())


def describe_split(spec: SweepSpec, found: Split, round_: int) -> list[str]:
    """What --extend (and its dry run) prints: counts, then each trial reused, trained or left
    out."""
    from sweeps.runtime.dry_run import format_point

    code = code_fingerprint()
    lines = [
        f"extend {spec.name} (round {round_}): {len(found.reused)} trials reused, "
        f"{len(found.train)} to train, {len(found.left_out)} child runs left out of the tables"
    ]
    stale = {run.run_id for run in found.stale}
    for point, run in found.reused:
        note = ""
        if run.run_id in stale:
            note = f"  (trained by arith {run.code}, now {code}: --reuse-stale)"
        lines.append(f"  reuse  {run.trial_id}  {format_point(point)}  run {run.run_id}{note}")
    for i, point in enumerate(found.train):
        lines.append(f"  train  {i:05d}  {format_point(point)}")
    for run_id, why in found.left_out.items():
        lines.append(f"  left out  run {run_id}: {why}")
    if stale:
        lines.append(
            f"warning: {len(stale)} reused trials were trained by other arith code than this "
            f"({code}); the tables' caption says so"
        )
    other = sum(1 for why in found.left_out.values() if why.startswith("trained by other"))
    if other:
        lines.append(
            f"note: {other} finished trials were trained by other arith code and are trained "
            "again; --reuse-stale reuses them"
        )
    return lines


def print_split(spec: SweepSpec, found: Split, round_: int) -> None:
    print("\n".join(describe_split(spec, found, round_)), file=sys.stderr, flush=True)


def parent_to_extend(
    spec: SweepSpec, out_dir: Path, tracking_uri: str, storage: str | None = None
) -> tuple[str, int]:
    """(the parent run to extend, this --extend's round); SweepError when there is none, or
    when the sweep did not finish and --resume can continue it."""
    from mlflow import MlflowClient

    from sweeps.analysis.store import STATE_FILE

    check_grid(spec)
    state = read_state(out_dir)
    if not state.get("parent_run_id"):
        raise SweepError(
            f"--extend: nothing ran in {out_dir}: no sweep {spec.name!r} there to extend "
            "(run without --extend to start it)"
        )
    client = MlflowClient(tracking_uri)
    parent = resume.saved_parent(client, state, out_dir / STATE_FILE, tracking_uri, "--extend")
    if parent.info.status != "FINISHED" and resume.can_resume(spec, out_dir, storage):
        raise SweepError(
            f"--extend: sweep {spec.name!r} in {out_dir} did not finish (parent run "
            f"{parent.info.run_id} {parent.info.status.lower()}); continue it with --resume, "
            "then --extend"
        )
    return parent.info.run_id, int(state.get("extend_round", 0)) + 1


def save_round(
    spec: SweepSpec, out_dir: Path, round_: int, n_train: int, storage: str | None = None
) -> None:
    """``sweep.json`` and ``spec.yaml`` of the extended sweep, before anything else is written:
    a --resume then continues this round's Tune experiment with this spec, and --overwrite
    knows the experiment is this sweep's (``experiments``)."""
    import json

    from sweeps.analysis.store import STATE_FILE, write_atomic
    from sweeps.cluster.connection import storage_path

    state = read_state(out_dir)
    name = extend_tune_name(spec.name, round_)
    experiments = state.get("experiments", [])
    experiments.append(f"{storage_path(storage, out_dir).rstrip('/')}/{name}")
    state.update(
        extend_round=round_,
        tune_name=name,
        extend_trials=n_train,
        experiments=experiments,
    )
    write_atomic(out_dir / "spec.yaml", spec.to_yaml())
    write_atomic(out_dir / STATE_FILE, json.dumps(state, indent=1) + "\n")

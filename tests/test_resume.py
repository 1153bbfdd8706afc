"""``--resume`` after the driver is SIGKILLed, in the style of Ray Tune's own restore tests.

The smoke sweep runs as a real process; at points drawn by a seeded RNG (each after at least one
more trial result) the driver is killed with SIGKILL and the sweep resumed with ``--resume``.
After every kill the progress recorded in MLflow may only grow; at the end MLflow holds one child
run per trial, no (metric, step) pair twice, every evaluation step, and the table equals the one
of an uninterrupted run of the same configs and seeds.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from sweep_procs import (
    SMOKE,
    assert_no_duplicate_steps,
    children,
    kill,
    metric_steps,
    reference_trials,
    result_lines,
    start_sweep,
    wait_until,
)

from arith.checkpoint import FILE as CHECKPOINT_FILE
from sweeps.collect import render_tables
from sweeps.snapshot import named_checkpoints
from sweeps.spec import load_spec

pytestmark = pytest.mark.slow

SETS = ["base.train.max_steps=60"]
STEPS = [0, 10, 20, 30, 40, 50, 60]
KILLS = 2
# Metrics that are the same in any run of a config and seed (not timings or throughput).
EXACT = ("val/exact_match", "test/exact_match", "train/exact_match", "train/loss", "n_params")


def logged_progress(uri: str) -> set[tuple[str, int]]:
    """(trial_id, step) pairs of val/exact_match in MLflow: the sweep's recorded progress."""
    _, runs = children(uri, "smoke")
    return {
        (run.data.tags["sweep.trial_id"], step)
        for run in runs
        for step in metric_steps(uri, run).get("val/exact_match", [])
    }


@pytest.mark.parametrize("pack", [1, 2], ids=["unpacked", "packed"])
def test_driver_killed_at_random_points_then_resumed(tmp_path, pack):
    """``pack=2``: the same sweep in two packs of two (sweeps.packing), killed and resumed."""
    rng = random.Random(2024)
    sets = [*SETS, f"sweep.pack={pack}"]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    experiment_dir = tmp_path / "out" / "smoke" / "ray" / "smoke"

    def n_results() -> int:
        return sum(len(lines) for lines in result_lines(experiment_dir).values())

    lines_per_sweep = 4 // pack * (len(STEPS) + 1)  # Tune trials x (evaluations + summary)
    proc = start_sweep(tmp_path, uri, sets, log="run0")
    progress: set[tuple[str, int]] = set()
    kills = 0
    try:
        for round_ in range(KILLS):
            # at least one more result, and early enough that the kills land mid-sweep: a
            # packed sweep writes half the lines (two packs of two report as two trials)
            target = n_results() + rng.randint(1, lines_per_sweep // (KILLS + 2))
            if not wait_until(lambda t=target: n_results() >= t, 240, proc):
                break  # the sweep finished before this kill point
            kill(proc)
            kills += 1
            now = logged_progress(uri)
            assert progress <= now, "MLflow lost progress across a driver kill"
            progress = now
            proc = start_sweep(tmp_path, uri, sets, resume=True, log=f"run{round_ + 1}")
        proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            kill(proc)
    out = (tmp_path / f"run{kills}.out").read_text()
    err = (tmp_path / f"run{kills}.err").read_text()
    assert proc.returncode == 0, err[-3000:]
    assert kills == KILLS, "the sweep ended before every kill point"
    assert progress <= logged_progress(uri)

    parents, runs = children(uri, "smoke")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    trial_ids = [r.data.tags["sweep.trial_id"] for r in runs]
    assert len(trial_ids) == 4 and len(set(trial_ids)) == 4, trial_ids
    for run in runs:
        assert run.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert (run.data.tags["sweep.status"], run.info.status) == ("TERMINATED", "FINISHED")
        assert metric_steps(uri, run)["val/exact_match"] == STEPS
    pairs = assert_no_duplicate_steps(uri, runs)
    assert "restored from checkpoints:" in out

    # The table (and the final metrics of every trial) equal an uninterrupted run's.
    spec = load_spec(SMOKE, sets)
    trials = pd.read_csv(tmp_path / "out" / "smoke" / "trials.csv")
    reference = reference_trials(SETS, EXACT)
    keys = list(spec.space)
    merged = trials.merge(reference, on=keys, suffixes=("", "_ref"))
    assert len(merged) == 4
    for name in EXACT:
        # A Ray worker and this process round float32 losses differently in the last bit;
        # accuracies and counts are exact.
        expected = merged[f"{name}_ref"].tolist()
        if name.endswith("loss"):
            # A pack's batched matmuls round differently again (arith's tests: 1e-4).
            expected = pytest.approx(expected, rel=1e-6 if pack == 1 else 1e-4)
        assert merged[name].tolist() == expected, name
    table = (tmp_path / "out" / "smoke" / "table.md").read_text()
    assert table == render_tables(reference, spec.tables)
    redone = next(line for line in out.splitlines() if line.startswith("restored from"))
    print(f"\n{kills} driver kills survived; 4 trials, {pairs} (metric, step) pairs checked")
    print(f"last resume: {redone}")


def test_resume_with_nothing_to_resume_is_one_line(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = [sys.executable, "-m", "sweeps.run", str(SMOKE), "--out", str(tmp_path / "out")]
    result = subprocess.run(
        [*args, "--tracking-uri", uri, "--resume"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: --resume: nothing to resume in ")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "mlflow.db").exists()  # nothing logged


def test_checkpoints_named_by_the_snapshot_deleted_then_resumed(tmp_path):
    """The snapshot names checkpoints that are gone (as when num_to_keep deleted them after the
    last snapshot and the driver was killed): one trial still has an older checkpoint the driver
    received, the other none. The first is restored from it, the second restarted; both finish,
    each in its one child run, with every step once."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    experiment_dir = tmp_path / "out" / "smoke" / "ray" / "smoke"

    def restorable() -> dict[str, str]:
        """{trial: the checkpoint its snapshot names} of unfinished trials past their first."""
        return {
            trial_id: path
            for trial_id, (status, path) in named_checkpoints(experiment_dir).items()
            if status != "TERMINATED" and path and not path.endswith("checkpoint_000000")
        }

    def fallback(named: str) -> str | None:
        """The newest complete checkpoint besides ``named`` that the driver received (listed in
        result.json): what the repair restores from. Tune may have deleted the older one
        already (num_to_keep) and not yet logged the newer one when the driver died."""
        trial_dir = Path(named).parent
        lines = (trial_dir / "result.json").read_text(encoding="utf-8").splitlines()
        received = set()
        for line in lines:
            try:
                received.add(json.loads(line).get("checkpoint_dir_name"))
            except ValueError:
                break  # a line being written at the kill
        kept = [n for n in received if n and n != Path(named).name]
        kept = [n for n in kept if (trial_dir / n / CHECKPOINT_FILE).is_file()]
        return max(kept, default=None)

    def ready() -> bool:
        named = restorable()
        return len(named) >= 2 and any(fallback(p) for p in named.values())

    proc = start_sweep(tmp_path, uri, SETS, log="run0")
    try:
        assert wait_until(ready, 240, proc, every_s=0.05)
    finally:
        kill(proc)
    # Chosen after the kill: the trials may have moved on between the last poll and the kill.
    named = restorable()
    assert len(named) >= 2, named
    older = next((t for t, p in named.items() if fallback(p)), None)
    if older is None:  # every trial moved past its older checkpoint at the kill: all restart
        older = next(iter(named))
    none = next(t for t in named if t != older)
    restored_from = fallback(named[older])
    shutil.rmtree(named[older])
    for checkpoint in Path(named[none]).parent.glob("checkpoint_*"):
        shutil.rmtree(checkpoint)

    proc = start_sweep(tmp_path, uri, SETS, resume=True, log="run1")
    proc.wait(timeout=240)
    err = (tmp_path / "run1.err").read_text()
    assert proc.returncode == 0, err[-3000:]
    gone = f"trial {older}: {Path(named[older]).name} is gone: "
    if restored_from:
        assert f"{gone}restored from {restored_from}" in err, err[-3000:]
    else:
        assert f"{gone}restarted (no checkpoint left)" in err, err[-3000:]
    assert f"trial {none}: checkpoint_" in err and "is gone: restarted" in err
    parents, runs = children(uri, "smoke")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    trial_ids = {r.data.tags["sweep.trial_id"] for r in runs}
    assert len(runs) == 4 and len(trial_ids) == 4 and {older, none} <= trial_ids
    for run in runs:
        assert (run.data.tags["sweep.status"], run.info.status) == ("TERMINATED", "FINISHED")
        assert metric_steps(uri, run)["val/exact_match"] == STEPS
        assert "test/exact_match" in run.data.metrics
    assert_no_duplicate_steps(uri, runs)


def test_resume_when_the_trial_generator_is_ahead_of_the_trial_list(tmp_path):
    """Tune saves its trial list and its trial generator one after the other; a driver killed
    between them (or between their copies) leaves a generator that made a trial the list does
    not hold. Simulated here by taking the newest trial out of the saved list. Unrepaired, that
    trial never runs and, still counted live, holds one of the two concurrent slots for good
    (the CI run where a chaos sweep lost a trial, and one where a resumed sweep hung). The
    resume sets the generator back to the list: every trial runs, each in its one child run."""
    from sweeps.snapshot import newest_snapshot, repair, staged_copies

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    experiment_dir = tmp_path / "out" / "smoke" / "ray" / "smoke"

    def listed() -> list[dict]:
        path = newest_snapshot(experiment_dir)
        try:
            state = json.loads(path.read_text(encoding="utf-8")) if path else None
        except ValueError:  # being written
            return []
        return [json.loads(pair[0]) for pair in state["trial_data"]] if state else []

    def third_made() -> bool:
        trials = listed()
        return len(trials) >= 3 and any(t["status"] != "TERMINATED" for t in trials)

    proc = start_sweep(tmp_path, uri, SETS, log="run0")
    try:
        assert wait_until(third_made, 240, proc, every_s=0.05)
    finally:
        kill(proc)
    repair(experiment_dir)  # whatever the kill cut short, as --resume would; then the damage
    path = newest_snapshot(experiment_dir)
    state = json.loads(path.read_text(encoding="utf-8"))
    dropped = max(json.loads(pair[0])["trial_id"] for pair in state["trial_data"])
    state["trial_data"] = [
        pair for pair in state["trial_data"] if json.loads(pair[0])["trial_id"] != dropped
    ]
    # and in the driver's staging folder, which the repair copies back from (sweeps.snapshot)
    for copy in [path, *staged_copies(experiment_dir, path.name)]:
        copy.write_text(json.dumps(state), encoding="utf-8")

    proc = start_sweep(tmp_path, uri, SETS, resume=True, log="run1")
    proc.wait(timeout=240)
    err = (tmp_path / "run1.err").read_text()
    assert proc.returncode == 0, err[-3000:]
    assert "search state: the trial generator had made " in err, err[-3000:]
    parents, runs = children(uri, "smoke")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(runs) == 4 and len({r.data.tags["sweep.trial_id"] for r in runs}) == 4
    for run in runs:
        assert (run.data.tags["sweep.status"], run.info.status) == ("TERMINATED", "FINISHED")
        assert metric_steps(uri, run)["val/exact_match"] == STEPS
    assert_no_duplicate_steps(uri, runs)
    trials = pd.read_csv(tmp_path / "out" / "smoke" / "trials.csv")
    points = zip(trials["model.d_model"], trials["train.seed"], strict=True)
    assert sorted(points) == [(16, 0), (16, 1), (32, 0), (32, 1)]


def test_a_sweep_with_trials_missing_says_so():
    from sweeps.run import _missing_line

    spec = load_spec(SMOKE, [])
    ran = pd.DataFrame({"status": ["TERMINATED", "EARLY_STOPPED", "ERROR", "TERMINATED"]})
    assert _missing_line(spec, ran) is None
    lost = pd.DataFrame({"status": ["TERMINATED", "TERMINATED", "RUNNING"]})
    assert _missing_line(spec, lost) == (
        "warning: 2 of 4 trials finished; the others never ran to their end "
        "(their MLflow runs, if any, stay RUNNING)"
    )
    budget = load_spec(SMOKE, ["sweep.time_budget_s=60"])
    assert _missing_line(budget, lost) is None

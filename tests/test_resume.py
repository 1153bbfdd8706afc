"""``--resume`` after the driver is SIGKILLed, in the style of Ray Tune's own restore tests.

The smoke sweep runs as a real process; at points drawn by a seeded RNG (each after at least one
more trial result) the driver is killed with SIGKILL and the sweep resumed with ``--resume``.
After every kill the progress recorded in MLflow may only grow; at the end MLflow holds one child
run per trial, no (metric, step) pair twice, every evaluation step, and the table equals the one
of an uninterrupted run of the same configs and seeds.
"""

from __future__ import annotations

import itertools
import random
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from sweep_procs import (
    SMOKE,
    assert_no_duplicate_steps,
    children,
    fresh_store,
    kill,
    metric_steps,
    reference_trials,
    result_lines,
    start_sweep,
    wait_until,
)

from arith.training.checkpoint import FILE as CHECKPOINT_FILE
from sweeps.analysis.collect import render_tables
from sweeps.spec.sweep_spec import load_spec

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


def restored_from_a_checkpoint(experiment_dir: Path) -> bool:
    """Whether some trial went on from a checkpoint in a new worker: in its result file, a new
    pid whose first report is past step 0 (a trial started over would report step 0 again)."""
    for lines in result_lines(experiment_dir).values():
        for before, after in itertools.pairwise(lines):
            if after.get("pid") != before.get("pid") and after.get("step", 0) > 0:
                return True
    return False


@pytest.mark.parametrize("pack", [1, 2], ids=["unpacked", "packed"])
def test_driver_killed_at_random_points_then_resumed(tmp_path, pack):
    """``pack=2``: the same sweep in two packs of two (sweeps.spec.packing), killed and resumed."""
    rng = random.Random(2024)
    sets = [*SETS, f"sweep.pack={pack}"]
    uri = fresh_store(tmp_path / "mlflow.db")
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
    err = (tmp_path / f"run{kills}.err").read_text()
    # Some resume restored a trial from its checkpoint (the last may find none in progress, and
    # a resume killed in turn prints nothing: Tune's result files say it for every resume).
    outs = [(tmp_path / f"run{i}.out").read_text() for i in range(1, kills + 1)]
    restored = restored_from_a_checkpoint(experiment_dir)
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
    assert restored or any("restored from checkpoints:" in text for text in outs), outs

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
    # Only a report: a resume killed in turn, or one finding no trial in progress, prints none.
    redone = next(
        (line for text in outs for line in text.splitlines() if line.startswith("restored from")),
        "no 'restored from' line printed (the result files show the restore)",
    )
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


def received_checkpoints(experiment_dir: Path) -> dict[str, list[str]]:
    """Trial directory -> the checkpoints the driver received (named in its result.json)."""
    return {
        name: [line["checkpoint_dir_name"] for line in lines if line.get("checkpoint_dir_name")]
        for name, lines in result_lines(experiment_dir).items()
    }


def test_a_driver_killed_mid_trial_leaves_every_trial_and_checkpoint(tmp_path):
    """Two ways Tune lost work when the driver was killed, checked on one kill (one at a time
    here, the first trial past its third checkpoint):

    - Tune deletes checkpoints past ``num_to_keep`` between two snapshots of the experiment, so
      a killed driver left a snapshot naming a checkpoint that was gone, and the trial failed on
      --resume. The sweep keeps them all: every checkpoint the driver received is still there.
    - Tune's variant generator, given a concurrency limit, made trials as others finished and
      saved itself apart from the trial list; a driver killed between the two saves left a
      generator that lost a trial or, counting live trials that were not, waited forever on
      --resume (a CI chaos run and a CI resume run). The sweep makes every trial up front and
      keeps sweep.max_concurrent through resources (tests/test_tunefix.py): the snapshot taken
      while the first trial runs already lists all four.

    The resumed sweep finishes every trial, each in its one child run, every step once."""
    from ray.tune import ExperimentAnalysis

    from sweeps.cluster import tunefix

    uri = fresh_store(tmp_path / "mlflow.db")
    experiment_dir = tmp_path / "out" / "smoke" / "ray" / "smoke"
    sets = [*SETS, "sweep.max_concurrent=1"]

    def a_snapshot_and_a_trial_past_three_checkpoints() -> bool:
        received = received_checkpoints(experiment_dir).values()
        snapshot = any(experiment_dir.glob("experiment_state-*.json"))
        return snapshot and any(len(names) >= 3 for names in received)

    proc = start_sweep(tmp_path, uri, sets, log="run0")
    try:
        assert wait_until(a_snapshot_and_a_trial_past_three_checkpoints, 240, proc, every_s=0.05)
    finally:
        kill(proc)
    received = received_checkpoints(experiment_dir)
    for trial_dir, names in received.items():
        for name in names:
            checkpoint = experiment_dir / trial_dir / name / CHECKPOINT_FILE
            assert checkpoint.is_file(), (trial_dir, name)
    # a kill during Tune's copy into the experiment folder cuts that copy short (a CI run read
    # an empty one): --resume copies it again from the driver's staging folder first, and so
    # does this read (tests/test_tunefix.py covers the copy)
    tunefix.finish_sync(experiment_dir)
    listed = ExperimentAnalysis(str(experiment_dir)).trials
    assert len(listed) == 4, [t.trial_id for t in listed]

    proc = start_sweep(tmp_path, uri, sets, resume=True, log="run1")
    proc.wait(timeout=240)
    err = (tmp_path / "run1.err").read_text()
    assert proc.returncode == 0, err[-3000:]
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
    for trial_dir, names in received_checkpoints(experiment_dir).items():
        assert len(names) >= len(STEPS)  # one per evaluation (checkpoint_every_s: 0)
        # the sweep finished: each trial keeps its last checkpoint only (its model is in MLflow)
        kept = sorted(p.name for p in (experiment_dir / trial_dir).glob("checkpoint_*"))
        assert kept == [names[-1]], (trial_dir, kept)
        assert (experiment_dir / trial_dir / names[-1] / CHECKPOINT_FILE).is_file()


def test_a_sweep_with_trials_missing_says_so():
    from sweeps.runtime.report import _missing_line

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

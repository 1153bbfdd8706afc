"""Where a sweep could lose or misfile what it logged, with real Ray and real MLflow (issue 20,
section 3): a resume that would continue another store's sweep of the same name, end-of-sweep
writes during a store hiccup, and an errored trial that a resume restarts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient
from sweep_procs import (
    SMOKE,
    assert_no_duplicate_steps,
    children,
    error_lines,
    fresh_store,
    is_ray_worker,
    kill,
    metric_steps,
    result_lines,
    run_to_end,
    start_sweep,
    wait_until,
)

from sweeps.analysis.run_values import run_figures
from sweeps.tracking.outbox import read_journal

pytestmark = pytest.mark.slow

# One trial of the smoke sweep, a few steps: the plumbing, cheaply.
ONE_TRIAL = ["base.train.max_steps=10", "space.model.d_model=[32]", "space.train.seed=[0]"]


def resume_command(tmp: Path, uri: str, sets: list[str]) -> list[str]:
    args = [sys.executable, "-m", "sweeps.run", str(SMOKE), "--out", str(tmp / "out")]
    return [*args, "--tracking-uri", uri, *(f"--set={s}" for s in sets), "--resume"]


def test_resume_never_grafts_onto_another_stores_sweep(tmp_path):
    """The parent run sweep.json names is not in the store --tracking-uri points at, which
    holds an unfinished sweep of the same name: one line, exit 2, that sweep untouched."""
    first = fresh_store(tmp_path / "first.db")
    code, err = run_to_end(tmp_path, first, ONE_TRIAL)
    assert code == 0, err[-3000:]
    saved = tmp_path / "out" / "smoke" / "sweep.json"
    parent_id = json.loads(saved.read_text())["parent_run_id"]

    other = fresh_store(tmp_path / "other.db")
    client = MlflowClient(other)
    experiment = client.create_experiment("smoke")
    tags = {"sweep.role": "parent", "sweep.name": "smoke"}
    decoy = client.create_run(experiment, run_name="smoke", tags=tags).info.run_id

    result = subprocess.run(
        resume_command(tmp_path, other, ONE_TRIAL),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert error_lines(result.stderr) == [
        f"error: --resume: parent run {parent_id}, named in {saved}, is not in MLflow at "
        f"{other} (the first run logged to {first}); pass the --tracking-uri of the store "
        "that holds it, or start over with --overwrite"
    ]
    assert "starting a local Ray" not in result.stderr  # refused before Ray starts
    runs = client.search_runs([experiment])
    assert [r.info.run_id for r in runs] == [decoy]
    assert runs[0].info.status == "RUNNING" and not runs[0].data.metrics


def saved_parent(out: Path) -> str | None:
    """The parent run id a sweep saved in its output folder, once it has."""
    try:
        return json.loads((out / "sweep.json").read_text())["parent_run_id"]
    except (OSError, ValueError, KeyError):
        return None


def test_end_of_sweep_writes_wait_in_the_outbox_and_a_resume_delivers_them_once(
    tmp_path, monkeypatch
):
    """The store cannot take the sweep's tables at its end (a file stands where the parent's
    tables/ folder goes, an OSError as a failing disk gives) for longer than the sweep waits:
    no traceback, the parent stays RUNNING and the writes stay in the journal; once the store
    is whole, --resume delivers them and ends the parent, with no (key, step) pair twice."""
    monkeypatch.setenv("SWEEPS_MLFLOW_WAIT_S", "3")
    uri = fresh_store(tmp_path / "mlflow.db")
    out = tmp_path / "out" / "smoke"
    journal = out / "mlflow_outbox.jsonl"
    proc = start_sweep(tmp_path, uri, ONE_TRIAL, log="run0")
    try:
        parent_id = wait_until(lambda: saved_parent(out), 120, proc)
        assert parent_id, (tmp_path / "run0.err").read_text()
        blocked = tmp_path / "mlartifacts" / "smoke" / parent_id / "artifacts" / "tables"
        blocked.parent.mkdir(parents=True, exist_ok=True)
        blocked.write_text("not a folder")
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            kill(proc)
    err = (tmp_path / "run0.err").read_text()
    assert proc.returncode == 1, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].endswith(
        f"kept in {journal}: run again with --resume once it is back"
    ), err[-3000:]
    client = MlflowClient(uri)
    assert client.get_run(parent_id).info.status == "RUNNING"
    waiting = [record["what"] for record in read_journal(journal)]
    assert waiting[0] == "the sweep's tables and plots", waiting
    assert {"the tables' fits", "the sweep's figures"} <= set(waiting), waiting

    blocked.unlink()
    code, err = run_to_end(tmp_path, uri, ONE_TRIAL, resume=True, log="run1")
    assert code == 0, err[-3000:]
    parent = client.get_run(parent_id)
    assert parent.info.status == "FINISHED"
    tables = {Path(a.path).name for a in client.list_artifacts(parent_id, "tables")}
    assert {"table.md", "trials.csv"} <= tables, tables
    assert parent.data.metrics["trials/total"] == 1.0
    assert assert_no_duplicate_steps(uri, [parent]) >= 2
    assert journal.read_text() == ""


ERRORED_STEPS = 200


def test_a_trial_errored_for_good_then_restarted_by_resume_ends_with_its_real_summary(tmp_path):
    """max_failures 0: a trial's worker is SIGKILLed, so the trial errors for good and gets a
    stand-in summary (stopped_reason error); the driver dies before the sweep ends; --resume
    restarts the errored trial, and its child run ends with train()'s own summary."""
    uri = fresh_store(tmp_path / "mlflow.db")
    sets = [f"base.train.max_steps={ERRORED_STEPS}"]
    experiment_dir = tmp_path / "out" / "smoke" / "ray" / "smoke"

    def a_trial_mid_run():
        for lines in result_lines(experiment_dir).values():
            last = lines[-1] if lines else {}
            if 20 <= last.get("step", -1) <= ERRORED_STEPS // 2:
                return last["trial_id"], last["pid"]
        return None

    def errored_in_mlflow(trial_id: str) -> bool:
        return any(
            (run.data.tags.get("sweep.trial_id"), run.data.tags.get("sweep.status"))
            == (trial_id, "ERROR")
            for run in children(uri, "smoke")[1]
        )

    proc = start_sweep(tmp_path, uri, sets, log="run0")
    try:
        found = wait_until(a_trial_mid_run, 240, proc, every_s=0.05)
        assert found, (tmp_path / "run0.err").read_text()[-3000:]
        victim, pid = found
        assert is_ray_worker(pid), pid
        os.kill(pid, signal.SIGKILL)
        errored = wait_until(lambda: errored_in_mlflow(victim), 120, proc, every_s=0.1)
        assert errored, (tmp_path / "run0.err").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            kill(proc)  # the driver dies with the other trials unfinished

    code, err = run_to_end(tmp_path, uri, sets, resume=True, log="run1")
    assert code == 0, err[-3000:]
    parents, runs = children(uri, "smoke")
    assert len(parents) == 1 and len(runs) == 4
    run = next(r for r in runs if r.data.tags["sweep.trial_id"] == victim)
    assert run.data.tags["sweep.stopped_reason"] != "error"
    assert run.data.tags["sweep.summary"] == "train"
    assert run.info.status == "FINISHED"
    assert run.data.tags["sweep.status"] in ("TERMINATED", "EARLY_STOPPED")
    evaluated = metric_steps(uri, run)["val/exact_match"]
    assert run.data.metrics["steps"] == evaluated[-1], (run.data.metrics["steps"], evaluated)
    assert "best/val/exact_match" in run_figures(run)
    assert_no_duplicate_steps(uri, runs)

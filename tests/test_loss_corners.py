"""Where a sweep could lose or misfile what it logged, with real Ray and real MLflow (issue 20,
section 3): a resume that would continue another store's sweep of the same name, end-of-sweep
writes during a store hiccup, and an errored trial that a resume restarts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient
from sweep_procs import SMOKE, error_lines, kill, start_sweep

pytestmark = pytest.mark.slow

# One trial of the smoke sweep, a few steps: the plumbing, cheaply.
ONE_TRIAL = ["base.train.max_steps=10", "space.model.d_model=[32]", "space.train.seed=[0]"]


def run_to_end(tmp: Path, uri: str, sets: list[str], *, resume: bool = False, log: str = "run"):
    """``python -m sweeps.run`` to its end; (exit code, stderr)."""
    proc = start_sweep(tmp, uri, sets, resume=resume, log=log)
    try:
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            kill(proc)
    return proc.returncode, (tmp / f"{log}.err").read_text()


def resume_command(tmp: Path, uri: str, sets: list[str]) -> list[str]:
    args = [sys.executable, "-m", "sweeps.run", str(SMOKE), "--out", str(tmp / "out")]
    return [*args, "--tracking-uri", uri, *(f"--set={s}" for s in sets), "--resume"]


def test_resume_never_grafts_onto_another_stores_sweep(tmp_path):
    """The parent run sweep.json names is not in the store --tracking-uri points at, which
    holds an unfinished sweep of the same name: one line, exit 2, that sweep untouched."""
    first = f"sqlite:///{tmp_path / 'first.db'}"
    code, err = run_to_end(tmp_path, first, ONE_TRIAL)
    assert code == 0, err[-3000:]
    saved = tmp_path / "out" / "smoke" / "sweep.json"
    parent_id = json.loads(saved.read_text())["parent_run_id"]

    other = f"sqlite:///{tmp_path / 'other.db'}"
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

"""The real command on the tests' tiny sweep: ``python -m sweeps.run search_spaces/smoke.yaml``.

Its sweep metric is set to ``val/loss``, which after 30 steps is still falling for every trial:
each run's convergence tag, the table's marks and the end-of-run line say so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "search_spaces" / "smoke.yaml"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Run the smoke sweep once (a real subprocess with its own embedded Ray)."""
    tmp = tmp_path_factory.mktemp("e2e")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MLFLOW_TRACKING_URI", None)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sweeps.run",
            str(SMOKE),
            "--out",
            str(tmp / "out"),
            "--tracking-uri",
            uri,
            "--set=sweep.metric=val/loss",
            "--set=sweep.mode=min",
        ],
        cwd=tmp,
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return {"tmp": tmp, "uri": uri, "result": result, "out": tmp / "out" / "smoke"}


def _runs(uri: str):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("smoke")
    return client, client.search_runs([exp.experiment_id])


def test_prints_the_table_and_where_everything_went(sweep):
    stdout = sweep["result"].stdout
    assert "| model.d_model" in stdout
    assert str(sweep["out"]) in stdout
    assert f"mlflow ui --backend-store-uri {sweep['uri']}" in stdout
    # A short progress view on stderr, not pages of Ray logs.
    stderr = sweep["result"].stderr
    assert "4/4 done" in stderr
    assert len(stderr.splitlines()) < 20, stderr


def test_one_parent_and_a_child_per_trial(sweep):
    client, runs = _runs(sweep["uri"])
    parents = [r for r in runs if r.data.tags.get("sweep.role") == "parent"]
    children = [r for r in runs if r.data.tags.get("sweep.role") == "trial"]
    assert len(parents) == 1 and len(children) == 4
    parent = parents[0]
    assert parent.info.run_id in sweep["result"].stdout
    assert parent.info.status == "FINISHED"
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"spec.yaml", "tables", "plots"} <= artifacts
    tables = {Path(a.path).name for a in client.list_artifacts(parent.info.run_id, "tables")}
    assert {"table.md", "table.csv", "trials.csv"} <= tables
    assert {(c.data.params["model.d_model"], c.data.params["train.seed"]) for c in children} == {
        ("16", "0"),
        ("16", "1"),
        ("32", "0"),
        ("32", "1"),
    }
    for child in children:
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.data.tags["sweep.status"] == "TERMINATED"
        assert child.info.status == "FINISHED"
        assert child.data.params["train.max_steps"] == "30"
        assert child.data.params["optim.betas"] == "[0.9, 0.98]"
        for key in ("n_params", "steps", "wall_time_s", "test/exact_match", "val/exact_match"):
            assert key in child.data.metrics, key


def test_metric_history_has_steps_and_no_duplicates(sweep):
    client, runs = _runs(sweep["uri"])
    child = next(r for r in runs if r.data.tags.get("sweep.role") == "trial")
    history = client.get_metric_history(child.info.run_id, "val/exact_match")
    assert [m.step for m in history] == [0, 10, 20, 30]
    for key in child.data.metrics:
        steps = [m.step for m in client.get_metric_history(child.info.run_id, key)]
        assert len(steps) == len(set(steps)), key


def test_output_folder(sweep):
    out = sweep["out"]
    for name in ("trials.csv", "table.md", "table.csv"):
        assert (out / name).is_file(), name
    assert list(out.glob("*.png"))
    trials = (out / "trials.csv").read_text().splitlines()
    assert len(trials) == 5  # header + 4 trials
    assert "model.d_model" in trials[0]
    spec = yaml.safe_load(SMOKE.read_text())
    assert (out / "ray" / spec["sweep"]["name"]).is_dir()
    assert not (sweep["tmp"] / "mlruns").exists()  # artifacts live next to the database


def test_convergence_tag_table_marks_and_end_of_run_line(sweep):
    _, runs = _runs(sweep["uri"])
    children = [r for r in runs if r.data.tags.get("sweep.role") == "trial"]
    tags = {r.data.tags["sweep.trial_id"]: r.data.tags["sweep.convergence"] for r in children}
    assert set(tags.values()) == {"still_improving"}, tags  # val/loss falls to the last step
    trials = pd.read_csv(sweep["out"] / "trials.csv")
    assert dict(zip(trials["trial_id"], trials["convergence"], strict=True)) == tags
    stdout = sweep["result"].stdout
    assert " ↑ |" in stdout and "raise train.max_steps" in stdout
    assert stdout.rstrip().splitlines()[-1] == (
        "still improving: 4 of 4 trials were still improving when they stopped "
        "(budget-limited); raise train.max_steps to see where they level off"
    )


def test_table_command_rebuilds_the_same_outputs_from_mlflow(sweep, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "sweeps.table", str(sweep["out"]), "--tracking-uri",
         sweep["uri"], "--out", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rebuilt = tmp_path / "smoke"
    for name in ("table.md", "table.csv", "trials.csv"):
        assert (rebuilt / name).read_text() == (sweep["out"] / name).read_text(), name
    assert (rebuilt / "table.md").read_text() in result.stdout

"""The real command on the tests' tiny sweep: ``python -m sweeps.run search_spaces/smoke.yaml``.

Its sweep metric is set to ``val/loss``, which after 30 steps is still falling for every trial:
each run's convergence tag, the table's marks and the end-of-run line say so.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient
from sweep_procs import assert_diagnostics_logged, fresh_store

from sweeps.analysis.run_values import run_figures
from sweeps.tracking import ui

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "search_spaces" / "smoke.yaml"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Run the smoke sweep once (a real subprocess with its own embedded Ray)."""
    tmp = tmp_path_factory.mktemp("e2e")
    uri = fresh_store(tmp / "mlflow.db")
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
            "--set=base.data.length_grid_max=3",  # a 3 x 3 length grid, beyond the 2 trained
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
        for key in ("n_params", "steps", "wall_time_s", "val/exact_match"):
            assert key in child.data.metrics, key
        # measured once: a value the run page shows as one, not a one-point chart
        assert (
            "test/exact_match" in child.data.tags and "test/exact_match" not in child.data.metrics
        )
        grid = {k for k in run_figures(child) if k.startswith("lengths/")}
        assert {"lengths/extrapolation_ratio", "lengths/exact_match/3x1"} <= grid
        assert len(grid) <= 3 * 3 + 1  # a cell per length pair and the ratio, no more
    plots = {Path(a.path).name for a in client.list_artifacts(parent.info.run_id, "plots")}
    assert "length_heatmap.png" in plots


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
    assert (out / "length_heatmap.png").is_file()
    trials = (out / "trials.csv").read_text().splitlines()
    assert len(trials) == 5  # header + 4 trials
    assert "model.d_model" in trials[0]
    spec = yaml.safe_load(SMOKE.read_text())
    assert (out / "ray" / spec["sweep"]["name"]).is_dir()
    assert not (sweep["tmp"] / "mlruns").exists()  # artifacts live next to the database


def _sweep_command(sweep, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MLFLOW_TRACKING_URI", None)
    args = [sys.executable, "-m", "sweeps.run", str(SMOKE), "--out", str(sweep["tmp"] / "out")]
    return subprocess.run(
        [*args, "--tracking-uri", sweep["uri"], *extra],
        cwd=sweep["tmp"], capture_output=True, text=True, env=env, timeout=240,
    )  # fmt: skip


def test_says_it_is_starting_ray(sweep):
    assert "starting a local Ray" in sweep["result"].stderr.splitlines()[0]


def test_trials_csv_starts_with_id_status_axes_and_metric(sweep):
    header = (sweep["out"] / "trials.csv").read_text().splitlines()[0].split(",")
    metric = "val/loss"  # the fixture's --set sweep.metric
    assert header[:5] == ["trial_id", "status", "model.d_model", "train.seed", metric]


def test_dry_run_numbers_are_tunes_trial_ids(sweep):
    dry = _sweep_command(sweep, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    listed = {}
    for line in dry.stdout.splitlines():
        parts = line.split()
        if parts and parts[0].isdigit() and len(parts[0]) == 5:
            listed[parts[0]] = dict(p.split("=") for p in parts[1:3])
    _, runs = _runs(sweep["uri"])
    ran = {
        r.data.tags["sweep.trial_id"].rsplit("_", 1)[1]: {
            k: r.data.params[k] for k in ("model.d_model", "train.seed")
        }
        for r in runs
        if r.data.tags.get("sweep.role") == "trial"
    }
    assert len(listed) == 4 and listed == ran


def test_running_the_same_sweep_again_is_refused(sweep):
    """A finished sweep in --out: one line naming it and --overwrite; nothing started."""
    before = sorted(p.name for p in (sweep["out"] / "ray" / "smoke").iterdir())
    again = _sweep_command(sweep)
    assert again.returncode == 2, again.stderr
    lines = again.stderr.strip().splitlines()
    assert len(lines) == 1 and "already ran" in lines[0] and "--overwrite" in lines[0], lines
    assert "finished" in lines[0] and "--resume" not in lines[0]
    parents = [r for r in _runs(sweep["uri"])[1] if r.data.tags.get("sweep.role") == "parent"]
    assert len(parents) == 1
    assert sorted(p.name for p in (sweep["out"] / "ray" / "smoke").iterdir()) == before
    both = _sweep_command(sweep, "--resume", "--overwrite")
    assert both.returncode == 2 and "choose one" in both.stderr


def _trial_dirs(tmp: Path) -> set[str]:
    return {p.parent.name for p in (tmp / "out" / "smoke" / "ray" / "smoke").glob("*/result.json")}


def test_overwrite_starts_a_fresh_sweep_without_mixing(tmp_path):
    sweep = {"tmp": tmp_path, "uri": fresh_store(tmp_path / "mlflow.db")}
    one_trial = ["--set", "space.model.d_model=[16]", "--set", "space.train.seed=[0]"]
    one_trial += ["--set", "base.train.max_steps=10"]
    first = _sweep_command(sweep, *one_trial)
    assert first.returncode == 0, first.stderr[-2000:]
    old = _trial_dirs(tmp_path)
    fresh = _sweep_command(sweep, *one_trial, "--overwrite")
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    new = _trial_dirs(tmp_path)
    assert len(new) == 1 and not (old & new)  # only the fresh sweep's trial folder
    runs = _runs(sweep["uri"])[1]
    parents = [r for r in runs if r.data.tags.get("sweep.role") == "parent"]
    assert len(parents) == 2  # the earlier parent run stays in MLflow, apart
    for parent in parents:
        kids = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
        assert len(kids) == 1


def test_every_trial_logs_its_model_and_the_best_one_answers(sweep):
    client, runs = _runs(sweep["uri"])
    for child in (r for r in runs if r.data.tags.get("sweep.role") == "trial"):
        # an MLflow model (sweeps.tracking.model_flavor) around the checkpoint folder
        names = {Path(a.path).name for a in client.list_artifacts(child.info.run_id, "model")}
        assert {"MLmodel", "artifacts"} <= names, child.data.tags["sweep.trial_id"]
        held = client.list_artifacts(child.info.run_id, "model/artifacts/checkpoint")
        assert {Path(a.path).name for a in held} == {"model.pt", "config.yaml"}
        assert child.data.tags["sweep.final_weights"] == "last"  # no early stopping in smoke
        assert_diagnostics_logged(client, child)
    line = next(x for x in sweep["result"].stdout.splitlines() if x.startswith("ask its model:"))
    command = shlex.split(line.removeprefix("ask its model:"))
    assert command[:4] == ["python", "-m", "sweeps.predict", command[3]]
    assert command[3].startswith("runs:/")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    asked = subprocess.run(
        [sys.executable, *command[1:]], capture_output=True, text=True, env=env, timeout=120
    )
    assert asked.returncode == 0, asked.stderr
    assert len(asked.stdout.splitlines()) == 1


def test_parent_run_carries_the_sweep_and_the_ui_opens_on_it(sweep):
    client, runs = _runs(sweep["uri"])
    parent = next(r for r in runs if r.data.tags.get("sweep.role") == "parent")
    assert parent.data.params["model.d_model"] == "[16, 32]"
    assert parent.data.params["train.seed"] == "[0, 1]"
    assert parent.data.metrics["trials/total"] == 4 == parent.data.metrics["trials/terminated"]
    metric, pick = "val/loss", min  # the fixture's --set sweep.metric and sweep.mode
    best = client.get_run(parent.data.tags["sweep.best_run_id"])
    children = [r for r in runs if r.data.tags.get("sweep.role") == "trial"]
    top = pick(c.data.metrics[metric] for c in children)
    assert best.data.metrics[metric] == top
    assert parent.data.metrics[f"best/{metric}"] == top
    # Chosen on validation; the held-out test figure is the chosen trial's, logged beside it.
    held_out = run_figures(best)["test/exact_match"]
    assert parent.data.metrics["best/test/exact_match"] == held_out
    assert parent.data.tags["sweep.best_chosen_on"] == "val/loss (min)"
    line = next(x for x in sweep["result"].stdout.splitlines() if x.startswith("best trial:"))
    assert f"(chosen on val/loss {top:.4g}; test/exact_match {held_out:.4g}; " in line
    experiment = client.get_experiment(parent.info.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    address = next(x for x in sweep["result"].stdout.splitlines() if x.startswith("open the"))
    key = address.split("viewStateShareKey=")[1]
    envelope = json.loads(experiment.tags[f"mlflow.sharedViewState.{key}"])
    assert envelope["name"].startswith("sweep ")  # listed so in the UI's Views menu
    view = json.loads(envelope["state"])
    assert view["searchFilter"] == f"tags.mlflow.parentRunId = '{parent.info.run_id}'"
    assert (view["orderByKey"], view["orderByAsc"]) == (f"metrics.`{metric}`", True)  # min
    assert view["selectedColumns"] == [
        "params.`model.d_model`", "params.`train.seed`", f"metrics.`{metric}`",
        "tags.`test/exact_match`",
    ]  # fmt: skip
    # The chart view opens on the curves: the metric and the training loss, pinned first.
    assert [c["metricKey"] for c in view["compareRunCharts"]] == [metric, "train/loss"]
    assert [s["name"] for s in view["compareRunSections"]] == ["curves", *ui.SECTIONS_AFTER]
    assert "compareRunsMode=CHART" in address
    assert "workflowType=machine_learning" in address
    assert f"/#/experiments/{parent.info.experiment_id}/runs?" in address  # the tab keeps the key


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

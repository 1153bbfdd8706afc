"""sweeps.analysis.collect and `python -m sweeps.table` against a real MLflow SQLite store.

The store is written by hand with MlflowClient in the layout of sweeps/tracking/records.py and
writer.py: a parent run (tag sweep.role=parent, artifact spec.yaml) and one nested child run per
trial.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from matplotlib import image
from mlflow import MlflowClient
from mlflow.entities import Metric, Param
from sweep_procs import fresh_store

from sweeps.analysis import collect, plots
from sweeps.analysis.run_values import parse_param_column
from sweeps.table import main

REPO = Path(__file__).resolve().parents[1]
SWEEP = "width_vs_depth"
SPEC = {
    "sweep": {"name": SWEEP, "metric": "test/exact_match", "mode": "max"},
    "table": [
        {
            "name": "width_vs_depth",
            "rows": ["model.d_model"],
            "columns": ["model.n_layer"],
            "values": ["test/exact_match"],
        },
        {"name": "by_size", "rows": ["n_params"], "values": ["val/steps_to_threshold"]},
    ],
}


def _exact_match(d_model: int, n_layer: int, seed: int) -> float:
    return 0.5 + 0.1 * n_layer + d_model / 1000 + 0.01 * seed


def _log_trial(client, experiment_id, parent_id, trial_id, config, start_time, failed=False):
    tags = {
        "mlflow.parentRunId": parent_id,
        "sweep.name": SWEEP,
        "sweep.trial_id": trial_id,
        "sweep.role": "trial",
        "sweep.status": "ERROR" if failed else "TERMINATED",
        "sweep.stopped_reason": "error" if failed else "max_steps",
    }
    run = client.create_run(experiment_id, start_time, tags, run_name=trial_id)
    run_id = run.info.run_id
    # Params as tracking.py writes cfg.flat(): every value a string, None as "None", lists as str.
    flat = {
        **config,
        "optim.lr": 1e-3,
        "train.time_budget_s": None,
        "task.operand_lengths": [1, 3],
        "train.compile": False,
    }
    params = [Param(k, str(v)) for k, v in flat.items()]
    d_model, n_layer, seed = config["model.d_model"], config["model.n_layer"], config["train.seed"]
    final = _exact_match(d_model, n_layer, seed)
    n_steps = 1 if failed else 3
    metrics = []
    for i, step in enumerate((100, 200, 300)[:n_steps]):
        metrics.append(Metric("val/exact_match", final * (i + 1) / 3, start_time + i, step))
        metrics.append(Metric("train/loss", 2.0 / (i + 1), start_time + i, step))
    if not failed:
        n_params = 12 * d_model * d_model * n_layer
        summary = {
            "test/exact_match": final,
            "n_params": n_params,
            "steps": 300,
            "wall_time_s": 1.5,
            "best/val/exact_match": final,
            "val/steps_to_threshold": 200.0 if n_layer == 2 else None,
        }
        metrics += [Metric(k, v, start_time + 9, 300) for k, v in summary.items() if v is not None]
    client.log_batch(run_id, metrics=metrics, params=params)
    client.set_terminated(run_id, "FAILED" if failed else "FINISHED")


def _log_sweep(client, experiment_id, start_time, configs, spec_dir):
    parent = client.create_run(
        experiment_id, start_time, {"sweep.name": SWEEP, "sweep.role": "parent"}, run_name=SWEEP
    )
    parent_id = parent.info.run_id
    spec_path = spec_dir / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(SPEC))
    client.log_artifact(parent_id, str(spec_path))
    for i, config in enumerate(configs):
        failed = config.pop("failed", False)
        _log_trial(client, experiment_id, parent_id, f"t{i:04d}", config, start_time + i, failed)
    client.set_terminated(parent_id, "FINISHED")
    return parent_id


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """(tracking URI, newest parent id, older parent id, root folder)."""
    root = tmp_path_factory.mktemp("mlflow")
    uri = fresh_store(root / "mlflow.db")
    client = MlflowClient(uri)
    experiment_id = client.create_experiment(SWEEP, artifact_location=str(root / "artifacts"))
    now = int(time.time() * 1000)
    old = _log_sweep(
        client,
        experiment_id,
        now - 60_000,
        [{"model.d_model": 32, "model.n_layer": 1, "train.seed": 0}],
        root,
    )
    configs = [
        {"model.d_model": d, "model.n_layer": n, "train.seed": s}
        for d in (64, 128)
        for n in (1, 2)
        for s in (0, 1)
    ]
    configs.append({"model.d_model": 64, "model.n_layer": 1, "train.seed": 2, "failed": True})
    new = _log_sweep(client, experiment_id, now, configs, root)
    return uri, new, old, root


def _run_table(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", "sweeps.table", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_trials_from_mlflow_newest_sweep(store):
    uri, _, _, _ = store
    trials, curves = collect.trials_from_mlflow(uri, SWEEP)
    assert list(trials["trial_id"]) == [f"t{i:04d}" for i in range(9)]
    assert list(trials.columns[:4]) == ["trial_id", "status", "stopped_reason", "run_id"]
    assert trials["model.d_model"].dtype == np.int64
    assert trials["optim.lr"].dtype == np.float64
    assert trials["train.time_budget_s"].isna().all()
    assert trials["task.operand_lengths"].iloc[0] == "[1, 3]"
    assert trials["train.compile"].iloc[0] is np.False_ or trials["train.compile"].iloc[0] is False
    assert list(trials.columns[-2:]) == ["steps", "wall_time_s"]
    failed = trials.iloc[8]
    assert (failed["status"], failed["stopped_reason"]) == ("ERROR", "error")
    assert np.isnan(failed["test/exact_match"])
    first = trials.iloc[0]
    assert first["test/exact_match"] == pytest.approx(_exact_match(64, 1, 0))
    # the latest value of a curve metric, not its first
    assert first["val/exact_match"] == pytest.approx(_exact_match(64, 1, 0))
    assert first["n_params"] == 12 * 64 * 64
    trials_ok, _ = collect.trials_from_mlflow(uri, SWEEP, parent_run_id=store[2])
    assert trials_ok["n_params"].dtype == np.int64  # no failed trial: counts come back as ints
    assert list(curves.columns) == ["trial_id", "metric", "step", "value"]
    first_curve = curves[(curves["trial_id"] == "t0000") & (curves["metric"] == "train/loss")]
    assert list(first_curve["step"]) == [100, 200, 300]
    assert list(first_curve["value"]) == pytest.approx([2.0, 1.0, 2.0 / 3])


def test_trials_from_mlflow_given_parent(store):
    uri, _, old, _ = store
    trials, _ = collect.trials_from_mlflow(uri, SWEEP, parent_run_id=old)
    assert list(trials["model.d_model"]) == [32]


def test_write_outputs_and_log_to_parent(store, tmp_path):
    uri, new, _, _ = store
    trials, curves = collect.trials_from_mlflow(uri, SWEEP)
    paths = collect.write_outputs(trials, curves, [], tmp_path / "out")
    names = {p.name for p in paths}
    assert {"trials.csv", "table.md", "table.csv", "training_curves.png"} <= names
    assert pd.read_csv(tmp_path / "out" / "trials.csv")["trial_id"].tolist()[0] == "t0000"
    client = MlflowClient(uri)
    collect.log_outputs_to_parent(client, new, paths)
    logged = {f.path for folder in ("tables", "plots") for f in client.list_artifacts(new, folder)}
    assert {"tables/table.md", "tables/trials.csv", "plots/width_x_depth.png"} <= logged


def test_outputs_stopped_mid_write_are_each_whole(store, tmp_path, monkeypatch):
    """A stop (Ctrl-C, kill) while a sweep's outputs are written leaves each file whole, the
    old one or the new: never a table.md cut short or one without its partial note."""
    from sweeps.analysis import store as files

    uri, _, _, _ = store
    trials, curves = collect.trials_from_mlflow(uri, SWEEP)
    out = tmp_path / "out"
    collect.write_outputs(trials, curves, [], out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    renames, replace = [], os.replace

    def stopped_at_the_second(tmp, path):
        renames.append(Path(path).name)
        if len(renames) == 2:
            raise KeyboardInterrupt
        replace(tmp, path)

    monkeypatch.setattr(files.os, "replace", stopped_at_the_second)
    with pytest.raises(KeyboardInterrupt):
        collect.write_outputs(trials.head(1), curves, [], out, note="**Partial**")
    assert renames == ["trials.csv", "table.md"]
    assert len(pd.read_csv(out / "trials.csv")) == 1  # the first rename landed
    for name, data in before.items():
        if name != "trials.csv":
            assert (out / name).read_bytes() == data, name
    monkeypatch.setattr(files.os, "replace", replace)
    collect.write_outputs(trials.head(1), curves, [], out, note="**Partial**")
    assert (out / "table.md").read_text().startswith("**Partial**\n\n## ")
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


def test_table_command_rebuilds_from_mlflow(store, tmp_path):
    uri, _, _, _ = store
    result = _run_table(SWEEP, "--tracking-uri", uri, "--out", "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == f"wrote 8 files to out/{SWEEP}\n"
    out = tmp_path / "out" / SWEEP
    for name in ("trials.csv", "table.md", "table.csv", "table_by_size.csv"):
        assert (out / name).is_file(), name
    # each PNG is the figure the plots draw from these trials, written at the command's dpi
    trials, curves = collect.trials_from_mlflow(uri, SWEEP)
    figures = plots.plots_for(trials, curves, "test/exact_match")
    for name in ("exact_match_vs_params", "width_x_depth", "training_curves"):
        height, width = image.imread(out / f"{name}.png").shape[:2]
        inches = figures[name].get_size_inches()
        assert (width, height) == tuple(np.round(inches * 120).astype(int)), name
    size = figures["exact_match_vs_params"].axes[0]
    finished = trials.dropna(subset=["test/exact_match"])
    cells = finished.groupby(["model.d_model", "model.n_layer"])
    markers = [line for line in size.get_lines() if line.get_marker() in plots.MARKERS]
    drawn = sorted(tuple(map(float, xy)) for line in markers for xy in line.get_xydata())
    expected = sorted(zip(cells["n_params"].first(), cells["test/exact_match"].mean(), strict=True))
    np.testing.assert_allclose(drawn, expected)  # one marker per cell, the failed seed left out
    panel = figures["training_curves"].axes[0]
    assert len(panel.get_lines()) == len(trials)  # the failed trial's single report included
    assert not (out / "batch_size_x_lr.png").exists()  # the sweep does not vary those axes
    # the tables named in the parent's spec.yaml artifact, printed as written
    assert result.stdout == (out / "table.md").read_text()
    assert "## width_vs_depth" in result.stdout and "## by_size" in result.stdout
    row_64 = next(line for line in result.stdout.splitlines() if line.startswith("| 64 "))
    # depth 1 at width 64: seeds 0 and 1 finished, seed 2 failed
    assert "0.669 ± 0.007 (n=2)" in row_64
    assert "200 ± 0 (n=2)" in result.stdout  # depth 2 reaches the threshold at step 200
    table = pd.read_csv(out / "table.csv")
    assert list(table["test/exact_match:n"]) == [2, 2, 2, 2]


def test_table_command_on_a_folder_uses_its_spec_copy(store, tmp_path):
    uri, _, _, _ = store
    folder = tmp_path / "results" / SWEEP
    folder.mkdir(parents=True)
    copy = {**SPEC, "table": {"name": "depth", "rows": ["model.n_layer"], "aggregate": "max"}}
    (folder / "spec.yaml").write_text(yaml.safe_dump(copy))
    result = _run_table(str(folder), "--tracking-uri", uri, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("## depth\n")
    # the fixture's curves end still rising, so the cell may carry the " ↑" convergence mark
    row = next(line for line in result.stdout.splitlines() if line.startswith("| 2 "))
    assert row.replace(" ↑", "").replace(" ", "") == "|2|0.838|"
    assert (folder / "table.csv").is_file()


def test_table_command_on_a_folder_rebuilds_its_own_sweep(store, tmp_path):
    """The folder's sweep.json names the older of two sweeps with the same name, and the store:
    the table is that sweep's, not the experiment's newest."""
    uri, _, old, _ = store
    folder = tmp_path / "results" / SWEEP
    folder.mkdir(parents=True)
    (folder / "sweep.json").write_text(json.dumps({"parent_run_id": old, "tracking_uri": uri}))
    result = _run_table(str(folder), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert pd.read_csv(folder / "trials.csv")["model.d_model"].tolist() == [32]


def test_unknown_experiment_is_one_line_and_exit_2(store, tmp_path):
    uri, _, _, _ = store
    result = _run_table("no_such_sweep", "--tracking-uri", uri, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: no MLflow experiment named 'no_such_sweep'"
    ]
    assert result.stdout == ""


def test_missing_store_is_one_line_and_creates_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert main([SWEEP]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no MLflow store at ") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_parse_param_column():
    assert parse_param_column(["1", "None", "3"]) == [1, None, 3]
    assert parse_param_column(["1", "0.5"]) == [1.0, 0.5]
    assert parse_param_column(["True", "False"]) == [True, False]
    assert parse_param_column(["[1, 2]", "None"]) == ["[1, 2]", None]
    assert parse_param_column(["rope", "abacus"]) == ["rope", "abacus"]


def test_trials_csv_puts_id_status_axes_and_metric_first():
    raw = {
        "sweep": {"seeds": [0, 1]},
        "space": {"model.d_model,model.n_layer": [[16, 1]], "optim.lr": [1e-3]},
        "derived": {"optim.weight_decay": "optim.lr * 10"},
    }
    axes = collect.swept_paths(raw)
    assert axes == [
        "model.d_model",
        "model.n_layer",
        "optim.lr",
        "train.seed",
        "optim.weight_decay",
    ]
    columns = ["trial_id", "status", "stopped_reason", "run_id", "model.d_model", "model.d_ff"]
    columns += ["optim.lr", "train.seed", "n_params", "val/exact_match", "wall_time_s"]
    ordered = collect.front_first(columns, axes, "val/exact_match")
    assert ordered[:6] == [
        "trial_id", "status", "model.d_model", "optim.lr", "train.seed", "val/exact_match"
    ]  # fmt: skip
    assert ordered[6:] == ["stopped_reason", "run_id", "model.d_ff", "n_params", "wall_time_s"]
    assert collect.swept_paths(None) == []

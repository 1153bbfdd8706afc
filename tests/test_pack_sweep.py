"""``sweep.pack``: a packed sweep reads exactly like an unpacked one (MLflow, trials.csv, the
table), and the combinations it does not support are refused in one line before anything starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from mlflow import MlflowClient
from sweep_procs import (
    ROOT,
    SMOKE,
    assert_diagnostics_logged,
    assert_no_duplicate_steps,
    call_main,
    children,
    fresh_store,
    metric_steps,
    reference_trials,
)

from sweeps.analysis.collect import render_tables
from sweeps.runtime import dry_run
from sweeps.runtime.tune_space import build_packs, trial_points
from sweeps.spec.sweep_spec import load_spec

# Six trials (three learning rates x two seeds) of one shape: packs of 4 and 2.
SETS = [
    "space.model.d_model=[32]",
    "space.optim.lr=[0.001,0.003,0.01]",
    "table.rows=[optim.lr]",
    "table.values=[val/exact_match,test/exact_match]",
    "base.train.precision=fp32",
]
EXACT = ("val/exact_match", "test/exact_match", "train/exact_match", "n_params", "steps")


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["sweep.pack=0"], "error: sweep.pack: must be >= 1 or auto, got 0"),
        (
            ["sweep.pack=4", "sweep.search=optuna"],
            "error: sweep.pack: 4 needs search grid or random, but got search optuna",
        ),
        (
            ["sweep.pack=4", "sweep.scheduler.name=asha"],
            "error: sweep.pack: 4 needs scheduler fifo, but got asha",
        ),
    ],
)
def test_unsupported_packing_is_refused_in_one_line(sets, message, tmp_path):
    import ray

    argv = [str(SMOKE), "--out", str(tmp_path / "out"), "--tracking-uri"]
    argv += [f"sqlite:///{tmp_path / 'mlflow.db'}", *(f"--set={s}" for s in sets)]
    code, stderr = call_main(argv)
    lines = stderr.strip().splitlines()
    assert code == 2, stderr
    assert len(lines) == 1 and lines[0].startswith(message), stderr
    assert not ray.is_initialized()
    assert list(tmp_path.iterdir()) == []  # no store, no output folder


def test_packs_group_same_shape_trials_in_tune_order():
    spec = load_spec(SMOKE, ["sweep.pack=2"])  # d_model 16 and 32 differ in shape
    packs = build_packs(spec)
    assert [[m.index for m in pack] for pack in packs] == [[0, 2], [1, 3]]
    assert {m.point["model.d_model"] for m in packs[0]} == {16}
    spec = load_spec(SMOKE, [*SETS, "sweep.pack=4"])
    assert [[m.index for m in pack] for pack in build_packs(spec)] == [[0, 1, 2, 3], [4, 5]]
    text = dry_run.dry_run_text(spec)
    assert "2 packs (sweep.pack=4) train these 6 trials:" in text
    assert "  pack 1: 2 trial(s) 00004,00005" in text


def test_auto_packs_as_many_as_fit_and_keeps_concurrent_slots_busy(monkeypatch):
    from arith.training.cost import describe
    from sweeps.runtime import tune_space as packing
    from sweeps.spec.space import resolve_run_config

    spec = load_spec(SMOKE, [*SETS, "sweep.pack=auto", "sweep.max_concurrent=null"])
    assert [len(pack) for pack in build_packs(spec)] == [6]  # tiny models: the whole group
    config = resolve_run_config(spec.base, packing.trial_points(spec)[0], spec.derived)
    monkeypatch.setattr(packing, "AUTO_CPU_BYTES", 3 * describe(config)["train_bytes"])
    assert [len(pack) for pack in build_packs(spec)] == [3, 3]  # three fit
    monkeypatch.undo()
    spec = load_spec(SMOKE, [*SETS, "sweep.pack=auto", "sweep.max_concurrent=4"])
    assert [len(pack) for pack in build_packs(spec)] == [2, 2, 2]  # 6 trials over 4 slots
    assert "(sweep.pack=auto)" in dry_run.dry_run_text(spec)


def test_the_progress_line_counts_trials_not_packs():
    from types import SimpleNamespace

    from sweeps.runtime.progress import ProgressLine

    line = ProgressLine("s", 6, "val/exact_match", "max", pack_sizes=[4, 2])
    trials = [SimpleNamespace(status="TERMINATED", config={"pack": 0})]
    assert line.line(trials).startswith("s  4/6 done · 0 running · 2 pending")
    trials.append(SimpleNamespace(status="RUNNING", config={"pack": 1}))
    assert line.line(trials).startswith("s  4/6 done · 2 running · 0 pending")


@pytest.mark.slow
def test_a_packed_sweep_reads_like_the_unpacked_one(tmp_path):
    uri = fresh_store(tmp_path / "mlflow.db")
    sets = [*SETS, "sweep.pack=4"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MLFLOW_TRACKING_URI", None)
    args = [sys.executable, "-m", "sweeps.run", str(SMOKE), "--out", str(tmp_path / "out")]
    args += ["--tracking-uri", uri, *(f"--set={s}" for s in sets)]
    result = subprocess.run(
        args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]

    # One child run per member, under the trial id it would have had unpacked.
    parents, runs = children(uri, "smoke")
    assert len(parents) == 1 and len(runs) == 6
    ids = sorted(r.data.tags["sweep.trial_id"] for r in runs)
    assert [i.rsplit("_", 1)[1] for i in ids] == [f"{i:05d}" for i in range(6)]
    assert len({i.rsplit("_", 1)[0] for i in ids}) == 1
    client = MlflowClient(uri)
    for r in runs:
        assert (r.data.tags["sweep.status"], r.info.status) == ("TERMINATED", "FINISHED")
        assert r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert metric_steps(uri, r)["val/exact_match"] == [0, 10, 20, 30]
        assert {"optim.lr", "train.seed", "model.d_model"} <= set(r.data.params)
        files = {a.path for a in client.list_artifacts(r.info.run_id)}
        assert "config.yaml" in files
        checkpoint = "model/artifacts/checkpoint"  # in its MLflow model (tracking.model_flavor)
        held = {a.path for a in client.list_artifacts(r.info.run_id, checkpoint)}
        assert held == {f"{checkpoint}/model.pt", f"{checkpoint}/config.yaml"}
        assert_diagnostics_logged(client, r)  # each member its own
    tracks = [
        json.loads(Path(client.download_artifacts(r.info.run_id, "embeddings.json")).read_text())
        for r in runs
    ]
    assert len({json.dumps(t["coords"]) for t in tracks}) == len(runs)  # each member's own path
    assert_no_duplicate_steps(uri, runs)

    # trials.csv: a row per member; its metrics and the table equal trials trained alone.
    spec = load_spec(SMOKE, sets)
    trials = pd.read_csv(tmp_path / "out" / "smoke" / "trials.csv")
    assert len(trials) == 6
    reference = reference_trials(sets, ("train/loss", *EXACT), points=trial_points(spec))
    merged = trials.merge(reference, on=["optim.lr", "train.seed"], suffixes=("", "_ref"))
    assert len(merged) == 6
    for name in EXACT:
        assert merged[name].tolist() == merged[f"{name}_ref"].tolist(), name
    assert merged["train/loss"].tolist() == pytest.approx(merged["train/loss_ref"].tolist(), 1e-4)
    table = (tmp_path / "out" / "smoke" / "table.md").read_text()
    assert table == render_tables(reference, spec.tables)


def test_bench_pack_at_a_tiny_size(capsys):
    from sweeps import bench

    assert bench.main(["--pack", "--sizes", "1k,5k", "--packs", "1,2", "--steps", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines.index(next(line for line in lines if line.split()[0] == "size"))
    assert lines[header].split() == ["size", "n_params", "pack", "unpacked", "packed", "ratio"]
    assert any("unpacked:" in line for line in lines[:header])  # what the baseline is
    end = lines.index("", header)  # the evaluation table follows
    rows = [line.split() for line in lines[header + 1 : end]]
    assert [(r[0], r[2]) for r in rows] == [("1k", "1"), ("1k", "2"), ("5k", "1"), ("5k", "2")]
    n_params = [int(r[1].replace(",", "")) for r in rows]
    assert 1_000 <= n_params[0] < 2_000 and 3_500 < n_params[2] <= 5_000  # "about 1K, 5K"
    assert all(float(r[5]) > 0 for r in rows)
    # one evaluation of every member of each pack, alone and together
    second = lines.index(next(line for line in lines[end:] if line.split()[:1] == ["size"]))
    assert lines[second].split() == ["size", "pack", "alone", "together", "ratio"]
    evals = [line.split() for line in lines[second + 1 :]]
    assert [(r[0], r[1]) for r in evals] == [("1k", "2"), ("5k", "2")]
    assert all(float(r[2]) > 0 and float(r[3]) > 0 for r in evals)


def test_random_trials_are_drawn_as_tune_draws_them():
    """The driver's draws for packing equal the configs Tune's own generator gives an
    unpacked sweep of the same spec and seed."""
    from ray.tune.experiment import Experiment
    from ray.tune.search import BasicVariantGenerator

    from sweeps.runtime.tune_space import param_space, trial_points

    sets = ["sweep.search=random", "sweep.num_samples=3", "sweep.seed=7"]
    sets.append("space.optim.lr={loguniform: [0.0001, 0.01]}")
    spec = load_spec(SMOKE, sets)
    generator = BasicVariantGenerator(random_state=spec.sweep.seed)
    experiment = Experiment("x", lambda config: None, config=param_space(spec), num_samples=3)
    generator.add_configurations([experiment])
    drawn = []
    while (trial := generator.next_trial()) is not None:
        drawn.append(trial.config)
    assert len(drawn) == 3 and len({t["optim.lr"] for t in drawn}) == 3
    assert trial_points(spec) == drawn


@pytest.mark.slow
def test_bench_pack_of_whole_sweeps_at_a_tiny_size(capsys):
    """``--pack --sweep``: the same trials as whole sweeps through the driver, unpacked and
    packed; the baseline is named and the ratio is the pack-1 sweep's time over this one's."""
    from sweeps import bench

    argv = ["--pack", "--sweep", "--sizes", "1k", "--packs", "1,2", "--trials", "2"]
    assert bench.main([*argv, "--steps", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any("pack 1 is the baseline" in line for line in lines)
    rows = [line.split() for line in lines if line.split()[:1] == ["1k"]]
    assert [r[2] for r in rows] == ["1", "2"]
    seconds = [float(r[3]) for r in rows]  # printed to 0.1 s; the ratio is of the exact times
    low = (seconds[0] - 0.05) / (seconds[1] + 0.05) - 0.005
    high = (seconds[0] + 0.05) / (seconds[1] - 0.05) + 0.005
    assert low <= float(rows[1][5]) <= high

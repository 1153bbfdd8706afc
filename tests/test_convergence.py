"""sweeps.analysis.convergence on hand-made curves, and its marks in the tables."""

from __future__ import annotations

import functools
import math
import pickle
import time

import pandas as pd
import pytest
from mlflow import MlflowClient
from sweep_procs import FakeTrial, fresh_store

from arith.training.cost import describe
from sweeps.analysis.collect import with_convergence
from sweeps.analysis.convergence import (
    CONVERGENCE_TAG,
    budget_key,
    classify,
    convergence_column,
    improving_line,
    monitored_metric,
)
from sweeps.analysis.tables import build_table, to_markdown
from sweeps.runtime.callbacks import bind
from sweeps.spec.space import resolve_run_config
from sweeps.spec.table_block import TableSpec
from sweeps.tracking.tracker import MLflowTracker

STEPS = [100, 200, 300, 400, 500, 600]
FLAT = [0.2, 0.6, 0.9, 0.95, 0.951, 0.952]  # rose early, flat (+0.002) over the last third
RISING = [0.1, 0.2, 0.3, 0.4, 0.45, 0.509]  # +0.109 over the last three evaluations


def _curve(values):
    return list(zip(STEPS, values, strict=True))


@pytest.mark.parametrize(
    ("history", "status", "reason", "metric", "expected"),
    [
        (_curve(FLAT), "TERMINATED", "max_steps", "val/exact_match", "converged"),
        (_curve(RISING), "TERMINATED", "max_steps", "val/exact_match", "still_improving"),
        # the wall clock stopped it: a label of its own, whatever the curve did
        (_curve(RISING), "TERMINATED", "time_budget", "val/exact_match", "time_budget"),
        (_curve(FLAT), "TERMINATED", "time_budget", "val/exact_match", "time_budget"),
        # a crash says nothing about where the curve was heading
        (_curve(RISING), "ERROR", None, "val/exact_match", "unknown"),
        (_curve(FLAT), "ERROR", "max_steps", "val/exact_match", "unknown"),
        # +0.009 over the window: under one percentage point
        (_curve([0.1, 0.3, 0.5, 0.5, 0.505, 0.509]), None, None, "val/exact_match", "converged"),
        # falling at the end is not improving
        (_curve([0.1, 0.5, 0.9, 0.8, 0.7, 0.6]), None, None, "val/exact_match", "converged"),
        # a loss improves downwards, by more than 2 % of its value at the window's start
        (_curve([3.0, 2.0, 1.0, 0.5, 0.4, 0.3]), None, None, "val/loss", "still_improving"),
        (_curve([3.0, 2.0, 1.0, 0.5, 0.499, 0.495]), None, None, "val/loss", "converged"),
        (_curve(RISING), "DIVERGED", "diverged", "val/exact_match", "diverged"),
        (_curve([*RISING[:-1], math.nan]), "TERMINATED", None, "val/exact_match", "diverged"),
        (_curve(RISING), "EARLY_STOPPED", "early_stopping", "val/exact_match", "early_stopped"),
        (_curve(RISING), "EARLY_STOPPED", "scheduler", "val/exact_match", "early_stopped"),
        (_curve(RISING), "TERMINATED", "target_reached", "val/exact_match", "converged"),
        ([], "TERMINATED", "max_steps", "val/exact_match", "unknown"),
        # one evaluation has no trend
        ([(100, 0.3)], None, None, "val/exact_match", "unknown"),
        ([(100, 0.3)], "TERMINATED", "max_steps", "val/loss", "unknown"),
    ],
)
def test_classify_hand_made_curves(history, status, reason, metric, expected):
    assert classify(history, status, reason, metric=metric) == expected


def test_window_is_at_least_the_last_three_evaluations():
    # 30 evaluations, the last third flat; the rise sits in evaluations 18-20 -> converged.
    values = [min(0.9, 0.05 * i) for i in range(30)]
    assert classify(list(enumerate(values)), metric="val/exact_match") == "converged"
    # Two evaluations: the window is both of them.
    assert classify([(0, 0.1), (10, 0.5)]) == "still_improving"


def _frames():
    trials = pd.DataFrame(
        {
            "trial_id": ["a", "b", "c", "d"],
            "status": ["TERMINATED", "TERMINATED", "DIVERGED", "TERMINATED"],
            "stopped_reason": ["max_steps", "max_steps", "diverged", "max_steps"],
            "model.d_model": [64, 128, 128, 256],
            "test/exact_match": [0.95, 0.509, 0.0, 0.5],
        }
    )
    records = [
        *(("a", "val/exact_match", s, v) for s, v in _curve(FLAT)),
        *(("b", "val/exact_match", s, v) for s, v in _curve(RISING)),
        *(("c", "val/exact_match", s, v) for s, v in _curve(RISING)),
        ("a", "test/exact_match", 600, 0.95),
    ]
    curves = pd.DataFrame.from_records(records, columns=["trial_id", "metric", "step", "value"])
    return trials, curves


def test_convergence_column_and_monitored_metric():
    trials, curves = _frames()
    # test/* is logged once, at the end: its history cannot say anything
    assert monitored_metric(curves, "test/exact_match") == "val/exact_match"
    labels = convergence_column(trials, curves, "test/exact_match")
    assert labels.tolist() == ["converged", "still_improving", "diverged", "unknown"]
    framed = with_convergence(trials, curves, "test/exact_match")
    assert list(framed.columns[:4]) == ["trial_id", "status", "stopped_reason", "convergence"]


def test_markdown_marks_still_improving_cells_with_a_footnote():
    trials, curves = _frames()
    trials = with_convergence(trials, curves)
    spec = TableSpec(rows=("model.d_model",), values=("test/exact_match",))
    table = build_table(trials, spec)
    assert table.loc[128, ("convergence", "still_improving")] == 1
    text = to_markdown(table, spec)
    lines = text.splitlines()
    assert lines[2].endswith("0.950 |") and "↑" not in lines[2]
    assert lines[3].endswith(" ↑ |")  # 128: b still improving (c diverged), marked
    assert "raise train.max_steps" in text.splitlines()[-1]
    pivot = TableSpec(rows=("status",), columns=("model.d_model",), values=("test/exact_match",))
    text = to_markdown(build_table(trials, pivot), pivot)
    assert text.count("↑") == 2  # one marked cell + the footnote
    unmarked = to_markdown(build_table(trials.drop(columns="convergence"), spec), spec)
    assert "↑" not in unmarked


def test_end_of_run_line_names_the_budget_key_the_trials_used():
    trials, curves = _frames()
    trials = with_convergence(trials, curves)
    assert improving_line(trials) == (
        "still improving: 1 of 4 trials were still improving when they stopped "
        "(budget-limited); raise train.max_steps to see where they level off"
    )
    assert budget_key(trials.assign(**{"train.flops_budget": 1e12})) == "train.flops_budget"
    assert budget_key(trials.assign(**{"train.tokens_budget": [None, 1e6, None, None]})) == (
        "train.tokens_budget"
    )
    assert improving_line(trials[trials["convergence"] != "still_improving"]) is None
    budgeted = trials.assign(**{"train.flops_budget": 1e12})
    spec = TableSpec(rows=("model.d_model",), values=("test/exact_match",))
    text = to_markdown(build_table(budgeted, spec), spec, budget_key(budgeted))
    assert text.splitlines()[-1].endswith("raise train.flops_budget._")


def test_a_tag_from_mlflow_wins_and_gaps_are_computed():
    trials, curves = _frames()
    trials.insert(3, "convergence", ["still_improving", None, None, None])
    labels = with_convergence(trials, curves)["convergence"].tolist()
    assert labels == ["still_improving", "still_improving", "diverged", "unknown"]


@pytest.mark.parametrize(
    ("time_budget_s", "status", "reason", "label"),
    [
        (None, "EARLY_STOPPED", "scheduler", "early_stopped"),  # ASHA stopped it
        (3600.0, "EARLY_STOPPED", "scheduler", "early_stopped"),  # budget not yet spent
        (1e-9, "TERMINATED", "time_budget", "time_budget"),  # the sweep's budget ran out
    ],
)
def test_a_trial_cut_by_the_sweeps_time_budget_is_labelled_time_budget(
    tmp_path, time_budget_s, status, reason, label
):
    uri = fresh_store(tmp_path / "mlflow.db")
    base = {"task": {"name": "addition", "n_digits": 2}, "model": {"d_model": 16, "n_head": 2}}
    resolve = functools.partial(resolve_run_config, base, derived={})
    tracker = MLflowTracker(uri, "budget", resolve, describe)
    tracker.setup(stop=None, num_samples=1, total_num_samples=1, time_budget_s=time_budget_s)
    tracker.start_parent("sweep: {name: budget}\n")
    trial = FakeTrial("t_0", {"model.d_model": 16})
    tracker.on_trial_start(0, [], trial)
    for i, (step, value) in enumerate(_curve(RISING)):  # still rising when it was cut
        result = {"step": step, "val/exact_match": value, "training_iteration": i + 1}
        tracker.on_trial_result(i + 1, [], trial, result)
    tracker.on_trial_complete(9, [], trial)
    tracker.finish_parent()
    client = MlflowClient(uri)
    (run,) = client.search_runs(
        [client.get_experiment_by_name("budget").experiment_id], "tags.`sweep.role` = 'trial'"
    )
    tags = run.data.tags
    assert (tags["sweep.status"], tags["sweep.stopped_reason"]) == (status, reason)
    assert tags[CONVERGENCE_TAG] == label


@pytest.mark.parametrize("again", ["lost_trial_round", "resume"])
def test_a_trial_cut_after_the_budget_ran_out_in_a_later_round_is_labelled_time_budget(
    tmp_path, again
):
    """The sweep's budget runs out after the first fit set Tune up; then Tune is set up again
    from its snapshot, by a lost-trial round (sweeps.runtime.lost: this driver's callbacks) or
    by --resume (a new driver's). Tune's TimeoutStopper, restored, counts on from the first
    fit, so the trials it cuts then are the budget's; before, each setup started the
    tracker's budget clock anew and labelled them stopped by the scheduler."""
    uri = fresh_store(tmp_path / "mlflow.db")
    resolve = functools.partial(resolve_run_config, {"model": {"d_model": 16}}, derived={})
    tracker = MLflowTracker(uri, "budget", resolve, describe)
    callbacks = bind(f"budget-{again}", [tracker])
    info = {"stop": None, "num_samples": 1, "total_num_samples": 1, "time_budget_s": 1.0}
    callbacks.setup(**info)
    tracker.start_parent("sweep: {name: budget}\n")
    trial = FakeTrial("t_0", {"model.d_model": 16})
    callbacks.on_trial_start(0, [], trial)
    snapshot = pickle.loads(pickle.dumps(callbacks))  # what Tune saves and restores
    state = pickle.loads(pickle.dumps(callbacks.get_state()))
    assert tracker.outbox.flush()
    time.sleep(1.2)  # the budget runs out
    if again == "resume":  # a new driver: its own tracker, bound under the sweep's name
        tracker = MLflowTracker(uri, "budget", resolve, describe)
        bind(f"budget-{again}", [tracker])
    snapshot.set_state(state)
    snapshot.setup(**info)
    snapshot.on_trial_start(1, [], trial)
    snapshot.on_trial_complete(2, [], trial)  # cut by Tune's stopper
    tracker.finish_parent()
    client = MlflowClient(uri)
    (run,) = client.search_runs(
        [client.get_experiment_by_name("budget").experiment_id], "tags.`sweep.role` = 'trial'"
    )
    tags = run.data.tags
    assert (tags["sweep.status"], tags["sweep.stopped_reason"]) == ("TERMINATED", "time_budget")

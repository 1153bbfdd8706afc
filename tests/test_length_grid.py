"""The length grid (arith.data.length_grid): its problems, its ratio, its run and its heatmap."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from arith import config as config_lib
from arith.data import length_grid
from arith.data.dataset import build_dataset
from arith.data.length_grid import RATIO_KEY, SUCCESS_KEY, extrapolation_ratio
from arith.problems import tasks
from arith.training.reported import reported_metrics
from arith.training.trainer import train
from sweeps.analysis.plots import plots_for

ADDITION = tasks.TaskConfig(name="addition", n_digits=2)


@pytest.mark.parametrize(
    ("per_length", "ratio"),
    [
        ({1: 1.0, 4: 1.0, 8: 1.0, 12: 0.995, 16: 0.99}, 2.0),  # 99 % itself counts
        ({1: 1.0, 4: 1.0, 8: 0.5, 12: 1.0, 16: 1.0}, 0.5),  # a dip at 8 ends it at 4
        ({1: 1.0, 8: 1.0, 12: 0.98, 16: 1.0}, 1.0),
        ({1: 0.2, 8: 1.0, 16: 1.0}, 0.0),  # the shortest length misses: 0
        ({1: 0.0, 4: 0.0, 8: 0.0}, 0.0),  # none reaches 99 %
        ({}, 0.0),
    ],
)
def test_extrapolation_ratio_stops_at_the_first_length_below_99(per_length, ratio):
    assert extrapolation_ratio(per_length, trained=8) == ratio


def test_grid_lengths_keep_one_every_step_and_the_maximum():
    assert length_grid.grid_lengths(48, 4) == [1, *range(4, 49, 4)]
    assert length_grid.grid_lengths(5, 1) == [1, 2, 3, 4, 5]
    assert length_grid.grid_lengths(10, 4) == [1, 4, 8, 10]
    assert length_grid.grid_lengths(0, 1) == []


def test_grid_problems_have_their_cells_lengths_and_are_held_out():
    def every_third(problems):  # a stand-in for training: it holds a third of the draws
        return np.arange(len(problems)) % 3 == 0

    rng = np.random.default_rng(0)
    problems = length_grid.grid_problems(ADDITION, [1, 3, 7], 5, rng, every_third)
    cells, counts = np.unique(problems.operand_len, axis=0, return_counts=True)
    assert {tuple(c) for c in cells.tolist()} == {(a, b) for a in (1, 3, 7) for b in (1, 3, 7)}
    assert counts.tolist() == [5] * 9
    operands, answers = tasks.to_ints(problems)
    for (a, b), (la, lb), answer in zip(operands, problems.operand_len, answers, strict=True):
        assert (len(str(a)), len(str(b))) == (la, lb)
        assert answer == a + b


def test_the_grid_holds_no_training_problem_and_fills_its_cells():
    # 2-digit addition is enumerated: 70 % of the 1- and 2-digit pairs are training problems
    config = config_lib.load(None, ["task.n_digits=2", "data.length_grid_max=4"])
    dataset = build_dataset(config.task, config.format, config.data, seed=0)
    grid = dataset.length_grid
    assert grid is not None and not dataset.is_training(grid).any()
    record = dataset.records["length_grid"]
    assert (record.before, record.dropped, record.train_overlap) == (16 * 8, 0, 0)
    _, counts = np.unique(grid.operand_len, axis=0, return_counts=True)
    assert counts.tolist() == [8] * 16
    assert dataset.max_seq_len() >= dataset.format.max_seq_len(4)


def test_cell_metrics_pool_each_cell_and_each_length():
    la = np.array([1, 1, 1, 2, 2, 3, 3, 1])
    lb = np.array([1, 1, 2, 1, 2, 3, 1, 3])
    problems = tasks.sample(ADDITION, 8, np.random.default_rng(1))
    problems.operand_len = np.stack([la, lb], axis=1)  # only the lengths are read
    exact = np.array([1, 0, 1, 1, 1, 1, 1, 1], dtype=bool)
    metrics = length_grid.cell_metrics(problems, exact, trained=2)
    assert metrics["lengths/exact_match/1x1"] == 0.5
    assert metrics["lengths/exact_match/3x1"] == 1.0
    assert metrics[RATIO_KEY] == 0.0  # length 1 scores 50 %
    metrics = length_grid.cell_metrics(problems, np.ones(8, dtype=bool), trained=2)
    assert metrics[RATIO_KEY] == 1.5


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["task.name=modular", "data.length_grid_max=4"], "data.length_grid_max"),
        (["data.length_grid_max=-1"], "data.length_grid_max"),
        (["data.length_grid_max=201"], "data.length_grid_max"),
        (["data.length_grid_max=4", "data.length_grid_step=0"], "data.length_grid_step"),
        (["data.length_grid_max=4", "data.length_grid_size=0"], "data.length_grid_size"),
        # the Abacus table must index the grid's longest answer too (49 digits for 48 + 48)
        (["model.position=abacus", "model.abacus_max_k=40", "data.length_grid_max=48"],
         "model.abacus_max_k"),
    ],
)  # fmt: skip
def test_bad_grid_settings_are_refused(overrides, field):
    with pytest.raises(config_lib.ConfigError) as err:
        config_lib.load(None, overrides)
    assert err.value.path == field


def test_a_run_reports_the_grid_and_success_and_they_draw_a_heatmap():
    config = config_lib.load(
        None,
        [
            "task.n_digits=2", "format.name=reversed", "model.d_model=16", "model.n_layer=1",
            "train.max_steps=2", "train.batch_size=16", "train.train_eval_size=16",
            "data.val_size=16", "data.test_size=16", "data.longer_n_digits=[3,3]",
            "data.longer_size=16", "data.length_grid_max=3", "data.length_grid_size=2",
        ],
    )  # fmt: skip
    summary = train(config)
    grid_keys = {k for k in summary if k.startswith("lengths/")}
    assert RATIO_KEY in grid_keys and "lengths/exact_match/3x2" in grid_keys
    assert {SUCCESS_KEY, "data/length_grid/size"} <= set(summary)
    assert grid_keys | {SUCCESS_KEY} <= reported_metrics(config)
    assert summary[SUCCESS_KEY] == float(summary["longer/exact_match"] >= 0.99)
    trials = pd.DataFrame([{**summary, "task.n_digits": 2, "model.position": "learned"}])
    assert "length_heatmap" in plots_for(trials, pd.DataFrame())

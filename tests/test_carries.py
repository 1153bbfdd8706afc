"""Carry chains: counting them, the stratified carry set, and the carry breakdown metrics."""

from __future__ import annotations

import numpy as np
import pytest

from arith import carries, tasks
from arith import config as config_lib
from arith.data import build_dataset, split_of
from arith.errors import ConfigError
from arith.evaluate import _carry_breakdown, ended_early
from arith.formats import FormatConfig, build_format
from arith.trainer import reported_metrics, train

ADD = tasks.TaskConfig(name="addition", n_digits=6)
MULTI = tasks.TaskConfig(name="multi_op", n_digits=4)


def brute_chain(a: int, b: int, op: str) -> int:
    """Longest run of carries (or borrows), one column at a time with Python ints."""
    if op == "-":
        a, b = max(a, b), min(a, b)
    best = run = carry = 0
    while a or b:
        if op == "+":
            total = a % 10 + b % 10 + carry
            carry = int(total >= 10)
        else:
            carry = int(a % 10 - b % 10 - carry < 0)
        run = run + 1 if carry else 0
        best = max(best, run)
        a, b = a // 10, b // 10
    return best


@pytest.mark.parametrize(
    ("a", "b", "chain"), [(999, 1, 3), (15, 17, 1), (12, 34, 0), (9999, 9999, 4), (0, 0, 0)]
)
def test_longest_carry_chain_of_known_sums(a, b, chain):
    problems = tasks.from_ints(ADD, [[a, b]])
    assert carries.longest_chain(problems, ("+",)).tolist() == [chain]


def test_longest_chain_matches_column_by_column_reference():
    rng = np.random.default_rng(0)
    rows = rng.integers(0, 10**4, size=(3000, 2)).tolist()
    ops = rng.choice(["+", "-", "*"], size=len(rows)).tolist()
    problems = tasks.from_ints(MULTI, rows, ops)
    got = carries.longest_chain(problems, tasks.op_symbols(MULTI))
    want = [
        -1 if op == "*" else brute_chain(a, b, op) for (a, b), op in zip(rows, ops, strict=True)
    ]
    assert got.tolist() == want


def test_borrow_chain_of_1000_minus_1():
    problems = tasks.from_ints(MULTI, [[1000, 1], [1, 1000]], ["-", "-"])
    assert carries.longest_chain(problems, tasks.op_symbols(MULTI)).tolist() == [3, 3]


@pytest.mark.parametrize("k", [1, 3, 8])
def test_stratified_operands_hold_every_chain_length_equally(k):
    operands = carries.stratified_operands(k, 40, np.random.default_rng(k))
    problems = tasks.from_operands(tasks.TaskConfig(name="addition", n_digits=k), operands)
    chains = carries.longest_chain(problems, ("+",))
    assert np.bincount(chains, minlength=k + 1).tolist() == [40] * (k + 1)
    if k > 1:  # full width: the leading digit is never 0
        assert (problems.operand_len == k).all()


def test_carry_set_is_stratified_held_out_and_unique():
    cfg = config_lib.load(None, ["task.n_digits=3", "data.carry_size=30"])
    dataset = build_dataset(cfg.task, cfg.format, cfg.data, seed=0)
    carry = dataset.eval_sets["carry"]
    chains = carries.longest_chain(carry, ("+",))
    assert np.bincount(chains).tolist() == [30] * 4
    keys = carry.keys()
    assert len(np.unique(keys)) == len(keys)
    assert not np.isin(keys, dataset.train_pool.keys()).any()


def test_carry_set_of_a_hashed_space_avoids_the_training_split():
    cfg = config_lib.load(None, ["task.n_digits=12", "data.carry_size=10"])
    dataset = build_dataset(cfg.task, cfg.format, cfg.data, seed=1)
    carry = dataset.eval_sets["carry"]
    assert len(carry) == 10 * 13

    split = split_of(carry.keys(), dataset.split_salt, cfg.data.val_fraction, 0.15)
    assert (split != 0).all()


def test_a_carry_set_short_of_its_size_says_so():
    # 1-digit sums: 100 problems, about 30 of them held out, so 30 per chain cannot be had
    cfg = config_lib.load(None, ["task.n_digits=1", "data.carry_size=30"])
    with pytest.warns(UserWarning, match=r"fewer than data\.carry_size=30"):
        dataset = build_dataset(cfg.task, cfg.format, cfg.data, seed=0)
    carry = dataset.eval_sets["carry"]
    assert len(carry) < 60
    record = dataset.records["carry"]
    assert (record.before, record.size, record.dropped) == (60, len(carry), 60 - len(carry))
    assert dataset.data_metrics()["data/carry/dropped"] == 60 - len(carry)


def test_carry_breakdown_scores_each_chain_length():
    problems = tasks.from_ints(ADD, [[999, 1], [12, 34], [15, 17], [11, 11]])
    exact = np.array([False, True, True, False])
    got = _carry_breakdown(problems, exact, ADD)
    assert got == {
        "exact_match/carry_0": 0.5,
        "exact_match/carry_1": 1.0,
        "exact_match/carry_3": 0.0,
    }


def test_carry_set_needs_addition():
    with pytest.raises(ConfigError, match=r"data\.carry_size"):
        config_lib.load(None, ["task.name=modular", "data.carry_size=10"])


def test_a_run_reports_carry_metrics_it_declares():
    cfg = config_lib.load(
        None,
        [
            "task.n_digits=2",
            "data.carry_size=10",
            "data.val_size=50",
            "data.test_size=50",
            "model.d_model=16",
            "model.n_layer=1",
            "train.max_steps=5",
            "train.eval_every=5",
        ],
    )
    summary = train(cfg)
    carry_keys = {k for k in summary if "carry_" in k}
    assert {"carry/exact_match/carry_0", "carry/exact_match/carry_2"} <= carry_keys
    assert "test/exact_match/carry_1" in carry_keys
    assert carry_keys <= reported_metrics(cfg)
    assert {"test/short_answers", "carry/short_answers"} <= set(summary) & reported_metrics(cfg)


def test_answers_that_end_before_the_expected_one_are_counted():
    task = tasks.TaskConfig(name="addition", n_digits=3)
    fmt = build_format(FormatConfig(name="spaced"), task)
    got = ["12", "1 234", "", "12 345"]
    expected = ["123", "1234", "1", "2 345"]
    assert ended_early(got, expected, fmt, fmt).tolist() == [True, False, True, False]

"""Carry chains: counting them, the stratified carry set, and the carry breakdown metrics."""

from __future__ import annotations

import numpy as np
import pytest

from arith import config as config_lib
from arith.data.dataset import build_dataset, split_of
from arith.errors import ConfigError
from arith.evaluation.evaluate import _carry_breakdown, ended_early
from arith.problems import carries, tasks
from arith.text.formats import FormatConfig, build_format
from arith.training.reported import reported_metrics
from arith.training.trainer import train

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
        "exact_match/cascade": 0.0,  # 999 + 1: the ones' carry reaches the top and out
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
    carry_keys = {k for k in summary if "carry_" in k or "cascade" in k or "digit_acc" in k}
    assert {"carry/exact_match/carry_0", "carry/exact_match/carry_2"} <= carry_keys
    assert "test/exact_match/carry_1" in carry_keys
    # the cascade set follows data.carry_size; every answer digit is scored, 0 the ones
    assert {"cascade/exact_match", "cascade/exact_match/cascade"} <= carry_keys
    assert {f"cascade/digit_accuracy/{i}" for i in range(3)} <= carry_keys
    assert "test/digit_accuracy/2" in carry_keys
    # validation is measured at every evaluation without decoding: no text, so no digits
    assert "val/digit_accuracy/0" not in carry_keys
    assert carry_keys <= reported_metrics(cfg)
    assert {"test/short_answers", "carry/short_answers"} <= set(summary) & reported_metrics(cfg)


def test_answers_that_end_before_the_expected_one_are_counted():
    task = tasks.TaskConfig(name="addition", n_digits=3)
    fmt = build_format(FormatConfig(name="spaced"), task)
    got = ["12", "1 234", "", "12 345"]
    expected = ["123", "1234", "1", "2 345"]
    assert ended_early(got, expected, fmt, fmt).tolist() == [True, False, True, False]


def brute_cascade(a: int, b: int, op: str) -> bool:
    """The cascade rule with Python ints, one column at a time (arith.problems.carries.cascades)."""
    if op == "-":
        a, b = max(a, b), min(a, b)
    width = max(len(str(a)), len(str(b)))
    cols = [(a // 10**i % 10, b // 10**i % 10) for i in range(width)]  # the ones first
    value = [x + y if op == "+" else x - y for x, y in cols]
    if op == "+":
        return width >= 2 and value[0] >= 10 and all(v == 9 for v in value[1:-1]) and value[-1] >= 9
    return width >= 2 and value[0] < 0 and all(v == 0 for v in value[1:-1])


@pytest.mark.parametrize(
    ("a", "b", "cascade"),
    [
        (1166, 9834, True),  # = 11000: the plain model answered 10000
        (4584, 9416, True),  # = 14000: answered 13000
        (1234, 1111, False),
        (16, 84, True),
        (9999, 1, True),
        (9999, 9999, False),  # every column carries on its own
        (1176, 9834, False),  # the tens carry on their own: the chain restarts
        (7, 5, False),  # one column: nothing travels
    ],
)
def test_cascades_of_known_sums(a, b, cascade):
    problems = tasks.from_ints(ADD, [[a, b]])
    assert carries.cascades(problems, ("+",)).tolist() == [cascade]


def test_cascades_match_column_by_column_reference():
    rng = np.random.default_rng(1)
    rows = tasks.to_ints(tasks.from_operands(ADD, carries.cascade_operands(4, 500, rng)))[0]
    rows += rng.integers(0, 10**4, size=(2000, 2)).tolist()
    # borrow cascades: equal middle digits, the smaller ones digit on the larger operand
    top, middle, ones = (
        rng.integers(1, 10, (300, 2)),
        rng.integers(0, 100, 300),
        rng.integers(0, 10, (300, 2)),
    )
    rows += (np.sort(top, axis=1) * 1000 + middle[:, None] * 10 + -np.sort(-ones, axis=1)).tolist()
    ops = rng.choice(["+", "-", "*"], size=len(rows)).tolist()
    problems = tasks.from_ints(MULTI, rows, ops)
    got = carries.cascades(problems, tasks.op_symbols(MULTI))
    want = [op != "*" and brute_cascade(a, b, op) for (a, b), op in zip(rows, ops, strict=True)]
    assert got.tolist() == want
    for op in ("+", "-"):  # each kind present, and most problems not cascades
        assert 30 < sum(w for w, o in zip(want, ops, strict=True) if o == op) < len(rows) / 6


@pytest.mark.parametrize(("a", "b"), [(5123, 4124), (1000, 1), (1, 1000), (7123, 4124)])
def test_a_borrow_from_the_ones_into_the_top_digit_cascades(a, b):
    problems = tasks.from_ints(MULTI, [[a, b], [1000, 999]], ["-", "-"])
    assert carries.cascades(problems, tasks.op_symbols(MULTI)).tolist() == [True, False]


def test_cascade_set_is_held_out_unique_and_all_cascades():
    cfg = config_lib.load(None, ["task.n_digits=5", "data.carry_size=5", "data.cascade_size=300"])
    dataset = build_dataset(cfg.task, cfg.format, cfg.data, seed=0)
    cascade = dataset.eval_sets["cascade"]
    assert len(cascade) == 300 and (cascade.operand_len == 5).all()
    assert carries.cascades(cascade, ("+",)).all()
    assert (cascade.answer_len == 6).all()  # one digit longer than the operands
    keys = cascade.keys()
    assert len(np.unique(keys)) == len(keys)
    assert not dataset.is_training(cascade).any()
    assert dataset.data_metrics()["data/cascade/train_overlap"] == 0


def test_cascade_set_of_a_small_space_avoids_its_training_pool():
    # 2-digit sums hold 2,385 cascades, about 70 % of them training ones
    cfg = config_lib.load(None, ["task.n_digits=2", "data.cascade_size=1000"])
    with pytest.warns(UserWarning, match=r"the cascade set holds \d+ of its 1000"):
        dataset = build_dataset(cfg.task, cfg.format, cfg.data, seed=0)
    cascade = dataset.eval_sets["cascade"]
    assert 500 < len(cascade) < 1000
    assert not np.isin(cascade.keys(), dataset.train_pool.keys()).any()
    assert carries.cascades(cascade, ("+",)).all()


@pytest.mark.parametrize(
    ("overrides", "size"),
    [
        (["data.carry_size=7"], 7),  # follows the carry set
        (["data.carry_size=7", "data.cascade_size=0"], 0),
        (["data.cascade_size=4"], 4),
        (["data.carry_size=7", "task.n_digits=1"], 0),  # one digit: nothing travels
    ],
)
def test_cascade_set_size_follows_the_carry_set(overrides, size):
    cfg = config_lib.load(None, overrides)
    assert cfg.data.cascade_problems(cfg.task) == size
    assert ("cascade/exact_match" in reported_metrics(cfg)) is (size > 0)


@pytest.mark.parametrize(
    "overrides",
    [["task.name=modular", "data.cascade_size=10"], ["task.n_digits=1", "data.cascade_size=3"]],
)
def test_cascade_set_needs_addition_of_two_digits(overrides):
    with pytest.raises(ConfigError, match=r"data\.cascade_size"):
        config_lib.load(None, overrides)

"""Tests for arith.problems.tasks: exact answers, sampling distributions, enumeration, config
errors."""

from __future__ import annotations

import operator

import numpy as np
import pytest

from arith import dataconf
from arith.errors import ConfigError
from arith.problems import tasks
from arith.problems.tasks import TaskConfig

PY_OPS = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "//": operator.floordiv,
    "%": operator.mod,
}


def check_exact(task: TaskConfig, problems: tasks.Problems) -> None:
    """Every answer equals Python's int arithmetic on the operands."""
    operands, answers = tasks.to_ints(problems)
    symbols = tasks.op_symbols(task)
    for (a, b), c, op in zip(operands, answers, problems.op, strict=True):
        assert PY_OPS[symbols[op]](a, b) == c, (a, symbols[op], b, c)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_from_ints_multi_op_examples():
    task = TaskConfig("multi_op")
    rows = [[0, 999], [123, 45], [999, 999], [5, 4], [5, 4], [0, 7]]
    p = tasks.from_ints(task, rows, ["-", "*", "*", "//", "%", "//"])
    assert tasks.to_ints(p)[1] == [-999, 5535, 998001, 1, 1, 0]


def test_from_ints_needs_ops_for_multi_op():
    with pytest.raises(ValueError, match="ops is required"):
        tasks.from_ints(TaskConfig("multi_op"), [[1, 2]])


@pytest.mark.parametrize(
    ("task", "rows", "ops", "match"),
    [
        (TaskConfig("multi_op"), [[5, 0]], ["//"], "division by zero"),
        (TaskConfig("modular", operation="div"), [[5, 0]], None, "division by zero"),
        (TaskConfig("modular"), [[97, 1]], None, "below the modulus"),
        (TaskConfig(), [[-1, 2]], None, "non-negative"),
        (TaskConfig(), [[1, 2, 3]], None, "operands per problem"),
        (TaskConfig("multi_op"), [[1, 2]], ["^"], "not one of"),
    ],
)
def test_from_ints_rejects_bad_input(task, rows, ops, match):
    with pytest.raises(ValueError, match=match):
        tasks.from_ints(task, rows, ops)


def test_addition_100_digits_exact():
    task = TaskConfig("addition", n_digits=100)
    problems = tasks.sample(task, 500, rng())
    check_exact(task, problems)
    assert problems.answer.shape[1] == 101


def test_multiplication_20_digits_exact():
    task = TaskConfig("multiplication", n_digits=20, operand_lengths="bucketed")
    check_exact(task, tasks.sample(task, 500, rng()))


def test_multi_op_200_digits_exact():
    task = TaskConfig("multi_op", n_digits=200)
    check_exact(task, tasks.sample(task, 200, rng()))


def test_edge_cases_exact_and_carrying():
    task = TaskConfig("addition", n_digits=4)
    edges = tasks.edge_cases(task)
    check_exact(task, edges)
    operands, answers = tasks.to_ints(edges)
    assert [9999, 1] in operands and 10000 in answers and [0, 0] in operands
    mul = TaskConfig("multiplication", n_digits=3)
    check_exact(mul, tasks.edge_cases(mul))
    assert [999, 999] in tasks.to_ints(tasks.edge_cases(mul))[0]
    multi = TaskConfig("multi_op")
    check_exact(multi, tasks.edge_cases(multi))
    assert -999 in tasks.to_ints(tasks.edge_cases(multi))[1]
    assert tasks.edge_cases(TaskConfig("sorting")) is None
    assert tasks.edge_cases(TaskConfig("modular")) is None


def test_length_override_lengths_and_exactness():
    task = TaskConfig("addition", n_digits=3)
    p = tasks.sample(task, 2000, rng(), n_digits=(4, 8))
    assert p.operands.shape[2] == 8
    assert p.operand_len.min() == 4 and p.operand_len.max() == 8
    operands, _ = tasks.to_ints(p)
    assert all(
        len(str(v)) == n
        for row, lr in zip(operands, p.operand_len, strict=True)
        for v, n in zip(row, lr, strict=True)
    )
    check_exact(task, p)


def test_fixed_and_uniform_lengths():
    fixed = tasks.sample(TaskConfig(n_digits=4, operand_lengths="fixed"), 5000, rng())
    assert (fixed.operand_len == 4).all() and (fixed.operands[:, :, 0] > 0).all()
    one = tasks.sample(TaskConfig(n_digits=1, operand_lengths="fixed"), 5000, rng())
    assert (one.operands == 0).any()  # one-digit "fixed" includes 0
    uni = tasks.sample(TaskConfig(n_digits=3), 20000, rng())
    values = np.array(tasks.to_ints(uni)[0])
    assert values.min() == 0 and values.max() == 999
    assert abs((values < 100).mean() - 0.1) < 0.01  # uniform values: 10% have < 3 digits


def test_bucketed_length_pairs_uniform():
    k, n = 4, 160_000
    p = tasks.sample(TaskConfig(n_digits=k, operand_lengths="bucketed"), n, rng())
    pair = (p.operand_len[:, 0] - 1) * k + (p.operand_len[:, 1] - 1)
    counts = np.bincount(pair, minlength=k * k)
    assert counts.size == k * k
    assert np.abs(counts / n - 1 / (k * k)).max() < 0.004  # std is about 0.0006
    check_exact(TaskConfig(n_digits=k), p)


@pytest.mark.parametrize("k", [1, 3])
def test_multi_op_never_divides_by_zero(k):
    task = TaskConfig("multi_op", n_digits=k)
    p = tasks.sample(task, 100_000, rng(k))
    dividing = np.isin(p.op, [task.ops.index("//"), task.ops.index("%")])
    assert dividing.sum() > 30_000
    b = p.operands[dividing, 1]
    assert b.any(axis=1).all()
    check_exact(task, p.take(np.arange(2000)))


def test_op_weights_respected():
    weights = (1.0, 2.0, 3.0, 4.0, 0.0)
    n = 100_000
    p = tasks.sample(TaskConfig("multi_op", op_weights=weights), n, rng())
    counts = np.bincount(p.op, minlength=5)
    assert counts[4] == 0
    expected = n * np.array(weights[:4]) / sum(weights)
    chi2 = (((counts[:4] - expected) ** 2) / expected).sum()
    assert chi2 < 25, (counts, chi2)  # 3 degrees of freedom: P(chi2 > 25) < 1e-4


@pytest.mark.parametrize("operation", ["add", "sub", "mul", "div"])
def test_modular_enumerate_all(operation):
    p = 97
    task = TaskConfig("modular", modulus=p, operation=operation)
    everything = tasks.enumerate_all(task)
    size = p * (p - 1) if operation == "div" else p * p
    assert len(everything) == size == tasks.space_size(task)
    assert len(np.unique(everything.keys())) == size
    operands, answers = tasks.to_ints(everything)
    for (a, b), c in zip(operands, answers, strict=True):
        if operation == "add":
            assert c == (a + b) % p
        elif operation == "sub":
            assert c == (a - b) % p
        elif operation == "mul":
            assert c == a * b % p
        else:
            assert b != 0 and a == b * c % p and 0 <= c < p


def test_modular_sample_in_range():
    task = TaskConfig("modular", modulus=7, operation="div")
    p = tasks.sample(task, 1000, rng())
    operands, answers = tasks.to_ints(p)
    for (a, b), c in zip(operands, answers, strict=True):
        assert 0 <= a < 7 and 0 < b < 7 and a == b * c % 7
    assert tasks.op_symbols(task) == ("/",)
    assert tasks.max_answer_digits(TaskConfig("modular", modulus=97)) == 2


def test_enumerate_all_arithmetic():
    add = TaskConfig("addition", n_digits=2)
    everything = tasks.enumerate_all(add)
    assert len(everything) == 10_000 == tasks.space_size(add)
    check_exact(add, everything)
    fixed = TaskConfig("multiplication", n_digits=2, operand_lengths="fixed")
    assert len(tasks.enumerate_all(fixed)) == 90 * 90 == tasks.space_size(fixed)
    multi = TaskConfig("multi_op", n_digits=2)
    everything = tasks.enumerate_all(multi)
    assert len(everything) == 3 * 100 * 100 + 2 * 100 * 99 == tasks.space_size(multi)
    assert len(np.unique(everything.keys())) == len(everything)


def test_space_size():
    assert tasks.space_size(TaskConfig("multi_op")) == 3 * 1000 * 1000 + 2 * 999 * 1000
    assert tasks.space_size(TaskConfig(n_digits=3)) == 1_000_000
    assert tasks.space_size(TaskConfig(n_digits=4)) is None  # 10**8 > 5e6
    assert tasks.space_size(TaskConfig(operand_lengths="bucketed")) is None
    assert tasks.space_size(TaskConfig("sorting")) is None
    assert tasks.space_size(TaskConfig("modular", modulus=3331)) is None  # 3331**2 > 5e6
    with pytest.raises(ValueError, match="too many"):
        tasks.enumerate_all(TaskConfig("sorting"))


def test_max_answer_digits():
    assert tasks.max_answer_digits(TaskConfig(n_digits=3)) == 4
    assert tasks.max_answer_digits(TaskConfig("multiplication", n_digits=3)) == 6
    assert tasks.max_answer_digits(TaskConfig("multi_op")) == 6
    assert tasks.max_answer_digits(TaskConfig("multi_op", ops=("-", "//"))) == 3
    assert tasks.max_answer_digits(TaskConfig(n_digits=3), n_digits=10) == 11
    assert tasks.max_answer_digits(TaskConfig("sorting", max_items=7)) == 7


def test_sorting_order_ties_and_absent_items():
    task = TaskConfig("sorting", n_digits=6)
    p = tasks.from_ints(task, [[89850, 1, 210273], [5, 3, 5, 0], [7]])
    assert p.answer_order.tolist() == [[1, 0, 2, -1, -1], [3, 1, 0, 2, -1], [0, -1, -1, -1, -1]]
    assert p.operand_len[0].tolist() == [5, 1, 6, 0, 0]
    operands, answers = tasks.to_ints(p)
    assert operands == [[89850, 1, 210273], [5, 3, 5, 0], [7]] and answers == [-1, -1, -1]


def test_sorting_sample_matches_python_sort():
    task = TaskConfig("sorting", n_digits=2, max_items=6)
    p = tasks.sample(task, 3000, rng())
    counts = (p.operand_len > 0).sum(axis=1)
    assert counts.min() == 1 and counts.max() == 6
    operands, _ = tasks.to_ints(p)
    for row, order in zip(operands, p.answer_order.tolist(), strict=True):
        expected = sorted(range(len(row)), key=lambda i: (row[i], i))
        assert order == expected + [-1] * (6 - len(row))


def test_keys_ignore_padding_and_identify_problems():
    task = TaskConfig(n_digits=3)
    a = tasks.from_ints(task, [[1, 2], [2, 1], [10, 2], [1, 2]])
    wide = tasks.Problems.concat([a, tasks.from_ints(task, [[12345678, 1]])])
    assert wide.operands.shape[2] == 8
    keys = wide.keys()
    assert keys[0] == keys[3] == a.keys()[0]
    assert len(set(keys.tolist())) == 4
    multi = TaskConfig("multi_op")
    ops = tasks.from_ints(multi, [[1, 2], [1, 2]], ["+", "*"]).keys()
    assert ops[0] != ops[1]
    sampled = tasks.sample(task, 200_000, rng())
    keys = sampled.keys()
    distinct_problems = np.unique(sampled.operands.reshape(len(sampled), -1), axis=0)
    assert len(np.unique(keys)) == len(distinct_problems)


def test_take_and_concat():
    task = TaskConfig("sorting")
    p = tasks.sample(task, 10, rng())
    q = tasks.Problems.concat([p.take(np.arange(5)), p.take(np.arange(5, 10))])
    assert tasks.to_ints(q) == tasks.to_ints(p)
    assert (q.answer_order == p.answer_order).all()
    rev = p.take(np.arange(9, -1, -1))
    assert tasks.to_ints(rev)[0] == tasks.to_ints(p)[0][::-1]
    assert len(rev) == 10


@pytest.mark.parametrize(
    ("kwargs", "path"),
    [
        ({"n_digits": 0}, "task.n_digits"),
        ({"n_digits": 201}, "task.n_digits"),
        ({"ops": ()}, "task.ops"),
        ({"ops": ("+", "^")}, "task.ops[1]"),
        ({"ops": ("+", "+")}, "task.ops"),
        ({"op_weights": (1.0,)}, "task.op_weights"),
        ({"op_weights": (1.0, -1.0, 1.0, 1.0, 1.0)}, "task.op_weights"),
        ({"modulus": 1}, "task.modulus"),
        ({"modulus": 2**31 + 11}, "task.modulus"),
        ({"max_items": 27}, "task.max_items"),
        ({"max_items": 0}, "task.max_items"),
        ({"name": "division"}, "task.name"),
        ({"operand_lengths": "random"}, "task.operand_lengths"),
        ({"operation": "pow"}, "task.operation"),
    ],
)
def test_bad_task_config(kwargs, path):
    with pytest.raises(ConfigError) as err:
        TaskConfig(**kwargs)
    assert err.value.path == path


def test_modulus_message_and_from_dict():
    with pytest.raises(ConfigError) as err:
        TaskConfig(modulus=96)
    assert str(err.value) == "task.modulus: expected a prime >= 2, but got 96"
    with pytest.raises(ConfigError) as err:
        dataconf.from_dict(TaskConfig, {"n_digits": 0}, "task")
    assert err.value.path == "task.n_digits"
    cfg = dataconf.from_dict(TaskConfig, {"name": "multi_op", "ops": ["+", "//"]}, "task")
    assert cfg.ops == ("+", "//")


def test_division_trace_ends_in_quotient_and_remainder_past_int64():
    from arith.problems import _digits, traces

    k, draw = 24, rng()
    number = lambda digits: int("".join(map(str, digits)) or "0")  # noqa: E731
    a = [number(draw.integers(0, 10, k)) for _ in range(48)] + [10**k - 1, 0]
    b = [number(draw.integers(0, 10, 1 + i % k)) or 1 for i in range(48)] + [1, 7]
    lines, n_lines = traces.division_trace(_digits.from_pyints(a, k), _digits.from_pyints(b, k))
    last = lines[np.arange(len(a)), n_lines - 1]  # a state line: remainder, quotient, ones first
    assert (last[:, 0] == traces.STATE).all()
    got = [(number(row[:k:-1]), number(row[k:0:-1])) for row in last]
    assert got == [divmod(x, y) for x, y in zip(a, b, strict=True)]

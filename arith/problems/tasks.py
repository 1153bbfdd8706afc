"""What problems a run learns: the task config, batches of problems as digit arrays, exact answers.

Five tasks, each with one literal example (operands -> answer):

- ``addition``: 1234 + 5678 -> 6912
- ``multiplication``: 123 * 45 -> 5535
- ``sorting``: items a=89850, b=1, c=210273 -> order b, a, c
- ``multi_op``: 0 - 999 -> -999 (ops ``+ - * // %``, b != 0 for ``//`` and ``%``)
- ``modular``: 20 / 74 mod 97 -> c with 20 == 74 * c (mod 97)

Problems are arrays, not strings (formats.py turns them into tokens), and the arithmetic runs on
digit arrays (arith/problems/_digits.py) so 200-digit operands stay exact. numpy only: data
generation must not pull in torch.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Literal

import numpy as np

from arith.errors import require
from arith.problems import _answers, _digits, _sampling
from arith.problems._problems import Problems

ALL_OPS = ("+", "-", "*", "//", "%")
MAX_DIGITS = _sampling.MAX_DIGITS
# Problems are enumerated (and split exactly) only while the space fits comfortably in memory.
MAX_ENUMERABLE = 5_000_000
# Modular products b * b must stay in int64 for the vectorised modular inverse.
MAX_MODULUS = 2**31
_MODULAR_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


def _is_prime(p: int) -> bool:
    if p < 2:
        return False
    return all(p % f for f in range(2, int(p**0.5) + 1))


@dataclass(frozen=True)
class TaskConfig:
    """Which arithmetic problems to generate (the ``task:`` section of a run config)."""

    # Task family.
    name: Literal["addition", "multiplication", "sorting", "multi_op", "modular"] = "addition"
    # k: maximum digits per operand (1..200); multi_op uses it too (seed 004: 3);
    # modular ignores it.
    n_digits: int = 3
    # fixed: exactly k digits; uniform: values uniform in [0, 10**k); bucketed: the pair of
    # lengths uniform over {1..k}^2, then values uniform with exactly those lengths.
    operand_lengths: Literal["fixed", "uniform", "bucketed"] = "uniform"
    # multi_op only: the operators, a subset of + - * // %.
    ops: tuple[str, ...] = ALL_OPS
    # multi_op sampling weights, one per op (normalised); None = uniform.
    op_weights: tuple[float, ...] | None = None
    # modular only: the prime p.
    modulus: int = 97
    # modular only: a + b, a - b, a * b (Grokfast's task) or a / b (c with a == b * c mod p,
    # b != 0: grokking's).
    operation: Literal["add", "sub", "mul", "div"] = "add"
    # sorting only: the number of items is uniform in 1..max_items (at most 26 letters).
    max_items: int = 5

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(TaskConfig)
        for field in ("name", "operand_lengths", "operation"):
            allowed = typing.get_args(hints[field])
            value = getattr(self, field)
            require(
                value in allowed, f"task.{field}", f"expected one of {allowed}, but got {value!r}"
            )
        n = self.n_digits
        require(
            isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_DIGITS,
            "task.n_digits",
            f"expected an integer in 1..{MAX_DIGITS}, but got {n!r}",
        )
        ops = tuple(self.ops)
        require(len(ops) > 0, "task.ops", "expected at least one operator, but got none")
        for i, op in enumerate(ops):
            require(op in ALL_OPS, f"task.ops[{i}]", f"expected one of {ALL_OPS}, but got {op!r}")
        require(
            len(set(ops)) == len(ops), "task.ops", f"expected distinct operators, but got {ops}"
        )
        if self.op_weights is not None:
            w = tuple(self.op_weights)
            require(
                len(w) == len(ops),
                "task.op_weights",
                f"expected {len(ops)} weights (one per op), but got {len(w)}",
            )
            require(
                all(x >= 0 for x in w) and sum(w) > 0,
                "task.op_weights",
                f"expected non-negative weights with a positive sum, but got {w}",
            )
        p = self.modulus
        is_int = isinstance(p, int) and not isinstance(p, bool)
        # Bound first: trial division of a huge p would take forever.
        require(
            not is_int or p < MAX_MODULUS,
            "task.modulus",
            f"expected a prime below 2**31 (int64 modular arithmetic), but got {p}",
        )
        require(is_int and _is_prime(p), "task.modulus", f"expected a prime >= 2, but got {p!r}")
        require(
            isinstance(self.max_items, int) and 1 <= self.max_items <= 26,
            "task.max_items",
            f"expected an integer in 1..26 (one letter per item), but got {self.max_items!r}",
        )


def op_symbols(task: TaskConfig) -> tuple[str, ...]:
    """Operator per op index: addition ``("+",)``, sorting ``("",)``, modular div ``("/",)``, ..."""
    if task.name == "multi_op":
        return tuple(task.ops)
    if task.name == "modular":
        return (_MODULAR_SYMBOL[task.operation],)
    return {"addition": ("+",), "multiplication": ("*",), "sorting": ("",)}[task.name]


def _answer_width(sym: str, k: int) -> int:
    """Widest |a sym b| for k-digit operands: 999 + 999 = 1998 needs k + 1, 999 * 999 needs 2k."""
    return {"+": k + 1, "*": 2 * k}.get(sym, k)


def operand_width(task: TaskConfig, n_digits: int | None = None) -> int:
    """Digits of the widest operand: k (or the override), digits of p - 1 for modular."""
    if task.name == "modular":
        return len(str(task.modulus - 1))
    return task.n_digits if n_digits is None else n_digits


def max_answer_digits(task: TaskConfig, n_digits: int | None = None) -> int:
    """Widest |answer| in digits (sorting: the number of answer letters, max_items).

    ``addition, k=3 -> 4``; ``multi_op, k=3 -> 6`` (from ``*``); ``modular p=97 -> 2``.
    """
    if task.name == "sorting":
        return task.max_items
    if task.name == "modular":
        return operand_width(task)
    k = operand_width(task, n_digits)
    return max(_answer_width(sym, k) for sym in op_symbols(task))


def _values_per_operand(task: TaskConfig) -> int | None:
    """Distinct operand values, or None when the distribution is not uniform over a set."""
    k = task.n_digits
    if task.operand_lengths == "uniform":
        return 10**k
    if task.operand_lengths == "fixed":
        return 10 if k == 1 else 9 * 10 ** (k - 1)
    # bucketed reaches the same values as uniform but weights short operands up; enumerating
    # would silently turn it into uniform, so it is not enumerable.
    return None


def space_size(task: TaskConfig) -> int | None:
    """Number of distinct problems when at most 5_000_000, else None.

    ``modular p=97 add -> 9409``; ``multi_op k=3 (all five ops) -> 4_998_000``; sorting -> None.
    """
    if task.name == "sorting":
        return None
    if task.name == "modular":
        p = task.modulus
        size = p * (p - 1) if task.operation == "div" else p * p
    else:
        if task.n_digits > 7:  # 10**14 pairs: never enumerable, skip the big-int work
            return None
        values = _values_per_operand(task)
        if values is None:
            return None
        nonzero_b = (
            values - 1 if task.operand_lengths == "uniform" or task.n_digits == 1 else values
        )
        size = sum(values * (nonzero_b if s in ("//", "%") else values) for s in op_symbols(task))
    return size if size <= MAX_ENUMERABLE else None


def _build(task: TaskConfig, op: np.ndarray, operands: np.ndarray, lens: np.ndarray) -> Problems:
    """Problems from operands, with exact answers."""
    n = len(op)
    op, lens = op.astype(np.int64), lens.astype(np.int64)
    if task.name == "sorting":
        # The answer is the order; the digit fields hold a placeholder 0 so shapes stay uniform.
        return Problems(
            op=op,
            operands=operands,
            operand_len=lens,
            answer=np.zeros((n, 1), dtype=np.uint8),
            answer_len=np.ones(n, dtype=np.int64),
            answer_negative=np.zeros(n, dtype=bool),
            answer_order=_answers.sort_order(operands, lens),
        )
    a, b = operands[:, 0], operands[:, 1]
    if task.name == "modular":
        values = _answers.modular(
            task.operation, task.modulus, _digits.to_values(a), _digits.to_values(b)
        )
        answer = _digits.from_values(values, operand_width(task))
        negative = np.zeros(n, dtype=bool)
    else:
        answer, negative = _answers.arithmetic(op_symbols(task), op, a, b)
    return Problems(op, operands, lens, answer, _digits.lengths(answer), negative)


def sample(
    task: TaskConfig, n: int, rng: np.random.Generator, n_digits: tuple[int, int] | None = None
) -> Problems:
    """``n`` random problems, vectorised. ``n_digits=(lo, hi)``: each operand's length uniform in
    lo..hi (hi may exceed task.n_digits), for length-generalisation sets.

    ``sample(TaskConfig("addition"), 2, rng)`` might give 517 + 82 and 9 + 640.
    """
    if task.name == "modular":
        p = task.modulus
        a = rng.integers(0, p, size=n)
        b = rng.integers(1 if task.operation == "div" else 0, p, size=n)
        operands = _digits.from_values(np.stack([a, b], axis=1), operand_width(task))
        return _build(task, np.zeros(n, np.int64), operands, _digits.lengths(operands))
    m = task.max_items if task.name == "sorting" else 2
    operands, lens = _sampling.operands(task.operand_lengths, task.n_digits, rng, (n, m), n_digits)
    op = np.zeros(n, dtype=np.int64)
    if task.name == "sorting":
        count = rng.integers(1, task.max_items + 1, size=n)
        absent = np.arange(m) >= count[:, None]
        operands[absent] = 0
        lens[absent] = 0
    elif task.name == "multi_op":
        op = rng.choice(len(task.ops), size=n, p=op_shares(task))
        dividing = [i for i, s in enumerate(task.ops) if s in ("//", "%")]
        bad = np.isin(op, dividing) & ~operands[:, 1].any(axis=1)

        def draw(count: int) -> tuple[np.ndarray, np.ndarray]:
            d, dl = _sampling.operands(task.operand_lengths, task.n_digits, rng, (count,), n_digits)
            return d, dl

        _sampling.redraw_zeros(bad, operands[:, 1], lens[:, 1], draw)
    return _build(task, op, operands, lens)


def op_shares(task: TaskConfig) -> np.ndarray:
    """Each multi_op operation's share of the problems drawn: ``op_weights`` normalised, or
    equal shares. Every set follows them, sampled or enumerated (``set_rows``)."""
    weights = np.ones(len(task.ops)) if task.op_weights is None else np.array(task.op_weights)
    return weights / weights.sum()


def set_rows(task: TaskConfig, op: np.ndarray, size: int) -> np.ndarray:
    """Rows of a shuffled enumerated split (``op`` per row) for a set of at most ``size``;
    multi_op's follow ``op_shares`` (``_sampling.share_rows``), as sampled sets do."""
    if task.name != "multi_op":
        return np.arange(min(size, len(op)))
    return _sampling.share_rows(op, op_shares(task), size)


def from_operands(task: TaskConfig, operands: np.ndarray, op: np.ndarray | None = None) -> Problems:
    """Problems from operand digit arrays ``(N, 2, W)`` (MSB first), answers computed exactly.

    ``op`` indexes op_symbols(task) per row (default: the first operator).
    """
    op = np.zeros(len(operands), np.int64) if op is None else op
    return _build(task, op, operands, _digits.lengths(operands))


def enumerate_all(task: TaskConfig) -> Problems:
    """Every problem, ordered by op index, then a, then b (only when space_size(task) is set).

    ``modular p=2 add`` -> 0+0, 0+1, 1+0, 1+1.
    """
    if space_size(task) is None:
        raise ValueError(f"task {task.name!r} has too many problems to enumerate")
    if task.name == "modular":
        values = np.arange(task.modulus)
        divisors = values[1:] if task.operation == "div" else values
        pairs = [(np.zeros(1, np.int64), values, divisors)]
    else:
        k = task.n_digits
        values = np.arange(10 ** (k - 1) if task.operand_lengths == "fixed" and k > 1 else 0, 10**k)
        pairs = [
            (np.array([i]), values, values[values > 0] if s in ("//", "%") else values)
            for i, s in enumerate(op_symbols(task))
        ]
    ops, a, b = [], [], []
    for i, av, bv in pairs:
        ops.append(np.full(len(av) * len(bv), i[0], dtype=np.int64))
        a.append(np.repeat(av, len(bv)))
        b.append(np.tile(bv, len(av)))
    stacked = np.stack([np.concatenate(a), np.concatenate(b)], axis=1)
    operands = _digits.from_values(stacked, operand_width(task))
    return _build(task, np.concatenate(ops), operands, _digits.lengths(operands))


def from_ints(
    task: TaskConfig, operands: list[list[int]], ops: list[str] | None = None
) -> Problems:
    """Problems from Python ints, answers computed exactly (for tests, predict and edge cases).

    ``from_ints(multi_op, [[0, 999]], ["-"])`` -> 0 - 999 = -999. Sorting rows hold 1..max_items
    values. Bad input raises ValueError.
    """
    symbols = op_symbols(task)
    if ops is None:
        if len(symbols) > 1:
            raise ValueError(f"ops is required for a task with several operators {symbols}")
        ops = [symbols[0]] * len(operands)
    if len(ops) != len(operands):
        raise ValueError(f"got {len(ops)} ops for {len(operands)} problems")
    bad_ops = sorted(set(ops) - set(symbols))
    if bad_ops:
        raise ValueError(f"operator {bad_ops[0]!r} is not one of this task's {symbols}")
    m = task.max_items if task.name == "sorting" else 2
    flat: list[int] = []
    for row, sym in zip(operands, ops, strict=True):
        _check_row(task, list(row), sym, m)
        flat += list(row) + [0] * (m - len(row))
    width = max([operand_width(task), *(len(str(v)) for v in flat)])
    digits = _digits.from_pyints(flat, width).reshape(len(operands), m, width)
    lens = _digits.lengths(digits)
    present = np.array([[j < len(row) for j in range(m)] for row in operands], dtype=bool)
    lens = np.where(present.reshape(len(operands), m), lens, 0)
    op = np.array([symbols.index(s) for s in ops], dtype=np.int64)
    return _build(task, op, digits, lens)


def _check_row(task: TaskConfig, row: list[int], sym: str, m: int) -> None:
    """ValueError unless ``row`` is a valid operand list for ``task`` and operator ``sym``."""
    lo = 1 if task.name == "sorting" else m
    if not lo <= len(row) <= m:
        raise ValueError(f"expected {lo}..{m} operands per problem, but got {row}")
    if any(not isinstance(v, int | np.integer) or v < 0 for v in row):
        raise ValueError(f"operands must be non-negative integers, but got {row}")
    if task.name == "modular" and max(row) >= task.modulus:
        raise ValueError(f"operands must be below the modulus {task.modulus}, but got {row}")
    if sym in ("//", "%", "/") and row[1] == 0:
        raise ValueError(f"division by zero in {row[0]} {sym} 0")


def edge_cases(task: TaskConfig) -> Problems | None:
    """Carry and sign edge cases within n_digits, e.g. 999 + 1, 999 * 999, 0 - 999; None if none.

    addition k=3: 999+1, 1+999, 999+999, 0+0, 500+500, 999+0, 0+999.
    """
    k = task.n_digits
    nines, half = 10**k - 1, 5 * 10 ** (k - 1)
    some = int(("123456789" * 23)[:k])  # a "typical" k-digit operand
    if task.name == "addition":
        rows = [
            [nines, 1],
            [1, nines],
            [nines, nines],
            [0, 0],
            [half, half],
            [nines, 0],
            [0, nines],
        ]
        return from_ints(task, _unique(rows))
    if task.name == "multiplication":
        rows = [[nines, nines], [some, 0], [0, some], [some, 1], [1, some], [nines, 1]]
        return from_ints(task, _unique(rows))
    if task.name == "multi_op":
        cases = [("+", [nines, 1]), ("-", [0, nines]), ("*", [nines, nines])]
        cases += [("//", [5, 4]), ("%", [5, 4]), ("//", [0, 7]), ("%", [nines, 1])]
        cases = [(s, r) for s, r in cases if s in task.ops and max(len(str(v)) for v in r) <= k]
        if not cases:
            return None
        return from_ints(task, [r for _, r in cases], [s for s, _ in cases])
    return None


def _unique(rows: list[list[int]]) -> list[list[int]]:
    """Drop repeated rows (for k = 1, 9 + 1 and 5 + 5 style cases coincide), keeping order."""
    seen: list[list[int]] = []
    for r in rows:
        if r not in seen:
            seen.append(r)
    return seen


def to_ints(problems: Problems) -> tuple[list[list[int]], list[int]]:
    """Operands (present items only) and signed answers as Python ints; sorting answers are -1.

    ``to_ints(from_ints(multi_op, [[0, 999]], ["-"]))`` -> ``([[0, 999]], [-999])``.
    """
    values = _digits.to_objects(problems.operands).tolist()
    present = (problems.operand_len > 0).tolist()
    operands = [
        [v for v, p in zip(vr, pr, strict=True) if p]
        for vr, pr in zip(values, present, strict=True)
    ]
    if problems.answer_order is not None:
        return operands, [-1] * len(problems)
    answers = _digits.to_objects(problems.answer)
    signed = np.where(problems.answer_negative, -answers, answers)
    return operands, [int(v) for v in signed.tolist()]

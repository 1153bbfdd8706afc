"""Carry chains: how far a carry (or a borrow) travels in a problem, and sets built to hold them.

Random operands rarely hold long carry chains (a chain of c columns has probability about
0.45 * 0.55**(c-1) at each start), so a random test set says little about them. The tools:

- ``longest_chain(problems, symbols)``: per problem, the longest run of consecutive digit
  columns that emit a carry (``+``) or a borrow (``-``, the smaller taken from the larger).
  ``999 + 1`` -> 3, ``15 + 17`` -> 1, ``12 + 34`` -> 0, ``1000 - 1`` -> 3.
- ``stratified_operands(n_digits, per_length, rng)``: operand pairs of exactly ``n_digits``
  digits with ``per_length`` pairs of each longest chain 0..n_digits, built column by column
  (vectorised over problems), so every chain length is present in equal numbers.
- ``cascades(problems, symbols)``: per problem, whether its carry (or borrow) cascades: it
  starts in the ones column and every digit above depends on it (defined below).
  ``1166 + 9834 = 11000`` and ``4584 + 9416 = 14000`` cascade, ``1234 + 1111`` does not.
- ``cascade_operands(n_digits, n, rng)``: ``n`` operand pairs of exactly ``n_digits`` digits,
  each a cascade, uniform over all of them.
- ``chain_problems(task, n, rng)``: ``n`` additions of the task's own operand lengths, each
  holding one carry chain of a length uniform up to the longer operand's, up through the
  longer operand's top digit (``9999 + 1``, ``99999999 + 99999999``): the share of training
  batches that ``data.carry_chains`` asks for.

Chain length alone does not say what is hard for answers written most significant digit
first: a chain of 4 in ``9999 + 9999`` leaves every column carrying on its own, while in
``1166 + 9834`` the first answer digits can only be written after looking down to the ones
column. A model that writes its answer from the top scores ~100 % on chains of every length
yet misses such cascades (docs/findings.md), so they are a category of their own.
"""

from __future__ import annotations

import numpy as np

from arith.problems import _digits, _sampling, tasks
from arith.problems._problems import Problems

# Digit pairs (a, b) and what a column holding one does with a carry: "gen" emits one with no
# carry in, "prop" passes an incoming carry on, "kill" absorbs it, "quiet" emits none.
_PAIRS = np.array([(a, b) for a in range(10) for b in range(10)], dtype=np.uint8)
_SUMS = _PAIRS.astype(np.int64).sum(axis=1)
_QUIET, _GEN, _PROP, _KILL = range(4)
_ALLOWED = {_QUIET: _SUMS <= 9, _GEN: _SUMS >= 10, _PROP: _SUMS >= 9, _KILL: _SUMS <= 8}
# The same for a column where only the longer operand has a digit d (no column generates alone).
_DIGITS = np.arange(10, dtype=np.uint8)
_ALONE = {_QUIET: _DIGITS <= 9, _PROP: _DIGITS == 9, _KILL: _DIGITS <= 8}


def longest_run(flags: np.ndarray) -> np.ndarray:
    """(N,) length of the longest run of non-zero entries along axis 1."""
    best = np.zeros(flags.shape[0], dtype=np.int64)
    run = np.zeros(flags.shape[0], dtype=np.int64)
    for col in range(flags.shape[1]):
        run = np.where(flags[:, col] != 0, run + 1, 0)
        best = np.maximum(best, run)
    return best


def longest_chain(problems: Problems, symbols: tuple[str, ...]) -> np.ndarray:
    """(N,) longest carry chain of ``+`` rows and borrow chain of ``-`` rows; -1 for other ops."""
    out = np.full(len(problems), -1, dtype=np.int64)
    a, b = problems.operands[:, 0], problems.operands[:, 1]
    for index, symbol in enumerate(symbols):
        rows = np.flatnonzero(problems.op == index)
        if len(rows) == 0 or symbol not in ("+", "-"):
            continue
        if symbol == "+":
            flags = _digits.add(a[rows], b[rows])[1]
        else:
            flags = _digits.sub_abs_borrows(a[rows], b[rows])[2]
        out[rows] = longest_run(flags)
    return out


def stratified_operands(n_digits: int, per_length: int, rng: np.random.Generator) -> np.ndarray:
    """(N, 2, k) operand digits (MSB first), ``per_length`` pairs for each longest chain 0..k.

    A chain of length c starts at a random column s (counted from the least significant):
    column s generates a carry, the next c - 1 propagate it, the column after absorbs it (unless
    the chain reaches the top and becomes the answer's extra digit), every other column is
    quiet. ``k=3, c=2`` might give 158 + 367 (8+7 carries, 5+6+1 carries, 1+3+1 absorbs).
    """
    k = n_digits
    chain = np.repeat(np.arange(k + 1), per_length)
    n = len(chain)
    start = (rng.random(n) * (k - chain + 1)).astype(np.int64)  # 0 when the chain spans all
    column = np.arange(k)[None, :]  # 0 = least significant
    first, end = start[:, None], (start + chain)[:, None]
    has_chain = chain[:, None] > 0
    kind = np.full((n, k), _QUIET)
    kind[(column >= first) & (column < end)] = _PROP
    kind[(column == first) & has_chain] = _GEN
    kind[(column == end) & has_chain] = _KILL
    a = np.zeros((n, k), dtype=np.uint8)
    b = np.zeros((n, k), dtype=np.uint8)
    non_zero = _PAIRS.min(axis=1) > 0
    for name, allowed in _ALLOWED.items():
        for top in (False, True):  # a k-digit number's leading digit is not 0 (unless k == 1)
            ok = allowed & (non_zero | (not top) | (k == 1))
            rows, cols = np.nonzero((kind == name) & ((column == k - 1) == top))
            if len(rows):
                picks = _PAIRS[rng.choice(np.flatnonzero(ok), size=len(rows))]
                a[rows, cols], b[rows, cols] = picks[:, 0], picks[:, 1]
    return np.stack([a[:, ::-1], b[:, ::-1]], axis=1)


# A cascade per operator: (what the ones column must do to start it, the column value that
# passes it on only because it came in, what the top column's value must be). The value of a
# column is a + b for ``+`` and, for ``-``, the larger operand's digit minus the smaller's.
_CASCADE_RULES = {
    "+": (lambda v: v >= 10, 9, lambda v: v >= 9),  # the top carries out: one digit longer
    "-": (lambda v: v < 0, 0, lambda v: v >= 1),  # always so: the larger operand is larger
}


def cascades(problems: Problems, symbols: tuple[str, ...]) -> np.ndarray:
    """(N,) whether a problem's carry (``+``) or borrow (``-``) cascades; False for other ops.

    With w the longest operand's digits (w >= 2; columns counted from the least significant):
    an addition cascades when its ones column carries (a + b >= 10), every column between
    sums to exactly 9 (carrying only because the carry came in) and the top column carries
    out too (a + b + 1 >= 10), so the answer is one digit longer and every digit above the
    ones depends on the ones column: ``1166 + 9834 = 11000``, ``16 + 84 = 100``,
    ``9999 + 1 = 10000``. The subtraction analogue: the ones column borrows, every column
    between holds equal digits, and the borrow lowers the top digit (to 0 when the top digits
    differ by one, so the answer is one digit shorter): ``5123 - 4124 = 999``, ``1000 - 1``.
    """
    out = np.zeros(len(problems), dtype=bool)
    width = problems.operand_len.max(axis=1)
    for index, symbol in enumerate(symbols):
        rows = np.flatnonzero((problems.op == index) & (width >= 2))
        if len(rows) == 0 or symbol not in _CASCADE_RULES:
            continue
        starts, passes, tops = _CASCADE_RULES[symbol]
        values = _column_values(problems.operands[rows], symbol)
        w = width[rows][:, None]
        column = np.arange(values.shape[1])[None, :]
        passed = ((values == passes) | (column == 0) | (column >= w - 1)).all(axis=1)
        top = values[np.arange(len(rows)), w[:, 0] - 1]
        out[rows] = starts(values[:, 0]) & passed & tops(top)
    return out


def _column_values(operands: np.ndarray, symbol: str) -> np.ndarray:
    """(N, W) per column, least significant first: a + b for ``+``; for ``-`` the larger
    operand's digit minus the smaller's (the order ``_digits.sub_abs`` subtracts in)."""
    a, b = operands[:, 0].astype(np.int64), operands[:, 1].astype(np.int64)
    if symbol == "-":
        negative = _digits.sub_abs(operands[:, 0], operands[:, 1])[1][:, None]
        a, b = np.where(negative, b, a), np.where(negative, a, b)
        return (a - b)[:, ::-1]
    return (a + b)[:, ::-1]


def cascade_operands(n_digits: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, 2, k) operand digits (MSB first) of k-digit additions that cascade, k >= 2.

    Built column by column, each pair uniform over those allowed, so the problems are uniform
    over every k-digit cascade: the ones column sums to 10 or more, the columns between to 9,
    the top to 9 or more with both leading digits non-zero (``k=4``: 1166 + 9834).
    """
    if n_digits < 2:
        raise ValueError(f"a cascade needs 2 digits or more, but got n_digits={n_digits}")
    leading = _PAIRS.min(axis=1) > 0
    columns = [_SUMS >= 10, *[_SUMS == 9] * (n_digits - 2), (_SUMS >= 9) & leading]
    picks = [_PAIRS[rng.choice(np.flatnonzero(ok), size=n)] for ok in columns]
    lsb_first = np.stack(picks, axis=2)  # (n, 2, k), the ones column first
    return lsb_first[:, :, ::-1]


def chain_problems(task: tasks.TaskConfig, n: int, rng: np.random.Generator) -> Problems:
    """``n`` additions with operand lengths drawn as ``task.operand_lengths`` draws them, each
    holding a carry chain (``chain_operands``)."""
    _, lens = _sampling.operands(task.operand_lengths, task.n_digits, rng, (n, 2))
    return tasks.from_operands(task, chain_operands(lens, task.n_digits, rng))


def chain_operands(lens: np.ndarray, width: int, rng: np.random.Generator) -> np.ndarray:
    """(n, 2, width) operand digits (MSB first) of exactly ``lens`` (n, 2) digits, each pair
    holding one carry chain.

    The chain's length is uniform in 1..(the longer length); it starts where both operands have
    a digit (it generates a carry there) and where it fits, propagates through columns that sum
    to 9 or more (a lone digit of the longer operand: 9) and is absorbed by the column after
    it, or becomes the answer's extra digit at the top; in half the rows one digit pair fills the
    chain (``_repeat_one_pair``). Every other column is quiet. Random
    operands hold a chain of c columns with probability about 0.45 * 0.55**(c - 1) at each
    start, and one through a lone 9 run far less, so training on them alone leaves
    ``99999999 + 1`` and ``99999999 + 99999999`` unseen.
    """
    n = len(lens)
    la, lb = lens[:, :1], lens[:, 1:]
    overlap, longest = np.minimum(la, lb)[:, 0], np.maximum(la, lb)[:, 0]
    chain = 1 + (rng.random(n) * longest).astype(np.int64)
    start = (rng.random(n) * np.minimum(overlap, longest - chain + 1)).astype(np.int64)
    end = start + chain
    column = np.arange(width)[None, :]  # 0 = least significant
    kind = np.full((n, width), _QUIET)
    kind[(column >= start[:, None]) & (column < end[:, None])] = _PROP
    kind[column == start[:, None]] = _GEN
    kind[column == end[:, None]] = _KILL
    has_a, has_b = column < la, column < lb
    top_a, top_b = (column == la - 1) & (la > 1), (column == lb - 1) & (lb > 1)
    a = np.zeros((n, width), dtype=np.uint8)
    b = np.zeros((n, width), dtype=np.uint8)
    both = has_a & has_b
    for name, allowed in _ALLOWED.items():
        for lead_a in (False, True):  # a leading digit is not 0 (unless the number is 1 digit)
            for lead_b in (False, True):
                ok = (
                    allowed
                    & ((_PAIRS[:, 0] > 0) | (not lead_a))
                    & ((_PAIRS[:, 1] > 0) | (not lead_b))
                )
                rows, cols = np.nonzero(
                    both & (kind == name) & (top_a == lead_a) & (top_b == lead_b)
                )
                if len(rows):
                    picks = _PAIRS[rng.choice(np.flatnonzero(ok), size=len(rows))]
                    a[rows, cols], b[rows, cols] = picks[:, 0], picks[:, 1]
    for name, allowed in _ALONE.items():
        for lead in (False, True):
            ok = allowed & ((_DIGITS > 0) | (not lead))
            rows, cols = np.nonzero((has_a ^ has_b) & (kind == name) & ((top_a | top_b) == lead))
            if len(rows):
                picks = _DIGITS[rng.choice(np.flatnonzero(ok), size=len(rows))]
                alone = has_a[rows, cols]
                a[rows, cols] = np.where(alone, picks, 0)
                b[rows, cols] = np.where(alone, 0, picks)
    _repeat_one_pair(a, b, both & ((kind == _PROP) | (kind == _GEN)), kind == _GEN, rng)
    return np.stack([a[:, ::-1], b[:, ::-1]], axis=1)


def _repeat_one_pair(
    a: np.ndarray, b: np.ndarray, chain: np.ndarray, gen: np.ndarray, rng: np.random.Generator
) -> None:
    """In half the rows, one digit pair through the whole chain (in place): ``9999 + 9999``.

    Past the operands' last digit a query sees one column fewer; in a run of alike columns what
    it sees there is what it saw one place earlier, so a model that learned the end from
    columns that differ writes ``9999 + 9999`` without its leading 1 (docs/notes/
    abacus_length.md). Runs of one pair make that case common. The pair is any that carries an
    incoming carry on (sum >= 9) with no 0 (so it may hold a leading digit), and in half of
    those rows (9, 9): with a carry in its answer digit is a 9 too, so every digit a query sees
    there is alike (``9999 + 9999`` lost its 1 with the first half alone). It takes the
    generating column too where it carries on its own (sum >= 10)."""
    pairs = np.flatnonzero(_ALLOWED[_PROP] & (_PAIRS.min(axis=1) > 0))
    pick = _PAIRS[rng.choice(pairs, size=len(a))]
    pick[rng.random(len(a)) < 0.5] = 9  # 9 + 9 with a carry in writes 9: every digit seen alike
    alike = (rng.random(len(a)) < 0.5)[:, None]
    fill = alike & chain & (~gen | (pick.astype(np.int64).sum(axis=1) >= 10)[:, None])
    rows, cols = np.nonzero(fill)
    a[rows, cols], b[rows, cols] = pick[rows, 0], pick[rows, 1]

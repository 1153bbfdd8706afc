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

Chain length alone does not say what is hard for answers written most significant digit
first: a chain of 4 in ``9999 + 9999`` leaves every column carrying on its own, while in
``1166 + 9834`` the first answer digits can only be written after looking down to the ones
column. A model that writes its answer from the top scores ~100 % on chains of every length
yet misses such cascades (docs/findings.md), so they are a category of their own.
"""

from __future__ import annotations

import numpy as np

from arith.problems import _digits
from arith.problems._problems import Problems

# Digit pairs (a, b) and what a column holding one does with a carry: "gen" emits one with no
# carry in, "prop" passes an incoming carry on, "kill" absorbs it, "quiet" emits none.
_PAIRS = np.array([(a, b) for a in range(10) for b in range(10)], dtype=np.uint8)
_SUMS = _PAIRS.astype(np.int64).sum(axis=1)
_QUIET, _GEN, _PROP, _KILL = range(4)
_ALLOWED = {_QUIET: _SUMS <= 9, _GEN: _SUMS >= 10, _PROP: _SUMS >= 9, _KILL: _SUMS <= 8}


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

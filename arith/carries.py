"""Carry chains: how far a carry (or a borrow) travels in a problem, and a set stratified by it.

Random operands rarely hold long carry chains (a chain of c columns has probability about
0.45 * 0.55**(c-1) at each start), so a random test set says little about them. Two tools:

- ``longest_chain(problems, symbols)``: per problem, the longest run of consecutive digit
  columns that emit a carry (``+``) or a borrow (``-``, the smaller taken from the larger).
  ``999 + 1`` -> 3, ``15 + 17`` -> 1, ``12 + 34`` -> 0, ``1000 - 1`` -> 3.
- ``stratified_operands(n_digits, per_length, rng)``: operand pairs of exactly ``n_digits``
  digits with ``per_length`` pairs of each longest chain 0..n_digits, built column by column
  (vectorised over problems), so every chain length is present in equal numbers.
"""

from __future__ import annotations

import numpy as np

from arith import _digits
from arith._problems import Problems

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

"""Random operands as digit arrays, row hashes, and sets that follow the operation weights
(private helpers of arith.problems.tasks).

Everything is vectorised over the batch; the loops run over digit columns or rejection rounds.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from arith.problems import _digits

MAX_DIGITS = 200


def operands(
    mode: str,
    k: int,
    rng: np.random.Generator,
    shape: tuple[int, ...],
    n_digits: tuple[int, int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Operand digits ``(*shape, W)`` and their lengths ``shape``.

    ``mode`` is task.operand_lengths: fixed (exactly k digits), uniform (values uniform in
    [0, 10**k)), bucketed (each length uniform in 1..k, so a pair of lengths is uniform over
    {1..k}^2). ``n_digits=(lo, hi)`` overrides it: lengths uniform in lo..hi, W = hi.
    """
    if n_digits is not None:
        lo, hi = n_digits
        if not 1 <= lo <= hi <= MAX_DIGITS:
            raise ValueError(f"n_digits must be (lo, hi) with 1 <= lo <= hi <= 200, got {n_digits}")
        lens = rng.integers(lo, hi + 1, size=shape)
        return _digits.sample_exact_length(rng, lens, hi), lens
    if mode == "uniform":
        # Uniform values over [0, 10**k) are exactly independent uniform digits.
        d = rng.integers(0, 10, size=(*shape, k), dtype=np.uint8)
        return d, _digits.lengths(d)
    if mode == "fixed":
        lens = np.full(shape, k, dtype=np.int64)
    else:
        lens = rng.integers(1, k + 1, size=shape)
    return _digits.sample_exact_length(rng, lens, k), lens


def redraw_zeros(
    bad: np.ndarray,
    digits: np.ndarray,
    lens: np.ndarray,
    draw: Callable[[int], tuple[np.ndarray, np.ndarray]],
) -> None:
    """Redraw ``digits[i], lens[i]`` (in place) where ``bad[i]`` until none of them is zero.

    Rejection keeps the redrawn values uniform over the non-zero ones (b for // and %);
    ``draw(count)`` returns ``count`` fresh ``(digits, lens)``.
    """
    bad = bad.copy()
    while bad.any():  # a handful of rounds, each vectorised
        rows = np.flatnonzero(bad)
        d, dl = draw(len(rows))
        digits[rows], lens[rows] = d, dl
        bad[rows] = ~d.any(axis=-1)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection on uint64 that spreads every bit (wraps mod 2**64),
    so hashed keys are uniform (problem keys here, their split in arith.data.dataset)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def row_keys(op: np.ndarray, operands: np.ndarray, operand_len: np.ndarray) -> np.ndarray:
    """(N,) uint64 hash of (op, operand lengths, significant digits) per row.

    Only the ``len`` rightmost digits of each operand enter the hash, so left padding (a wider W)
    does not change it.
    """
    h = mix64(op.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15))
    width = operands.shape[2]
    for m in range(operands.shape[1]):
        lens = operand_len[:, m]
        h = mix64(h ^ lens.astype(np.uint64))
        for c in range(min(width, int(lens.max(initial=0)))):
            digit = operands[:, m, width - 1 - c].astype(np.uint64)
            h = np.where(c < lens, mix64(h ^ (digit + np.uint64(1))), h)
    return h


def share_rows(op: np.ndarray, shares: np.ndarray, size: int) -> np.ndarray:
    """Rows of a shuffled set (``op``: each row's operation) that make one of at most ``size``
    holding each operation in its share, in the set's order: the first rows of each.

    Not its share of the space, where // and % have fewer problems than +: then a stop at
    ``train.target`` would mean one thing at 3 digits (enumerated) and another at 4 (sampled).
    The counts are the shares of the size rounded (largest remainders); where an operation has
    too few rows for its count, the whole set shrinks to keep the shares."""
    rows = [np.flatnonzero(op == i) for i in range(len(shares))]
    total = int(min(size, *(len(r) / p for r, p in zip(rows, shares, strict=True) if p > 0)))
    exact = total * shares
    counts = np.floor(exact).astype(np.int64)
    counts[np.argsort(counts - exact, kind="stable")[: total - counts.sum()]] += 1
    counts = np.minimum(counts, [len(r) for r in rows])  # a rounding up past what there is
    return np.sort(np.concatenate([r[:n] for r, n in zip(rows, counts, strict=True)]))

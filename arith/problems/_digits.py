"""Exact arithmetic on arrays of decimal digits, vectorised over rows.

A number is a row of ``uint8`` digits, most-significant first, right-aligned and left-padded
with 0: ``[[0, 1, 2, 3]]`` is 123 at width 4. Every function works on a whole batch ``(N, W)``
at once; the only Python loops run over digit positions (carry propagation is inherently
sequential along a number, but parallel across the batch). This keeps answers exact for
200-digit operands, where int64 would overflow.
"""

from __future__ import annotations

import numpy as np

# int64 holds every value below 10**18, so digit rows up to 18 wide convert without overflow.
INT64_DIGITS = 18


def pad_left(d: np.ndarray, width: int) -> np.ndarray:
    """Left-pad the last axis with zeros to ``width`` (digits are right-aligned, so values stay)."""
    extra = width - d.shape[-1]
    if extra <= 0:
        return d
    pad = [(0, 0)] * (d.ndim - 1) + [(extra, 0)]
    return np.pad(d, pad)


def lengths(d: np.ndarray) -> np.ndarray:
    """Digits of each number without leading zeros; 0 has length 1.  ``[[0, 4, 2]] -> [2]``."""
    width = d.shape[-1]
    nonzero = d != 0
    first = np.argmax(nonzero, axis=-1)
    return np.where(nonzero.any(axis=-1), width - first, 1).astype(np.int64)


def from_values(values: np.ndarray, width: int) -> np.ndarray:
    """Non-negative int64 values -> ``(N, width)`` digits.  ``[123], 4 -> [[0, 1, 2, 3]]``."""
    v = np.asarray(values, dtype=np.int64).copy()
    out = np.zeros((*v.shape, width), dtype=np.uint8)
    for i in range(width - 1, -1, -1):
        out[..., i] = v % 10
        v //= 10
    return out


def to_values(d: np.ndarray) -> np.ndarray:
    """Digits -> int64 values (only for widths <= 18).  ``[[0, 1, 2, 3]] -> [123]``."""
    out = np.zeros(d.shape[:-1], dtype=np.int64)
    for i in range(d.shape[-1]):
        out = out * 10 + d[..., i]
    return out


def to_objects(d: np.ndarray) -> np.ndarray:
    """Digits -> object array of exact Python ints (any width; Horner's rule over columns)."""
    out = np.zeros(d.shape[:-1], dtype=object)
    for i in range(d.shape[-1]):
        out = out * 10 + d[..., i].astype(np.int64).astype(object)
    return out


def from_objects(values: np.ndarray, width: int) -> np.ndarray:
    """Object array of non-negative Python ints -> digits (inverse of :func:`to_objects`)."""
    v = np.asarray(values, dtype=object).copy()
    out = np.zeros((*v.shape, width), dtype=np.uint8)
    for i in range(width - 1, -1, -1):
        out[..., i] = (v % 10).astype(np.uint8)
        v = v // 10
    return out


def from_pyints(values: list[int], width: int) -> np.ndarray:
    """Python ints (>= 0) -> ``(N, width)`` digits, via one string join (for tests and predict)."""
    if not values:
        return np.zeros((0, width), dtype=np.uint8)
    text = "".join(str(v).zfill(width) for v in values)
    return (np.frombuffer(text.encode("ascii"), dtype=np.uint8) - ord("0")).reshape(-1, width)


def add(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a + b``: digits ``(N, W+1)`` and the carry out of each column, least-significant first.

    ``[[1, 5]] + [[0, 7]]`` (15 + 7) -> digits ``[[0, 2, 2]]``, carries ``[[1, 0, 0]]``.
    """
    width = max(a.shape[-1], b.shape[-1])
    # Least-significant first, one extra column for the final carry.
    s = (pad_left(a, width + 1)[:, ::-1].astype(np.int64)) + pad_left(b, width + 1)[:, ::-1]
    digits = np.empty_like(s)
    carries = np.empty_like(s)
    carry = np.zeros(len(s), dtype=np.int64)
    for i in range(width + 1):
        t = s[:, i] + carry
        digits[:, i] = t % 10
        carry = t // 10
        carries[:, i] = carry
    return digits[:, ::-1].astype(np.uint8), carries


def sub_abs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``|a - b|`` as digits ``(N, W)`` and whether ``a - b < 0``.  ``0 - 999 -> 999, True``."""
    digits, negative, _ = sub_abs_borrows(a, b)
    return digits, negative


def sub_abs_borrows(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`sub_abs` and the borrow of each column, least-significant first (like :func:`add`).

    ``1000 - 1`` -> digits of 999, False, borrows ``[[1, 1, 1, 0]]``.
    """
    width = max(a.shape[-1], b.shape[-1])
    a, b = pad_left(a, width), pad_left(b, width)
    # Right-aligned rows compare like strings: the first differing digit decides.
    diff = a.astype(np.int16) - b
    first = np.argmax(diff != 0, axis=1)
    negative = diff[np.arange(len(a)), first] < 0
    big = np.where(negative[:, None], b, a)[:, ::-1].astype(np.int64)
    small = np.where(negative[:, None], a, b)[:, ::-1].astype(np.int64)
    digits = np.empty_like(big)
    borrows = np.empty_like(big)
    borrow = np.zeros(len(a), dtype=np.int64)
    for i in range(width):
        t = big[:, i] - small[:, i] - borrow
        borrow = (t < 0).astype(np.int64)
        digits[:, i] = t + 10 * borrow
        borrows[:, i] = borrow
    return digits[:, ::-1].astype(np.uint8), negative, borrows


def mul(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Schoolbook ``a * b``: digits ``(N, Wa+Wb)`` and column carries, least-significant first.

    The carry of column i is ``(column sum + carry in) // 10``; for 123 * 45 the carries are
    ``[1, 2, 1, 0, 0]`` and the digits 5535 (seed 004's trace).
    """
    la, lb = a[:, ::-1].astype(np.int64), b[:, ::-1].astype(np.int64)
    width = a.shape[1] + b.shape[1]
    cols = np.zeros((len(a), width), dtype=np.int64)
    # Convolution of digit sequences: one shifted row product per digit of a. Column sums stay
    # below 81 * 200, far from int64 limits.
    for i in range(a.shape[1]):
        cols[:, i : i + b.shape[1]] += la[:, i : i + 1] * lb
    digits = np.empty_like(cols)
    carries = np.empty_like(cols)
    carry = np.zeros(len(a), dtype=np.int64)
    for i in range(width):
        t = cols[:, i] + carry
        digits[:, i] = t % 10
        carry = t // 10
        carries[:, i] = carry
    return digits[:, ::-1].astype(np.uint8), carries


def divmod_digits(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a // b`` and ``a % b`` as digits of the wider operand's width (every b must be > 0).

    Up to 18 digits this is int64 arithmetic; wider numbers go through exact Python ints in an
    object array (numpy loops over them in C, so there is still no Python loop per row).
    """
    width = max(a.shape[-1], b.shape[-1])
    if width <= INT64_DIGITS:
        q, r = np.divmod(to_values(a), to_values(b))
        return from_values(q, width), from_values(r, width)
    x, y = to_objects(a), to_objects(b)  # np.divmod has no object loop; // and % do
    return from_objects(x // y, width), from_objects(x % y, width)


def sample_exact_length(rng: np.random.Generator, lens: np.ndarray, width: int) -> np.ndarray:
    """Uniform numbers with exactly ``lens`` digits (length 1 includes 0): ``(*lens.shape, W)``.

    ``lens == 3`` draws from 100..999: a non-zero leading digit, then free digits; everything left
    of the leading digit is padding.
    """
    shape = lens.shape
    d = rng.integers(0, 10, size=(*shape, width), dtype=np.uint8)
    lead = width - lens  # index of the leading digit
    pos = np.arange(width)
    d[pos < lead[..., None]] = 0
    first = np.where(lens > 1, rng.integers(1, 10, size=shape), rng.integers(0, 10, size=shape))
    np.put_along_axis(d, lead[..., None], first[..., None].astype(np.uint8), axis=-1)
    return d

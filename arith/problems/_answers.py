"""Exact answers for batches of problems (used by arith.problems.tasks; vectorised, no loop per
row).

Each function returns ``(answer digits (N, R), negative (N,))`` or, for sorting, the order.
"""

from __future__ import annotations

import numpy as np

from arith.problems import _digits


def arithmetic(
    symbols: tuple[str, ...], op: np.ndarray, a: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``a op b`` on digits, each row with its own operator.  ``"-"``: 0 - 999 -> 999, negative.

    Rows are grouped by operator so each operator runs once on its whole group.
    """
    width = a.shape[1]
    r = max({"+": width + 1, "*": 2 * width}.get(s, width) for s in symbols)
    answer = np.zeros((len(op), r), dtype=np.uint8)
    negative = np.zeros(len(op), dtype=bool)
    for i, sym in enumerate(symbols):
        rows = np.flatnonzero(op == i)
        if len(rows) == 0:
            continue
        x, y = a[rows], b[rows]
        if sym == "+":
            d = _digits.add(x, y)[0]
        elif sym == "*":
            d = _digits.mul(x, y)[0]
        elif sym == "-":
            d, negative[rows] = _digits.sub_abs(x, y)
        elif sym == "//":
            d = _digits.divmod_digits(x, y)[0]
        elif sym == "%":
            d = _digits.divmod_digits(x, y)[1]
        else:
            raise ValueError(f"unknown operator {sym!r}")
        answer[rows] = _digits.pad_left(d, r)
    return answer, negative


def _mod_pow(base: np.ndarray, exponent: int, p: int) -> np.ndarray:
    """``base ** exponent % p`` elementwise by square-and-multiply (products < p**2 < 2**62)."""
    result = np.ones_like(base)
    base = base % p
    while exponent:
        if exponent & 1:
            result = result * base % p
        base = base * base % p
        exponent >>= 1
    return result


def modular(operation: str, p: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a op b mod p`` for int64 arrays (operands below p <= tasks.MAX_MODULUS = 2**31, so a
    product fits int64); ``div``: c with a == b * c (mod p), via Fermat's inverse.

    ``div, p=97``: 20 / 74 -> 20 * 74**95 % 97.
    """
    if operation == "add":
        return (a + b) % p
    if operation == "sub":
        return (a - b) % p
    if operation == "mul":
        return a * b % p
    return a * _mod_pow(b, p - 2, p) % p


def sort_order(operands: np.ndarray, operand_len: np.ndarray) -> np.ndarray:
    """Item indices in ascending value, ties by index, absent items (length 0) last as -1.

    Items ``[89850, 1, 210273]`` -> ``[1, 0, 2]``. Right-aligned digit rows sort like numbers, so
    one lexsort over (row, absent, digits MSB..LSB, item) orders every row at once.
    """
    n, m, width = operands.shape
    flat = operands.reshape(n * m, width)
    item = np.tile(np.arange(m), n)
    row = np.repeat(np.arange(n), m)
    absent = (operand_len.reshape(-1) == 0).astype(np.int8)
    # lexsort's last key is the primary one.
    keys = [item, *(flat[:, c] for c in range(width - 1, -1, -1)), absent, row]
    order = np.lexsort(keys).reshape(n, m) - (np.arange(n) * m)[:, None]
    sorted_absent = np.take_along_axis(operand_len, order, axis=1) == 0
    return np.where(sorted_absent, -1, order).astype(np.int64)

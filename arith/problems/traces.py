"""The worked steps carry_trace writes beside an answer, as digits (vectorised over rows).

- :func:`column_carries`: the carry of each answer column, ones first (123 * 45 -> 1, 2, 1, 0, 0).
- :func:`division_trace`: ``a // b`` and ``a % b`` by restoring long division, line by line.
- :func:`sign_trace`: ``a - b`` column by column, whose last borrow is the sign.
- :func:`mul_trace`: ``a * b`` as the partial products ``a * b_j`` and their running sums.

Operands come as arith.problems._digits stores them, (N, k) digits most significant first;
every number a trace writes is a row of digits ones first. arith.text._scratchpad turns
the digits into tokens. numpy only.
"""

from __future__ import annotations

import numpy as np

from arith.problems import _digits

# The column carries (ones first) carry_trace writes, by operator.
CARRIES = {
    "+": lambda a, b: _digits.add(a, b)[1],
    "-": lambda a, b: _digits.sub_abs_borrows(a, b)[2],
    "*": lambda a, b: _digits.mul(a, b)[1],
}
# The first entry of a trace's state line (written ":"); an attempt line starts with its count.
STATE = -1


def column_carries(
    symbols: tuple[str, ...],
    op: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    r: int,
    mul_trace: bool = False,
) -> np.ndarray:
    """(N, r) column carries of ``a op b``, ones first; 0 for operators without a carry chain
    (// and %). For ``-`` the borrows of ``|a - b|``'s columns; for ``*`` after a
    :func:`mul_trace` (``mul_trace``) the carries of its last addition (:func:`mul_sum_carries`).

    Seed 004 traces * only. + and - are traced here as well, alike: with the carries of +
    written and the borrows of - not, a 2 x 64 model learned + (99.8 %) and not - (30 %),
    whose answers first went wrong at the tens digit, the first one a borrow decides
    (docs/notes/multi_op.md).
    """
    writers = {**CARRIES, "*": mul_sum_carries} if mul_trace else CARRIES
    carries = np.zeros((len(op), r), dtype=np.int64)
    for i, symbol in enumerate(symbols):
        rows = np.flatnonzero(op == i)
        if symbol in writers and len(rows):
            c = writers[symbol](a[rows], b[rows])[:, :r]
            carries[rows, : c.shape[1]] = c
    return carries


def max_mul_carry(k: int) -> int:
    """Largest column carry of k-digit schoolbook multiplication (all nines maximise each column).

    k = 3 -> 26 (999 * 999), k = 11 -> 98, k = 12 -> 107.
    """
    nines = np.full((1, k), 9, dtype=np.uint8)
    return int(_digits.mul(nines, nines)[1].max())


def max_division_lines(k: int) -> int:
    """Most lines a k-column :func:`division_trace` writes: per place at most 10 attempts (the
    quotient digit's successes and one failure) and a state line, and the state line it opens
    with."""
    return 10 * k + k + 1


def division_trace(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Restoring long division of ``a`` by ``b`` (every ``b > 0``) in k columns: lines
    (N, L, 2k + 1) int8, the first ``n_lines`` (N,) of each row written, every number ones
    digit first.

    A *state* line, :data:`STATE` then the remainder's k digits and the quotient's so far, opens
    the trace (a, 0). For each place j of the quotient, from the highest at which ``b * 10**j``
    still has k digits down to the ones, *attempt* lines subtract ``m = b * 10**j`` from the
    line above: how many attempts at this place succeeded before, then per column the digit of
    ``line above - m`` and the borrow out of the column. The attempt whose last column borrows
    out failed; a state line follows it with the remainder before it (the line above it) and
    the quotient with this place's digit (the failed attempt's count) appended.
    865 // 145, as carry_trace writes it (``:`` for STATE, a comma after each line; spaces
    added):

        :568000, 0002070, 1517150, 2003040, 3518120, 4004010, 5519191, :041500,

    Every entry is a column of the line above, or a copy from a line a fixed distance back or
    from the last state line: the comparison of a with q * b, which decides the quotient near
    a multiple of b, is written out instead of estimated from the leading digits, and no step
    has to find the last attempt that succeeded (docs/notes/multi_op.md).
    """
    n, k = a.shape
    remainder, divisor = _ones_first(a), _ones_first(b)
    if not divisor.any(axis=1).all():
        raise ValueError(f"division_trace divides by b > 0, but got b = 0 in {n} rows")
    top = k - _digits.lengths(b)  # the highest place of each row's quotient
    quotient = np.zeros_like(remainder)
    lines = np.zeros((n, max_division_lines(k), 2 * k + 1), dtype=np.int8)
    n_lines = np.zeros(n, dtype=np.int64)

    def write(rows: np.ndarray, line: np.ndarray) -> None:  # one line (len(rows), 2k + 1)
        lines[rows, n_lines[rows]] = line
        n_lines[rows] += 1

    def state(rows: np.ndarray) -> np.ndarray:
        return np.concatenate([np.full((len(rows), 1), STATE), remainder[rows], quotient[rows]], 1)

    everyone = np.arange(n)
    write(everyone, state(everyone))
    for place in range(k - 1, -1, -1):
        active = np.flatnonzero(place <= top)
        if not len(active):
            continue
        m = np.zeros_like(divisor)
        m[:, place:] = divisor[:, : k - place]
        count = np.zeros(n, dtype=np.int64)
        trying = active
        while len(trying):  # every attempt before a row's last one succeeded
            digits, borrows = subtract_columns(remainder[trying], m[trying])
            write(trying, _attempt_line(count[trying], digits, borrows))
            ok = borrows[:, -1] == 0
            trying = trying[ok]
            remainder[trying], count[trying] = digits[ok], count[trying] + 1
        # append this place's digit: ones first, the quotient so far moves up one column
        quotient[active] = np.concatenate([count[active, None], quotient[active, :-1]], axis=1)
        write(active, state(active))
    return lines[:, : n_lines.max(initial=0)], n_lines


def sign_trace(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a - b`` as one attempt line of :func:`division_trace` (count 0, then per column the
    digit of ``a - b`` and the borrow out of it, ones first): (N, 1, 2k + 1) and one line per
    row. The last borrow is the sign: 165 - 163 writes ``0200000`` and 163 - 165 ``0819191``.

    Without it the sign is the answer's first token, decided before any column is worked: a
    2 x 128 model wrote 98.7 % of random differences right and 69 % of those with a and b
    within 14 of each other, every wrong one with the sign wrong (docs/notes/multi_op.md).
    """
    digits, borrows = subtract_columns(_ones_first(a), _ones_first(b))
    line = _attempt_line(np.zeros(len(a), dtype=np.int64), digits, borrows)
    return line[:, None].astype(np.int8), np.ones(len(a), dtype=np.int64)


def mul_trace(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a * b`` in k columns as two blocks of lines, every number ones digit first: the
    *partial products* (N, k, 2k + 1) int8, then the *running sums* (N, max(k - 2, 0), 4k) int8.

    Partial product j (j = 0 for b's ones digit) is ``b_j``, then per column of a the digit and
    the carry of ``a_i * b_j + carry in``; the last carry is the top digit of ``a * b_j``. Running
    sum j (j = 1 .. k - 2) is ``s_j = s_(j-1) + a * b_j * 10**j`` (``s_0 = a * b_0``) in the
    answer's 2k columns, per column its digit and the carry out of it. The answer that follows
    is the last addition, ``s_(k-2) + a * b_(k-1) * 10**(k-1)`` (at k = 1 ``a * b_0``), with its
    carries (:func:`mul_sum_carries`). 123 * 45, as carry_trace writes it (spaces added):

        5511160, 4219040, 0000000, 503051500000, +500300500500000000

    (615, 492, 0; 615 + 4920 = 5535; 5535 + 0 * 100). Each digit is one product of a digit of a
    and b_j plus a carry, or a sum of two digits and a carry, from a fixed place in the prompt or
    a line above: seed 004's trace asks for the column sums of all ``a_i * b_(m-i)`` at once, and
    a 441K-parameter model learned * to 5.7 % with it (docs/notes/multi_op.md).
    """
    x, y = _ones_first(a), _ones_first(b)
    digits, carries = propagate(x[:, None, :] * y[:, :, None])  # (N, k, k): row j is a * b_j
    n, k = x.shape
    partials = np.empty((n, k, 2 * k + 1), dtype=np.int8)
    partials[:, :, 0], partials[:, :, 1::2], partials[:, :, 2::2] = y, digits, carries
    sums = np.empty((n, max(k - 2, 0), 4 * k), dtype=np.int8)
    for j, (total, carried) in enumerate(_running_sums(digits, carries)[:-1]):
        sums[:, j, 0::2], sums[:, j, 1::2] = total, carried
    return partials, sums


def mul_sum_carries(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N, 2k) carries of :func:`mul_trace`'s last addition, ones first (0 or 1; all 0 at k = 1,
    where the answer is ``a * b_0`` itself): the carries its answer is written with."""
    x, y = _ones_first(a), _ones_first(b)
    return _running_sums(*propagate(x[:, None, :] * y[:, :, None]))[-1][1]


def max_mul_trace_len(k: int) -> int:
    """Tokens a k-column :func:`mul_trace` writes, a comma after each line (k = 3 -> 37)."""
    return k * (2 * k + 2) + max(k - 2, 0) * (4 * k + 1)


def propagate(columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column values (..., W) int64 ones first, each before its carry in -> the digit of each
    column and the carry out of it: ``[[15, 10, 5]]`` (123 * 5) -> ``[[5, 1, 6]], [[1, 1, 0]]``."""
    digits, carries = np.empty_like(columns), np.empty_like(columns)
    carry = np.zeros(columns.shape[:-1], dtype=columns.dtype)
    for column in range(columns.shape[-1]):
        t = columns[..., column] + carry
        digits[..., column], carry = t % 10, t // 10
        carries[..., column] = carry
    return digits, carries


def _running_sums(digits: np.ndarray, carries: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """The k - 1 additions of :func:`mul_trace` (a single one, adding nothing, at k = 1): per
    addition the digits of ``s_j`` and its carries, both (N, 2k) ones first."""
    n, k, _ = digits.shape
    total = np.zeros((n, 2 * k), dtype=np.int64)
    total[:, :k], total[:, k] = digits[:, 0], carries[:, 0, -1]  # s_0 = a * b_0
    steps = [(total, np.zeros_like(total))]
    for j in range(1, k):
        addend = np.zeros_like(total)
        addend[:, j : j + k], addend[:, j + k] = digits[:, j], carries[:, j, -1]
        total, carried = propagate(total + addend)
        steps.append((total, carried))
    return steps if k == 1 else steps[1:]


def subtract_columns(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``x - y`` column by column: (N, k) int64 digits ones first -> the digits of
    ``x - y mod 10**k`` and the borrow out of each column, both (N, k) ones first."""
    digits, borrows = np.empty_like(x), np.empty_like(x)
    borrow = np.zeros(len(x), dtype=x.dtype)
    for column in range(x.shape[1]):
        d = x[:, column] - y[:, column] - borrow
        borrow = (d < 0).astype(x.dtype)
        digits[:, column], borrows[:, column] = d + 10 * borrow, borrow
    return digits, borrows


def _attempt_line(count: np.ndarray, digits: np.ndarray, borrows: np.ndarray) -> np.ndarray:
    """(N, 2k + 1): ``count``, then per column its digit and its borrow."""
    n, k = digits.shape
    line = np.empty((n, 2 * k + 1), dtype=np.int64)
    line[:, 0], line[:, 1::2], line[:, 2::2] = count, digits, borrows
    return line


def _ones_first(d: np.ndarray) -> np.ndarray:
    """Digits as stored (most significant first) -> int64, ones first."""
    return d[:, ::-1].astype(np.int64)

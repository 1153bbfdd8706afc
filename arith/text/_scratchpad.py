"""The worked lines carry_trace writes before an answer, as tokens (a private helper of
arith.text.formats): the traces of arith.problems.traces that ``format.division_trace``,
``format.sign_trace`` and ``format.mul_trace`` ask for, each on the rows of its operators.

A digit's token id is its value; :data:`arith.problems.traces.STATE` is written ``:`` and a
comma ends every line. 865 // 145 with division_trace writes
``:568000,0002070,1517150,2003040,3518120,4004010,5519191,:041500,`` before its answer.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from arith.problems import traces
from arith.text import _segments as seg

# Lines (N, L, W) and how many of them each row writes (N,); a trace is one or more such blocks.
Block = tuple[np.ndarray, np.ndarray]


def _fixed(*blocks: np.ndarray) -> list[Block]:
    """Blocks of which every row writes every line."""
    return [(lines, np.full(len(lines), lines.shape[1], dtype=np.int64)) for lines in blocks]


# format.<key> -> the operators it traces and its writer (operand digits a, b -> blocks).
TRACES: dict[str, tuple[tuple[str, ...], Callable[[np.ndarray, np.ndarray], list[Block]]]] = {
    "division_trace": (("//", "%"), lambda a, b: [traces.division_trace(a, b)]),
    "sign_trace": (("-",), lambda a, b: [traces.sign_trace(a, b)]),
    "mul_trace": (("*",), lambda a, b: _fixed(*traces.mul_trace(a, b))),
}


def segments(
    keys: tuple[str, ...],
    symbols: tuple[str, ...],
    op: np.ndarray,
    operands: np.ndarray,
    comma: int,
    colon: int,
) -> list[seg.Segment]:
    """The segments of the traces ``keys`` (of :data:`TRACES`) in front of every row's answer
    (rows of other operators write none): ``operands`` (N, 2, k) digits as stored, ``op`` (N,)
    indices into ``symbols``."""
    n = len(op)
    out: list[seg.Segment] = []
    for key in keys:
        traced, writer = TRACES[key]
        rows = np.flatnonzero(np.isin(op, [i for i, s in enumerate(symbols) if s in traced]))
        if not len(rows):
            continue
        for lines, n_lines in writer(operands[rows, 0], operands[rows, 1]):
            ids = np.where(lines == traces.STATE, colon, lines.astype(np.int64))
            ids = np.concatenate([ids, np.full((*ids.shape[:2], 1), comma)], axis=2)
            tokens = np.zeros((n, ids.shape[1] * ids.shape[2]), dtype=np.int64)
            lens = np.zeros(n, dtype=np.int64)
            tokens[rows], lens[rows] = ids.reshape(len(rows), -1), n_lines * ids.shape[2]
            out.append((tokens, lens))
    return out


def max_len(keys: tuple[str, ...], symbols: tuple[str, ...], k: int) -> int:
    """Most tokens the traces ``keys`` write on one row at k columns (a row writes the trace of
    its operator only); a line of division_trace or sign_trace is 2k + 1 digits and a comma."""
    longest = {
        "division_trace": traces.max_division_lines(k) * (2 * k + 2),
        "sign_trace": 2 * k + 2,
        "mul_trace": traces.max_mul_trace_len(k),
    }
    written = [longest[key] for key in keys if set(TRACES[key][0]) & set(symbols)]
    return max(written, default=0)

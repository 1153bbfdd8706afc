"""Vectorised building blocks for token rows of varying length (private helpers of
arith.text.formats).

A *segment* is ``(tokens (N, S) int64, lens (N,) int64)``: row i contributes its first ``lens[i]``
tokens. A sequence is a list of segments laid end to end; :func:`assemble` computes each
segment's start as the running sum of the lengths before it and scatters all rows at once,
so no step loops over examples.
"""

from __future__ import annotations

import numpy as np

Segment = tuple[np.ndarray, np.ndarray]


def const(n: int, ids: list[int], present: np.ndarray | None = None) -> Segment:
    """The same tokens in every row (or only where ``present``): ``const(2, [5]) -> [[5], [5]]``."""
    tokens = np.broadcast_to(np.asarray(ids, dtype=np.int64), (n, len(ids)))
    if present is None:
        return tokens, np.full(n, len(ids), dtype=np.int64)
    return tokens, np.where(present, len(ids), 0).astype(np.int64)


def choose(index: np.ndarray, options: list[list[int]]) -> Segment:
    """Row i gets ``options[index[i]]`` (e.g. the operator's tokens; "//" is longer than "+")."""
    width = max(len(o) for o in options)
    table = np.zeros((len(options), max(width, 1)), dtype=np.int64)
    for i, o in enumerate(options):
        table[i, : len(o)] = o
    lens = np.array([len(o) for o in options], dtype=np.int64)
    return table[index], lens[index]


def reverse_prefix(x: np.ndarray, lens: np.ndarray) -> Segment:
    """Reverse the first ``lens[i]`` entries per row: ``[[3, 2, 1, 0]], [3] -> [[1, 2, 3, ..]]``.

    Digits are stored right-aligned, so reading a number least-significant first is a plain
    column flip; this turns such an LSB-first prefix into the usual MSB-first, left-aligned form.
    """
    s = x.shape[1]
    idx = np.clip(lens[:, None] - 1 - np.arange(s), 0, max(s - 1, 0))
    return np.take_along_axis(x, idx, axis=1), lens


def assemble(segments: list[Segment], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate segments row by row, right-padded with ``pad_id``: ``(tokens (N, T), lens)``."""
    n = len(segments[0][1])
    lens = np.stack([seg_lens for _, seg_lens in segments], axis=1)
    total = lens.sum(axis=1)
    starts = np.cumsum(lens, axis=1) - lens
    out = np.full((n, int(total.max(initial=0))), pad_id, dtype=np.int64)
    for (tokens, seg_lens), start in zip(segments, starts.T, strict=True):
        rows, cols = np.nonzero(np.arange(tokens.shape[1]) < seg_lens[:, None])
        out[rows, start[rows] + cols] = tokens[rows, cols]
    return out, total


def total_len(segments: list[Segment]) -> np.ndarray:
    """(N,) summed lengths of ``segments``."""
    return np.sum([seg_lens for _, seg_lens in segments], axis=0).astype(np.int64)

"""The problem batch container (re-exported as ``arith.problems.tasks.Problems``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arith.problems import _digits, _sampling


@dataclass
class Problems:
    """N problems as arrays. Digits are most-significant first, right-aligned, left-padded with 0.

    ``123 + 45`` at width 3: operands ``[[[1, 2, 3], [0, 4, 5]]]``, operand_len ``[[3, 2]]``,
    answer ``[[0, 1, 6, 8]]``, answer_len ``[3]``.
    """

    # (N,) int64: index into op_symbols(task).
    op: np.ndarray
    # (N, M, W) uint8 digits; M = 2 for arithmetic tasks, max_items for sorting.
    operands: np.ndarray
    # (N, M) int64: digits of each operand (>= 1); 0 marks an absent sorting item.
    operand_len: np.ndarray
    # (N, R) uint8 digits of |answer|, MSB first, left-padded.
    answer: np.ndarray
    # (N,) int64 digits of |answer| (>= 1; "0" has length 1).
    answer_len: np.ndarray
    # (N,) bool: the answer is negative (multi_op a - b).
    answer_negative: np.ndarray
    # sorting: (N, M) int64 item indices in ascending order of value (ties by item index),
    # -1 padded; None for other tasks.
    answer_order: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.op)

    def take(self, index: np.ndarray) -> Problems:
        """Rows ``index`` (a subset or a reordering)."""
        index = np.asarray(index)
        order = None if self.answer_order is None else self.answer_order[index]
        return Problems(
            op=self.op[index],
            operands=self.operands[index],
            operand_len=self.operand_len[index],
            answer=self.answer[index],
            answer_len=self.answer_len[index],
            answer_negative=self.answer_negative[index],
            answer_order=order,
        )

    def keys(self) -> np.ndarray:
        """(N,) uint64 identity of each problem (op, operand lengths and digits).

        A 64-bit hash chained over the significant digits only, so left padding (a wider W after
        :meth:`concat`) does not change it. Distinct problems collide with probability about
        N**2 / 2**65 (1e-7 for a million problems): good enough for disjoint train/test splits.
        """
        return _sampling.row_keys(self.op, self.operands, self.operand_len)

    @staticmethod
    def concat(parts: list[Problems]) -> Problems:
        """Rows of all ``parts`` in order; W and R are padded to the widest part."""
        width = max(p.operands.shape[2] for p in parts)
        r = max(p.answer.shape[1] for p in parts)
        orders = [p.answer_order for p in parts]
        return Problems(
            op=np.concatenate([p.op for p in parts]),
            operands=np.concatenate([_digits.pad_left(p.operands, width) for p in parts]),
            operand_len=np.concatenate([p.operand_len for p in parts]),
            answer=np.concatenate([_digits.pad_left(p.answer, r) for p in parts]),
            answer_len=np.concatenate([p.answer_len for p in parts]),
            answer_negative=np.concatenate([p.answer_negative for p in parts]),
            answer_order=None if orders[0] is None else np.concatenate(orders),
        )

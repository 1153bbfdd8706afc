"""The three places where the model computes the same thing differently by device, chosen here
and nowhere else: the model's layers call these and hold no device check of their own.

Each CPU form was measured faster on 2 CPU cores (docs/notes/kernels.md) and gives the reference
form's result to fp32's rounding; tests/test_kernels.py checks each against its reference on
CPU, values and gradients. CUDA (and any other device) takes the reference form, one path.

- ``embedding``: a lookup; on CPU by ``index_select``, whose backward costs a third of
  ``F.embedding``'s there, with the same sums in the same order; ``F.embedding`` elsewhere
  (deterministic backward on CUDA).
- ``explicit_attention_pays``: whether plain matmuls beat the fused attention kernel: on CPU
  under bf16 autocast, and in fp32 where a row has fewer than ``CPU_SHORT_ROW`` keys.
- ``softmax_fp32``: softmax computed in fp32 (as CUDA's autocast does); on CPU a row shorter than
  ``CPU_SHORT_ROW`` keys is padded with -inf keys, which takes ATen's vectorised kernel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

CPU_SHORT_ROW = 16
"""Rows shorter than this take ATen's scalar softmax on CPU, not its vectorised one."""


def embedding(table: Tensor, idx: Tensor) -> Tensor:
    """Rows of ``table`` (N, d) at ``idx`` (...) -> (..., d)."""
    if idx.device.type != "cpu":
        return F.embedding(idx, table)
    return table.index_select(0, idx.flatten()).view(*idx.shape, table.shape[1])


def explicit_attention_pays(q: Tensor, n_keys: int) -> bool:
    """Whether softmax(q k^T) v by plain matmuls is faster than the fused kernel for queries
    ``q`` over ``n_keys`` keys: on CPU under bf16 autocast, and in fp32 on short rows."""
    if q.device.type != "cpu":
        return False
    return torch.is_autocast_enabled("cpu") or n_keys < CPU_SHORT_ROW


def softmax_fp32(scores: Tensor) -> Tensor:
    """Softmax over the last dimension, in fp32: on CPU the bf16 kernel is ~3x slower than
    converting there and back, and less exact.

    On CPU a row of fewer than 16 keys (seed 002's base-100 sums have 8 or 9 tokens) costs
    5-9x a 16-key row, so short rows are padded to 16 with -inf keys, which get weight 0: the
    same weights but for the last bit of an exp."""
    n_keys = scores.shape[-1]
    if scores.device.type != "cpu" or n_keys >= CPU_SHORT_ROW:
        return scores.softmax(dim=-1, dtype=torch.float32)
    padded = F.pad(scores.float(), (0, CPU_SHORT_ROW - n_keys), value=float("-inf"))
    return padded.softmax(dim=-1)[..., :n_keys]

"""A packed step's loss: each member's cross-entropy over the tokens its loss mask keeps.

The step's batch picks those tokens out on the host (``step_batch.answer_picks``), so the logits
arrive as (M, n, vocab) for n picked tokens per member, padded where a member keeps fewer (their
weight is 0); a compiled step passes every token's, (B, T, vocab), with the whole mask.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def member_loss_sums(
    logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """(M,) each member's cross-entropy summed over its tokens, weighted by its loss mask;
    ``targets`` and ``weights`` (M, n) for the logits' M * n rows."""
    # (rows, vocab): the (B, vocab, T) layout takes a slower kernel and two copies
    flat = logits.reshape(-1, logits.shape[-1]).float()
    losses = F.cross_entropy(flat, targets.flatten(), reduction="none")
    return (losses.view(weights.shape) * weights).sum(1)

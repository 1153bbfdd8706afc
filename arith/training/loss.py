"""A packed step's loss: each member's cross-entropy over the tokens its loss mask keeps.

The step's batch picks those tokens out on the host (``step_batch.answer_picks``), so the logits
arrive as (M, n, vocab) for n picked tokens per member, padded where a member keeps fewer (their
weight is 0); a compiled step passes every token's, (B, T, vocab), with the whole mask.
``backward_part`` runs one micro-batch of a step: forward, these sums, backward.
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


def backward_part(
    model, forward, autocast, part: tuple, token_counts: torch.Tensor
) -> torch.Tensor:
    """One micro-batch of a step (a ``StepBatch.parts`` entry: inputs, picks, targets, weights,
    Abacus offsets) forward and backward: every token's logits through ``forward`` where
    ``picks`` is None (a compiled or graphed step), else the picked answer tokens' through
    ``model``; the gradient of each member's mean loss per token (``token_counts``, (M,)). The
    members' loss sums (M,), detached."""
    inputs, picks, targets, weights, offset = part
    with autocast:
        if picks is None:  # every token's, (B, T, vocab)
            logits, _ = forward(inputs, abacus_offset=offset)
        else:  # the answer's tokens only, (M, n, vocab)
            logits = model.picked_logits(inputs, picks, abacus_offset=offset)
    sums = member_loss_sums(logits, targets, weights)
    # the members share no parameter: each gets its own gradient
    (sums / token_counts).sum().backward()
    return sums.detach()

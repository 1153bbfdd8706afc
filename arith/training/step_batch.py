"""A training step's batch, shaped on the host: the members' rows stacked, cut into length
buckets, the loss's tokens picked out, Abacus offsets drawn, pinned for the copy (CUDA).

Cut into length buckets from the host's own copy of the loss mask (no length is read back from
the device). The tokens the loss keeps (the answer's) are picked out here (``answer_picks``): the
model computes logits only there, not at the prompt's tokens whose loss is masked away. A
compiled step (``fixed_length``) takes every token instead, each batch padded to one length for
the whole run: one shape, so CUDA graphs are recorded once, not at every new length.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from arith.data.batches import pack_batch
from arith.model.positions import training_offsets
from arith.text.formats import longest_digit_run
from arith.training.transfers import host_to_device

if TYPE_CHECKING:
    from arith.training.member_run import MemberRun

CPU = torch.device("cpu")

Position = tuple[list[dict], list[torch.Tensor]]
"""The members' batch sources (``BatchSource.state_dict``) and Abacus offset generators
(``Generator.get_state``) at one point of the run: what a checkpoint saves of them."""


@dataclass(frozen=True)
class StepBatch:
    """One training step's rows: the members' batches stacked, member 0's rows first, cut into
    micro-batches of alike lengths, each ``(inputs, picks, targets, weights, abacus_offsets)``:
    ``picks`` (M, n) the tokens each member's loss keeps, as ``answer_picks`` gives them (None:
    every token), ``targets`` and ``weights`` (the loss mask) at those tokens, (M, n); the
    offsets None without Abacus positions."""

    parts: list[tuple[torch.Tensor | None, ...]]
    token_counts: torch.Tensor
    """(M,) the tokens each member's loss keeps, at least 1."""
    rows: int
    """Rows of each member."""
    pack_tokens: int
    """Tokens the step computes: every member's, padding included."""
    position: Position
    """Where this batch left the sources."""

    def to(self, device: torch.device) -> StepBatch:
        move = lambda t: None if t is None else host_to_device(t, device)  # noqa: E731
        parts = [tuple(move(t) for t in part) for part in self.parts]
        return replace(self, parts=parts, token_counts=move(self.token_counts))


def build_batch(
    members: list[MemberRun],
    n_buckets: int,
    pin: bool,
    pick: bool,
    fixed_length: int | None = None,
) -> StepBatch:
    """The members' next batches as one step's, on the host (pinned where ``pin``); ``pick``:
    the loss's tokens picked out (else every token's logits are computed); ``fixed_length``:
    every batch padded to that many tokens (a compiled step's one shape)."""
    inputs, targets, mask = pack_batch([m.batches for m in members], CPU)
    if fixed_length is not None:
        pad_id = members[0].dataset.format.pad_id
        inputs, targets, mask = pad_to(fixed_length, pad_id, inputs, targets, mask)
    n_members = len(members)
    rows = inputs.shape[0] // n_members
    offsets = abacus_offsets(members, rows)
    parts, pack_tokens = [], 0
    for bucket, length in length_buckets(mask, n_members, n_buckets):
        part_mask = mask[bucket, :length].reshape(n_members, -1)  # (M, rows * length)
        part_targets = targets[bucket, :length].reshape(n_members, -1)
        picks = None
        if pick:
            picks = answer_picks(part_mask)
            part_mask, part_targets = part_mask.gather(1, picks), part_targets.gather(1, picks)
        part = [inputs[bucket, :length], picks, part_targets, part_mask]
        part.append(None if offsets is None else offsets[bucket])
        if pin:
            part = [None if t is None else t.contiguous().pin_memory() for t in part]
        parts.append(tuple(part))
        pack_tokens += part[0].shape[0] * length
    counts = mask.reshape(n_members, -1).sum(1).clamp(min=1)
    return StepBatch(parts, counts, rows, pack_tokens, position(members))


def step_length(members: list[MemberRun]) -> int:
    """The most tokens a training batch's inputs can hold: the longest training sequence but
    its last token (the inputs predict the next one)."""
    return members[0].dataset.train_seq_len() - 1


def pad_to(
    length: int, pad_id: int, inputs: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The batch right-padded to ``length`` tokens, as the encoder pads a row: PAD tokens
    whose loss weight is 0 (after a row's last token, under causal attention, they change no
    logit before them)."""
    extra = length - inputs.shape[1]
    if extra < 0:
        raise ValueError(f"a batch of {inputs.shape[1]} tokens does not fit in {length}")
    return (
        F.pad(inputs, (0, extra), value=pad_id),
        F.pad(targets, (0, extra), value=pad_id),
        F.pad(mask, (0, extra), value=0),
    )


def answer_picks(mask: torch.Tensor) -> torch.Tensor:
    """(M, n) where each member's loss mask (M, tokens) is not zero, in order, n the most any
    member keeps (at least 1): a member with fewer is padded with tokens its mask zeroes."""
    kept = mask != 0
    n = max(1, int(kept.sum(1).max()))
    # a stable sort of "dropped" puts the kept tokens first, in their order
    return torch.argsort((~kept).to(torch.uint8), dim=1, stable=True)[:, :n]


def length_buckets(mask: torch.Tensor, n_members: int, n_buckets: int):
    """(rows, length) micro-batches of a packed batch: each member's rows sorted by where
    their loss ends and cut into ``n_buckets`` groups, the members' groups stacked member by
    member (so every bucket keeps the packed layout), cut to the longest loss in the bucket.
    Positions after a row's last loss token cannot change its loss (causal attention).
    ``mask`` is the host's: the lengths are read on the host."""
    if n_buckets == 1:  # the whole batch, as views: it is already padded to its longest row
        yield slice(None), mask.shape[1]
        return
    ends = torch.where(mask.any(1), mask.shape[1] - mask.flip(1).int().argmax(1), 0)
    per_member = ends.view(n_members, -1)
    first_row = torch.arange(n_members)[:, None] * per_member.shape[1]
    order = per_member.argsort(dim=1, stable=True) + first_row
    for group in torch.tensor_split(order, n_buckets, dim=1):
        if group.numel():
            rows = group.flatten()
            yield rows, int(ends[rows].max())


def abacus_offsets(members: list[MemberRun], rows: int) -> torch.Tensor | None:
    """The pack's Abacus offsets (M * rows,), where the model has Abacus positions (else None).

    McLeish et al. 2024: a random shift so long numbers meet trained indices, drawn from each
    member's own generator (``positions.training_offsets``: up to the table's last entry)."""
    config = members[0].config
    if config.model.position != "abacus":
        return None
    longest = longest_digit_run(config.format, config.task)
    offsets = [
        training_offsets(rows, m.config.model.abacus_max_k, longest, m.generator) for m in members
    ]
    return torch.cat(offsets)


def position(members: list[MemberRun]) -> Position:
    """The members' sources where they stand now (copies: the sources move on)."""
    return [m.batches.state_dict() for m in members], [m.generator.get_state() for m in members]

"""Layers that hold several same-shape models ("members") at once, for packed trials.

HFTA (Wang et al., MLSys 2021): same-shape models trained together share one kernel per layer
instead of one per model. Every parameter here has a leading member dimension ``M`` and every
activation leads with it too, (M, ..., features): member ``i``'s activations meet only member
``i``'s weights. With ``M = 1`` each layer is the ordinary one (nn.Linear, nn.Embedding,
nn.LayerNorm, F.dropout), and the model built from them reads as a plain transformer.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from arith.model import kernels


class MemberLinear(nn.Module):
    """``members`` linear layers as one batched matmul: (M, ..., in) -> (M, ..., out)."""

    def __init__(self, members: int, d_in: int, d_out: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(members, d_out, d_in))
        self.bias = nn.Parameter(torch.zeros(members, d_out)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        flat = x.flatten(1, -2)  # (M, tokens, in): bmm takes three dimensions
        if self.bias is None:
            y = torch.bmm(flat, self.weight.transpose(1, 2))
        else:
            y = torch.baddbmm(self.bias[:, None, :], flat, self.weight.transpose(1, 2))
        return y.view(*x.shape[:-1], y.shape[-1])


class MemberEmbedding(nn.Module):
    """``members`` lookup tables (M, n_embeddings, d); ``idx`` (M, ...) -> (M, ..., d)."""

    def __init__(self, members: int, n_embeddings: int, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(members, n_embeddings, d))

    def forward(self, idx: Tensor) -> Tensor:
        members, n_embeddings, d = self.weight.shape
        table = self.weight.view(members * n_embeddings, d)  # the members' tables end to end
        if members > 1:  # each member's tokens look up its own table
            shift = torch.arange(members, device=idx.device) * n_embeddings
            idx = idx + shift.view(members, *([1] * (idx.dim() - 1)))
        return kernels.embedding(table, idx)


class MemberLayerNorm(nn.Module):
    """LayerNorm with a weight and bias per member; x (M, ..., d)."""

    def __init__(self, members: int, d: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(members, d))
        self.bias = nn.Parameter(torch.zeros(members, d)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        d = x.shape[-1]
        if self.weight.shape[0] == 1:  # the fused kernel with its affine part
            bias = None if self.bias is None else self.bias[0]
            return F.layer_norm(x, (d,), self.weight[0], bias)
        y = F.layer_norm(x, (d,)) * per_member(self.weight, x)
        return y if self.bias is None else y + per_member(self.bias, x)


def per_member(values: Tensor, x: Tensor) -> Tensor:
    """A per-member (M, d) tensor shaped to broadcast against ``x`` (M, ..., d)."""
    return values.view(values.shape[0], *([1] * (x.dim() - 2)), values.shape[1])


def member_dropout(x: Tensor, rates: tuple[float, ...], training: bool) -> Tensor:
    """Dropout with rate ``rates[i]`` on member ``i``'s block of ``x`` (members lead dim 0).

    Dim 0 holds the members' blocks in order, one block each (M, ...) or several rows each
    (members folded into the batch, M * B, ...).
    """
    if not training or max(rates) == 0.0:
        return x
    if len(set(rates)) == 1:
        return F.dropout(x, rates[0], True)
    keep = _keep_probabilities(rates, x.device, x.dtype)
    keep = keep.repeat_interleave(x.shape[0] // len(rates)).view(-1, *[1] * (x.dim() - 1))
    return x * torch.bernoulli(keep.expand_as(x)) / keep


@functools.cache
def _keep_probabilities(rates: tuple[float, ...], device: torch.device, dtype) -> Tensor:
    """1 - rates on the device, made once: built from the tuple at every dropout site of every
    forward, it was a blocking copy from the host each time on a GPU."""
    return 1.0 - torch.tensor(rates, device=device, dtype=dtype)

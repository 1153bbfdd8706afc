"""Causal self-attention's core: softmax(q k^T / sqrt(hs) + bias) v, one function for every case.

Shapes: B rows (a pack's members folded in, in equal blocks), nh heads of hs channels, T new
queries, S = t_past + T keys (the KV cache's and the new tokens' own).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from arith.model import kernels
from arith.model.members import member_dropout


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    rates: tuple[float, ...],
    bias: Tensor | None = None,
    relative_values: Callable[[Tensor], Tensor] | None = None,
    visible: Tensor | None = None,
) -> Tensor:
    """Each new query attends to every cached key and to itself: q (B, nh, T, hs), k and v
    (B, nh, S, hs) -> (B, nh, T, hs).

    ``rates``: dropout on the weights, one rate per member (one for all: ``(rate,)``).
    ``bias`` (B, nh, T, S) is added to the logits (``abacus_bias``); the causal mask is
    applied here. ``relative_values`` maps the weights (B, nh, T, S) to what they read
    besides ``v`` (``abacus_bias_values``). ``visible`` (T, S): which keys each query sees,
    where that is not the causal mask over the last ``T`` of ``S`` keys (a static cache's keys
    past its length, arith.model.kv_cache).
    """
    T, S = q.shape[2], k.shape[2]
    t_past = S - T
    if bias is not None:
        bias = bias.masked_fill(~_seen(T, t_past, q.device, visible), float("-inf")).to(q.dtype)
    # The explicit matmuls where the fused kernel does not serve: it returns no weights (the
    # relative values read them), it takes one dropout rate (a pack's members may differ), and
    # where it is slower (arith.model.kernels: on CPU, measured in docs/notes/kernels.md).
    explicit = relative_values is not None or len(set(rates)) > 1
    if explicit or kernels.explicit_attention_pays(q, S):
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, nh, T, S)
        if bias is None:
            scores = scores.masked_fill(~_seen(T, t_past, q.device, visible), float("-inf"))
        else:
            scores = scores + bias
        weights = kernels.softmax_fp32(scores).to(scores.dtype)
        weights = member_dropout(weights, rates, training=True)
        y = weights @ v
        return y if relative_values is None else y + relative_values(weights)
    # the fused kernel, with the cheapest mask that says which keys a query sees
    if bias is not None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=rates[0])
    if visible is not None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=visible, dropout_p=rates[0])
    if t_past == 0:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=rates[0], is_causal=True)
    if T == 1:  # one new token sees everything before it
        return F.scaled_dot_product_attention(q, k, v, dropout_p=rates[0])
    # several new tokens after a cached prefix: the causal mask shifted by the prefix
    mask = causal_mask(T, t_past, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=rates[0])


def causal_mask(T: int, t_past: int, device: torch.device) -> Tensor:
    """(T, t_past + T) True where a new token may attend: every cached key and itself."""
    return torch.ones(T, t_past + T, dtype=torch.bool, device=device).tril(t_past)


def _seen(T: int, t_past: int, device: torch.device, visible: Tensor | None) -> Tensor:
    """``visible`` where given, else the causal mask: (T, S) True where a query sees a key."""
    return causal_mask(T, t_past, device) if visible is None else visible

"""The KV cache of a decoder: keys and values of the tokens seen so far, kept between calls.

The model keeps no state of its own: ``GPT.forward`` takes a cache and returns it, so decoding
is a loop over ``logits, cache = model(next_token, cache)``.

Two caches with one interface (``positions``, ``write``, ``visible``, ``keep_digit_runs``,
``advance``), which is all the model asks of one:

- ``KVCache``: buffers as long as the tokens so far (they double when full), the length a Python
  int. Attention reads only the filled keys, under its causal mask.
- ``StaticKVCache``: buffers of a capacity fixed when it is made, the length a device tensor the
  model advances in place. Every call reads and writes the same tensors at the same addresses,
  and attention reads all ``capacity`` keys with those past the length masked out, so a decoding
  step has one shape for the whole decode: what a CUDA graph needs (arith.evaluation.static_decode).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class KVCache:
    """Keys and values of the tokens so far: per layer a (B, n_head, capacity, head_dim) buffer.

    The first ``length`` positions are filled. Decoding writes each new token in place rather
    than copying the whole prefix every step; a full buffer doubles. Create one with
    ``model(prompts, reserve=n)`` to leave room for ``n`` new tokens.
    """

    reserve: int = 0
    length: int = 0
    keys: list[Tensor | None] = field(default_factory=list)
    values: list[Tensor | None] = field(default_factory=list)
    digit_run: Tensor | None = None
    """Index of the last token within its run of digits (B,), for Abacus positions."""
    digit_index: Tensor | None = None
    """Digit index of every token so far (B, length), for ``abacus_bias``."""

    def positions(self, T: int, device: torch.device) -> Tensor:
        """The positions (T,) of ``T`` new tokens after the cached ones."""
        return torch.arange(self.length, self.length + T, device=device)

    def visible(self, T: int) -> Tensor | None:
        """Which keys each new token sees, (T, S), or None: every filled key up to itself,
        which attention's own causal mask says."""
        return None

    def advance(self, T: int) -> None:
        """Count ``T`` new tokens as cached (the model calls it after its last layer)."""
        self.length += T

    def keep_digit_runs(self, run: Tensor, keep_all: bool) -> Tensor | None:
        """Keep the new tokens' digit indices (B, T): the last one's, for the next call to
        continue a number's count, and with ``keep_all`` every token's, returned (B, S)."""
        self.digit_run = run[:, -1]
        if keep_all:
            seen = self.digit_index
            self.digit_index = run if seen is None else torch.cat([seen, run], dim=1)
        return self.digit_index

    def write(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store the new tokens' keys and values; the filled part of the buffers, new included."""
        if len(self.keys) <= layer:
            self.keys.append(None)
            self.values.append(None)
        start, end = self.length, self.length + k.shape[2]
        if self.keys[layer] is None and self.reserve == 0:  # a plain forward pass: no copy
            self.keys[layer], self.values[layer] = k, v
            return k, v
        buffer = self.keys[layer]
        if buffer is None or buffer.shape[2] < end:
            capacity = max(end + self.reserve, 2 * (0 if buffer is None else buffer.shape[2]))
            self.keys[layer] = _grow(self.keys[layer], k, capacity, start)
            self.values[layer] = _grow(self.values[layer], v, capacity, start)
        self.keys[layer][:, :, start:end] = k
        self.values[layer][:, :, start:end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]


def _grow(buffer: Tensor | None, like: Tensor, capacity: int, filled: int) -> Tensor:
    """A buffer shaped like ``like`` with ``capacity`` positions, the first ``filled`` copied."""
    shape = (*like.shape[:2], capacity, like.shape[3])
    bigger = like.new_empty(shape)
    if buffer is not None:
        bigger[:, :, :filled] = buffer[:, :, :filled]
    return bigger


class StaticKVCache:
    """``KVCache``'s interface over buffers that keep one shape and one address: ``rows`` rows
    of ``capacity`` positions, the number filled a device tensor (1,) the model advances.

    Made once for a decode's shape and ``reset`` before each batch of prompts. The key and value
    buffers are allocated at the first write (their heads, width and dtype are the model's) and
    start at zero, so a masked key's weight 0 never meets a NaN.
    """

    def __init__(self, rows: int, capacity: int, device: torch.device) -> None:
        self.rows, self.capacity = rows, capacity
        self.length = torch.zeros(1, dtype=torch.long, device=device)
        self.keys: list[Tensor] = []
        self.values: list[Tensor] = []
        self.digit_run = torch.zeros(rows, dtype=torch.long, device=device)
        self.digit_index = torch.zeros(rows, capacity, dtype=torch.long, device=device)
        self.key_positions = torch.arange(capacity, device=device)

    def reset(self) -> None:
        """Empty, in place: nothing cached, every number's count restarted."""
        self.length.zero_()
        self.digit_run.zero_()
        self.digit_index.zero_()

    def positions(self, T: int, device: torch.device) -> Tensor:
        return self.length + torch.arange(T, device=device)

    def visible(self, T: int) -> Tensor:
        """(T, capacity): each new token sees the keys up to its own position."""
        queries = self.positions(T, self.length.device)
        return self.key_positions[None, :] <= queries[:, None]

    def advance(self, T: int) -> None:
        self.length.add_(T)

    def keep_digit_runs(self, run: Tensor, keep_all: bool) -> Tensor | None:
        self.digit_run.copy_(run[:, -1])
        if not keep_all:
            return None
        self.digit_index.index_copy_(1, self.positions(run.shape[1], run.device), run)
        return self.digit_index

    def write(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store the new tokens' keys and values at their positions; the whole buffers."""
        if len(self.keys) <= layer:
            shape = (self.rows, k.shape[1], self.capacity, k.shape[3])
            self.keys.append(k.new_zeros(shape))
            self.values.append(v.new_zeros(shape))
        at = self.positions(k.shape[2], k.device)
        self.keys[layer].index_copy_(2, at, k)
        self.values[layer].index_copy_(2, at, v)
        return self.keys[layer], self.values[layer]


Cache = KVCache | StaticKVCache
"""What ``GPT.forward`` takes and returns as its cache."""

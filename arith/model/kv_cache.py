"""The KV cache of a decoder: keys and values of the tokens seen so far, kept between calls.

The model keeps no state of its own: ``GPT.forward`` takes a cache and returns it, so decoding
is a loop over ``logits, cache = model(next_token, cache)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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

"""Greedy decoding at fixed shapes, its step one CUDA graph (with ``train.compile: graph``).

Decoding is a small model's most launch-bound work: one forward pass per answer token, each a
few dozen kernels on a handful of rows. ``decode.greedy_decode`` grows its cache a token at a
time, so every step has a new shape. Here a decoder is made for one shape, ``rows`` prompts
and a cache of ``capacity`` positions (arith.model.kv_cache.StaticKVCache), and every step reads
and writes the same tensors: the last token, which rows have ended, the cache. On CUDA that step
is captured once and replayed for every token of every later evaluation of the run; elsewhere
it runs eagerly, at the same shapes, which is how the CPU tests check it against
``greedy_decode``. The prompt itself is read eagerly, at its own length, into the same cache.

``StaticDecoding`` holds a run's decoders (one per evaluation set's shape) while it is entered:
the trainer enters it for a run whose step is the graph, and ``decode.generate_member_ids``
decodes through it while it is active.
"""

from __future__ import annotations

from contextvars import ContextVar

import torch

from arith.model.gpt import GPT
from arith.model.kv_cache import StaticKVCache

CHECK_EVERY = 8
"""Decoding steps between two looks at whether every row has ended. Each look reads a value
back from the device, so the host waits for it; rows that ended keep writing EOS, so the steps
decoded past the end change nothing but the time they take."""

WARMUP_STEPS = 3
"""Eager steps on a side stream before the capture (torch's recipe, as the training step's)."""

KEPT_DECODERS = 4
"""Decoders a run keeps at most, the least recently used dropped first: its validation set and
training sample, decoded at every evaluation, stay captured; sets decoded once (the length
probe's climb, dozens of shapes) do not pile up caches and graphs on the card."""

_ACTIVE: ContextVar[StaticDecoding | None] = ContextVar("static_decoding", default=None)


def next_tokens(logits: torch.Tensor, finished: torch.Tensor, eos: torch.Tensor) -> torch.Tensor:
    """The greedy step of both decoders: each row's next token, the argmax of its last logits
    (B, T, vocab), or EOS (``eos``, (B,)) where the row has ended; rows that end now are marked
    in ``finished`` (B,), in place."""
    next_token = torch.where(finished, eos, logits[:, -1].argmax(-1))
    finished.logical_or_(next_token == eos)
    return next_token


def stops_after(i: int, max_new_tokens: int, finished: torch.Tensor) -> bool:
    """Whether decoding ends after token ``i``: the budget is spent, or at a look (every
    ``CHECK_EVERY`` tokens) every row has ended. The rest of the output is EOS already."""
    return i + 1 == max_new_tokens or ((i + 1) % CHECK_EVERY == 0 and bool(finished.all()))


def active() -> StaticDecoding | None:
    """The ``StaticDecoding`` entered in this context, if any."""
    return _ACTIVE.get()


class StaticDecoding:
    """A run's fixed-shape decoders, one per (model, rows, capacity), kept while entered, at
    most ``KEPT_DECODERS`` of them."""

    def __init__(self) -> None:
        self.decoders: dict[tuple[int, int, int, int], StaticDecoder] = {}

    def __enter__(self) -> StaticDecoding:
        self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, *exc) -> None:
        _ACTIVE.reset(self._token)
        self.decoders.clear()  # the graphs and their memory go with the run

    def decoder(self, model: GPT, rows: int, capacity: int, eos_id: int) -> StaticDecoder:
        """The decoder of this shape for ``model``, made (and on CUDA captured) at first use.
        Each holds its model, so the ``id`` in its key stays that model's."""
        key = (id(model), rows, capacity, eos_id)
        decoder = self.decoders.pop(key, None)  # put back last: the most recently used
        if decoder is None:
            while len(self.decoders) >= KEPT_DECODERS:
                self.decoders.pop(next(iter(self.decoders)))  # the least recently used
            decoder = StaticDecoder(model, rows, capacity, eos_id)
        self.decoders[key] = decoder
        return decoder


class StaticDecoder:
    """Greedy decoding of exactly ``rows`` prompts into a cache of ``capacity`` positions."""

    def __init__(self, model: GPT, rows: int, capacity: int, eos_id: int) -> None:
        device = model.is_digit.device
        self.model, self.rows, self.eos_id = model, rows, eos_id
        # room for the warm-up's tokens before the capture
        self.capacity = max(capacity, WARMUP_STEPS + 2)
        self.cache = StaticKVCache(rows, self.capacity, device)
        self.token = torch.full((rows,), eos_id, dtype=torch.long, device=device)
        self.finished = torch.zeros(rows, dtype=torch.bool, device=device)
        self.eos = torch.full_like(self.token, eos_id)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.steps = 0  # decoding steps run (replayed or eager), warm-up and capture aside
        if device.type == "cuda":
            self._capture()

    @torch.no_grad()
    def decode(self, prompts: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        """``greedy_decode(model, prompts, max_new_tokens, eos_id)`` for prompts (rows, T)."""
        rows, length = prompts.shape
        if rows != self.rows or length + max_new_tokens - 1 > self.capacity:
            raise ValueError(
                f"a decoder of {self.rows} rows and {self.capacity} positions got {rows} prompts "
                f"of {length} tokens and {max_new_tokens} to write"
            )
        self.cache.reset()
        self.finished.zero_()
        logits, _ = self.model(prompts, self.cache)  # the prompt, eagerly, at its own length
        self.token.copy_(next_tokens(logits, self.finished, self.eos))
        out = torch.full(
            (rows, max_new_tokens), self.eos_id, dtype=torch.long, device=self.eos.device
        )
        for i in range(max_new_tokens):
            out[:, i] = self.token
            if stops_after(i, max_new_tokens, self.finished):
                break
            if self.graph is not None:
                self.graph.replay()
            else:
                self._step()
            self.steps += 1
        return out

    def _step(self) -> None:
        """Feed the last token, write the next one in its place: rows that ended write EOS."""
        logits, _ = self.model(self.token[:, None], self.cache)
        self.token.copy_(next_tokens(logits, self.finished, self.eos))

    @torch.no_grad()
    def _capture(self) -> None:
        """Capture ``_step`` as a CUDA graph; the warm-up's tokens are then forgotten."""
        self._step()  # the cache's buffers are allocated here, on the current stream
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_STEPS - 1):
                self._step()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        # thread-local: the run's batch thread keeps copying batches to the device meanwhile
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            self._step()
        self.cache.reset()

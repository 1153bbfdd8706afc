"""What crosses between the host and the device without the host waiting: batches and settings
copied from pinned memory, the loss read back for a progress bar; and the one wait a run takes
on purpose (``synchronize``, before an evaluation or a timed step ends)."""

from __future__ import annotations

from typing import Any

import torch


def synchronize(device: torch.device) -> None:
    """Wait until ``device`` has run everything the host queued on it (nothing to wait for on
    the CPU)."""
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def host_to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on ``device`` without the host waiting: on CUDA a copy from pinned memory,
    queued behind the device's work (a copy from pageable memory waits for the device first)."""
    if device.type != "cuda":
        return tensor.to(device)
    if not tensor.is_pinned():
        tensor = tensor.contiguous().pin_memory()
    return tensor.to(device, non_blocking=True)


class LossReadout:
    """The members' running training losses for a progress bar, read without waiting on the
    device: each copy to the host is queued behind the steps and shown once it has landed (on
    CUDA a step or so late; elsewhere at once)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.pending: tuple[torch.Tensor, list[int], Any] | None = None  # a copy on its way
        self.latest: list[float] | None = None  # each member's mean loss, as last landed

    def poll(self, sums: torch.Tensor, counts: list[int]) -> list[float] | None:
        """Each member's mean loss (``sums`` over ``counts`` steps) as last read, or None
        before a first copy has landed; starts the next copy once the last has landed."""
        if self.pending is not None and self.pending[2].query():
            self._land()
        if self.pending is None:
            host = torch.empty(sums.shape, dtype=sums.dtype, pin_memory=self.cuda)
            host.copy_(sums, non_blocking=self.cuda)
            done = torch.cuda.Event() if self.cuda else None
            if done is not None:
                done.record()
            self.pending = (host, list(counts), done)
            if done is None:
                self._land()
        return self.latest

    def _land(self) -> None:
        host, counts, _ = self.pending
        self.latest = [s / max(c, 1) for s, c in zip(host.tolist(), counts, strict=True)]
        self.pending = None

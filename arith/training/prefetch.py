"""The next steps' batches, built on a thread of their own while the device trains.

The thread calls the batch builder it is given (``step_batch.build_batch``: in the loop's order,
so a run trains on the batches it would get building each in turn) and keeps ``DEPTH`` batches
queued; the loop takes each with its copy to the device queued."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable

import torch

from arith.training.step_batch import Position, StepBatch

DEPTH = 2
"""Batches built ahead of the loop: one ready while the next is encoded."""


class BatchProducer:
    """The loop's batches, built ``DEPTH`` ahead on a background thread; a context manager whose
    end stops the thread (the loop returned or raised). An error building a batch is raised
    where the loop takes it."""

    def __init__(
        self, build: Callable[[], StepBatch], start: Position, device: torch.device
    ) -> None:
        """``build``: the next batch, on the host; ``start``: where the sources stand before
        the first (what a checkpoint taken before any step saves)."""
        self.device = device
        self._build = build
        self._position = start
        self._queue: queue.Queue[StepBatch | BaseException] = queue.Queue(maxsize=DEPTH)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, name="arith-batches", daemon=True)
        self._thread.start()

    def _produce(self) -> None:
        try:
            while not self._stop.is_set():
                self._queue.put(self._build())
        except BaseException as error:  # handed to the loop, which raises it
            self._queue.put(error)

    def next(self) -> StepBatch:
        """The next step's batch, its copy to the device queued."""
        batch = self._queue.get()
        if isinstance(batch, BaseException):
            raise batch
        self._position = batch.position
        return batch.to(self.device)

    def position(self) -> Position:
        """Where the last batch the loop took left the sources: what a checkpoint saves (the
        sources themselves are ahead by the batches built since)."""
        return self._position

    def close(self) -> None:
        self._stop.set()
        while self._thread.is_alive():
            with contextlib.suppress(queue.Empty):
                self._queue.get_nowait()  # frees the producer, should it wait to put
            self._thread.join(timeout=0.01)

    def __enter__(self) -> BatchProducer:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

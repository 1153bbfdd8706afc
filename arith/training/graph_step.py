"""A training step that is one CUDA graph (``train.compile: graph``, and ``auto`` on CUDA).

A small model's step on a GPU is kernel launches, not arithmetic (docs/gpu.md: 12-17 ms a step
from 100K to 3M parameters on an H200). So the whole step -- forward, backward, Grokfast's
filter, clipping, AdamW and the running loss -- is captured once and replayed, as PyTorch's
"whole-network capture" does (torch.cuda.graphs; for networks this small LeanRL reports 5.7x
over eager with compile and a whole-step graph on an H100, burn 8x for a small MLP's step as one
graph). A graph replays fixed kernels on fixed addresses, so the step reads and writes only
tensors that stay put for the run:

- the batch is copied into buffers of one shape (every batch padded to the run's longest
  training row: ``step_batch.step_length``; a batch always has ``train.batch_size`` rows);
- what the host changes from step to step (each member's learning-rate coefficients, which
  members update, the weight of Grokfast's average) is written into one settings tensor
  (``PackedAdamW.step_settings``) before the replay; the step itself reads nothing back.

Off CUDA the same step runs eagerly at every call: that is how the CPU tests check it against
the eager trainer, its shapes and its addresses.
"""

from __future__ import annotations

import torch

from arith.training.loss import backward_part
from arith.training.optim import SETTINGS_ROWS, PackedAdamW
from arith.training.step_batch import StepBatch
from arith.training.transfers import host_to_device

WARMUP_STEPS = 3
"""Eager steps on a side stream before the capture (torch's recipe: the allocator and the
libraries' workspaces settle first). They are the run's own steps, not extra ones."""


def step_mode(device: torch.device, compile: bool | str, length_buckets: int) -> bool | str:
    """``train.compile`` as a run on ``device`` trains: ``graph`` (this module), ``True``
    (``torch.compile`` of the forward pass) or ``False`` (eager). ``auto`` is the graph on CUDA
    with one length bucket (a graph takes one shape) and eager elsewhere: a CPU has no launches
    to save, and the padding to one length costs it work."""
    if compile != "auto":
        return compile
    return "graph" if device.type == "cuda" and length_buckets == 1 else False


def step_name(mode: bool | str) -> str:
    """A resolved ``step_mode`` as the run's ``hardware.step`` records it."""
    return {False: "eager", True: "compiled", "graph": "graph"}[mode]


class GraphedStep:
    """``step(batch, active)``: one training step of the pack, forward to optimiser, over
    static buffers; on CUDA captured as one graph after ``WARMUP_STEPS`` and replayed."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: PackedAdamW,
        running: torch.Tensor,
        autocast,
        device: torch.device,
    ) -> None:
        """``running``: (M,) each member's mean losses summed on the device (the step adds its
        own); ``autocast``: the run's context, without its cast cache where it is enabled (a
        graph must not reuse casts made before its capture)."""
        self.model, self.optimizer, self.running = model, optimizer, running
        self.autocast, self.device = autocast, device
        self.n_members = running.shape[0]
        self.settings = torch.zeros(SETTINGS_ROWS, self.n_members, device=device)
        self.buffers: list[torch.Tensor | None] | None = None  # the batch's, from the first
        self.graph: torch.cuda.CUDAGraph | None = None
        self.calls = 0

    def __call__(self, batch: StepBatch, active: list[int]) -> None:
        settings = self.optimizer.step_settings(active)  # on the host; counts the step
        self._load(batch, settings)
        self.calls += 1
        if self.device.type != "cuda":
            self._body()
        elif self.graph is not None:
            self.graph.replay()
        elif self.calls <= WARMUP_STEPS:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                self._body()
            torch.cuda.current_stream(self.device).wait_stream(side)
        else:
            self.optimizer.zero_grad()  # the gradients are allocated in the graph's own pool
            self.graph = torch.cuda.CUDAGraph()
            # thread_local: the batch thread (prefetch.py) allocates and copies on its own
            # during the capture, which the default mode ("global") would refuse
            with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
                self._body(zero_grad=False)
            self.graph.replay()  # the capture ran nothing: this step runs now

    def _load(self, batch: StepBatch, settings: torch.Tensor) -> None:
        """Copy the batch and the settings into the step's buffers (made from the first)."""
        if len(batch.parts) != 1 or batch.parts[0][1] is not None:
            raise ValueError("a graphed step takes one part with every token (no length buckets)")
        inputs, _, targets, weights, offsets = batch.parts[0]
        given = [inputs, targets, weights, offsets, batch.token_counts]
        if self.buffers is None:
            self.buffers = [None if t is None else t.clone() for t in given]
        for buffer, tensor in zip(self.buffers, given, strict=True):
            if buffer is None:
                continue
            if tensor.shape != buffer.shape:
                shapes = f"{tuple(buffer.shape)}, got {tuple(tensor.shape)}"
                raise ValueError(f"a graphed step takes one shape: {shapes}")
            buffer.copy_(tensor, non_blocking=True)
        self.settings.copy_(host_to_device(settings, self.device), non_blocking=True)

    def _body(self, zero_grad: bool = True) -> None:
        """The step itself: every tensor it touches is a buffer, a parameter or the optimiser's
        state, and every member's rows are computed (a stopped member's update is masked)."""
        inputs, targets, weights, offsets, counts = self.buffers
        if zero_grad:
            self.optimizer.zero_grad()
        part = (inputs, None, targets, weights, offsets)  # every token's logits
        sums = backward_part(self.model, self.model, self.autocast, part, counts)
        self.running.add_(sums / counts)
        self.optimizer.filter_grads_with(self.settings)
        self.optimizer.clip_grad_norms(list(range(self.n_members)))
        self.optimizer.step_with(self.settings)

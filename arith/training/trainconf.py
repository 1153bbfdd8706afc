"""The training concern of a run config: how long and how one run trains, and when it stops.

Its own module so that ``config.py`` (which composes it), ``stopping.py`` and ``trainer.py`` all
import it without an import circle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from arith.errors import ConfigError, require

# Optimisation steps of a run that sets none of max_steps, epochs and the budgets.
DEFAULT_MAX_STEPS = 2000
# The keys that set a run's length; a budget excludes the others.
LENGTH_KEYS = ("max_steps", "epochs", "flops_budget", "tokens_budget")


@dataclass(frozen=True)
class TrainConfig:
    """How long and how one run trains, and when it stops."""

    seed: int = 0
    """Seeds the model's initialisation, batches, dropout and (unless data.seed) the split."""
    batch_size: int = 256
    """Problems per optimisation step."""
    max_steps: int | None = None
    """Optimisation steps; ``None``: DEFAULT_MAX_STEPS, unless ``epochs`` or a budget sets the
    length (``max_steps`` is ignored when ``epochs`` is set)."""
    epochs: float | None = None
    """Passes over a fixed training set instead of ``max_steps``."""
    flops_budget: float | None = None
    """Training FLOPs to spend instead of ``max_steps``: steps = ceil(budget / FLOPs per step),
    so a ladder of sizes can be compute-matched (isoFLOP, Hoffmann et al. 2022); see
    ``step_cost`` for what is counted."""
    tokens_budget: float | None = None
    """Training tokens to see instead of ``max_steps``: steps = ceil(budget / tokens per step)."""
    length_buckets: int = 1
    """Split each batch into this many micro-batches of rows of alike length, each padded to
    its own longest row only: the same loss and gradient with fewer pad tokens where answer
    lengths vary a lot (multi_op's answers with a division trace run from 19 to 290 tokens); 1:
    one batch."""
    eval_every: int = 250
    """Steps between evaluations (and reports and checkpoints)."""
    train_eval_size: int = 512
    """Training problems measured at each evaluation for ``train/exact_match``."""
    monitor: str = "val/exact_match"
    """Metric for early stopping, ``target`` and the best checkpoint; higher is better unless it
    is a loss. One that every evaluation reports (``train/`` and ``val/`` as measured in
    training: ``arith.evaluation.breakdowns.evaluated_metrics``); any other name is refused."""
    patience: int | None = None
    """Stop after this many evaluations without improvement of ``monitor``; ``None``: never."""
    min_delta: float = 0.0
    """Smallest change of ``monitor`` that counts as an improvement."""
    target: float | None = None
    """Stop once ``monitor`` reaches this (seed 004 stops at 0.99 exact match)."""
    min_steps: int = 0
    """No early stop (patience or target) before this step."""
    threshold: float = 0.95
    """Validation exact match ``val/steps_to_threshold`` waits for (seed 003 groks at 95 %)."""
    device: str = "auto"
    """``auto`` (CUDA, then MPS, then CPU), or a torch device string."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """``auto``: bf16 autocast where it was measured to pay (``arith.training.device``): from
    width 512 on CUDA devices that support it, from width 64 on CPUs with bf16 in hardware;
    fp32 elsewhere. The resolved one is the run's ``hardware.precision``."""
    compile: bool | Literal["auto", "graph"] = False
    """How a training step runs. ``false``: eager. ``graph``: the whole step (forward,
    backward, filter, clipping, AdamW) as one CUDA graph over buffers of one shape
    (``arith.training.graph_step``), and evaluation's decoding step likewise
    (``arith.evaluation.static_decode``); off CUDA the same steps eagerly. ``true``:
    ``torch.compile`` of the forward pass (``mode="reduce-overhead"``, CUDA graphs of the
    forward, on CUDA). ``auto``: ``graph`` on CUDA with one length bucket, else eager. Off by
    default until the GPU acceptance run (``python -m sweeps.bench --gpu``) has measured the
    graph against eager; on 2 CPU cores (2026-11-26) ``true`` gave 1.19x eager fp32 at 1M
    parameters after warm-up (1.82 -> 2.17 steps/s, ``python -m arith.bench --compile``), the
    compile itself left out."""
    time_budget_s: float | None = None
    """Stop training after this many seconds (then evaluate and return)."""
    peak_flops: float | None = None
    """Device peak FLOP/s for ``perf/mfu``; ``None``: the peak of a GPU whose exact name
    ``arith.training.throughput.GPU_PEAK_FLOPS`` lists (bf16 training only), else no MFU."""

    def __post_init__(self) -> None:
        require(self.batch_size >= 1, "train.batch_size", f"must be >= 1, got {self.batch_size}")
        require(
            self.max_steps is None or self.max_steps >= 1,
            "train.max_steps",
            f"must be >= 1 or null, got {self.max_steps}",
        )
        require(
            self.epochs is None or self.epochs > 0,
            "train.epochs",
            f"must be > 0, got {self.epochs}",
        )
        require(
            1 <= self.length_buckets <= self.batch_size,
            "train.length_buckets",
            f"must be in 1..train.batch_size ({self.batch_size}), got {self.length_buckets}",
        )
        require(self.eval_every >= 1, "train.eval_every", f"must be >= 1, got {self.eval_every}")
        require(
            self.train_eval_size >= 1,
            "train.train_eval_size",
            f"must be >= 1, got {self.train_eval_size}",
        )
        require(
            self.patience is None or self.patience >= 1,
            "train.patience",
            f"must be >= 1 or null, got {self.patience}",
        )
        require(self.min_steps >= 0, "train.min_steps", f"must be >= 0, got {self.min_steps}")
        for key in ("flops_budget", "tokens_budget"):
            value = getattr(self, key)
            require(
                value is None or 0 < value < math.inf,
                f"train.{key}",
                f"must be > 0 or null, got {value}",
            )
        lengths = [k for k in LENGTH_KEYS if getattr(self, k) is not None]
        budgets = [k for k in lengths if k.endswith("_budget")]
        if budgets and len(lengths) > 1:
            other = next(k for k in lengths if k != budgets[-1])
            raise ConfigError(
                f"train.{budgets[-1]}",
                f"cannot be combined with train.{other}; a run's length comes from one of "
                "max_steps, epochs, flops_budget, tokens_budget (set the others to null)",
            )
        require(
            self.device == "auto" or self.device.split(":")[0] in ("cpu", "cuda", "mps"),
            "train.device",
            f"expected auto, cpu, cuda, cuda:N or mps, but got {self.device!r}",
        )
        require(
            self.compile != "graph" or self.length_buckets == 1,
            "train.compile",
            f"graph takes one batch shape a run, but train.length_buckets is "
            f"{self.length_buckets}; set train.length_buckets: 1, or train.compile: auto",
        )
        require(
            self.peak_flops is None or 0 < self.peak_flops < math.inf,
            "train.peak_flops",
            f"must be a finite number > 0 (FLOP/s) or null, got {self.peak_flops}",
        )
        require(
            self.time_budget_s is None or self.time_budget_s > 0,
            "train.time_budget_s",
            f"must be > 0 or null, got {self.time_budget_s}",
        )

    @property
    def higher_is_better(self) -> bool:
        return "loss" not in self.monitor

"""``optim:``, AdamW's settings and its learning-rate schedule (``OptimConfig``, ``lr_factor``),
apart from the optimiser itself (arith.training.optim) so that reading and checking a config
imports no torch."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from arith.errors import require


@dataclass(frozen=True)
class OptimConfig:
    """AdamW with decoupled weight decay (Loshchilov & Hutter 2019)."""

    lr: float = 1e-3
    """Peak learning rate, reached at the end of warmup."""
    betas: tuple[float, ...] = (0.9, 0.98)
    """Adam's (beta1, beta2); seed 002 uses (0.9, 0.95)."""
    weight_decay: float = 0.1
    """Decoupled weight decay on every matrix (embeddings included), not on biases or norms."""
    eps: float = 1e-8
    """Adam's epsilon."""
    schedule: Literal["cosine", "linear", "constant"] = "cosine"
    """Shape of the learning rate after warmup."""
    warmup_steps: int = 100
    """Steps of linear warmup from 0 to ``lr``."""
    min_lr_ratio: float = 0.1
    """Final learning rate of the cosine / linear decay, as a fraction of ``lr``."""
    decay_steps: int | None = None
    """Steps of the decay after warmup, after which the rate stays at its end; None: until
    the run's last step. A recipe's schedule, apart from how long a run may train."""
    grad_clip: float | None = 1.0
    """Clip the global gradient norm to this; ``None`` disables clipping."""
    abacus_bias_lr_mult: float = 10.0
    """Learning rate of the ``abacus_bias`` table (model.position) as a multiple of ``lr``.
    AdamW moves a parameter by about lr per step, so at a usual lr the bias needs thousands of
    steps to reach the few units a sharp preference takes; ten times faster, it gets there
    early (docs/notes/abacus_length.md)."""
    grad_filter: Literal["none", "ema"] = "none"
    """``ema``: Grokfast's filter (Lee et al. 2024), each gradient plus ``grad_filter_lamb``
    times its moving average, before clipping (arith.training.grad_filter)."""
    grad_filter_alpha: float = 0.98
    """Decay of the filter's moving average: ema = alpha * ema + (1 - alpha) * grad."""
    grad_filter_lamb: float = 2.0
    """How much of the moving average the filter adds to each gradient."""
    weight_ema: float | None = None
    """Decay per step of an exponential moving average of the weights, which evaluation,
    early stopping and the saved model read instead of the weights (Polyak averaging,
    arith.training.weight_average); ``None``: the weights themselves. 0.99 averages about the
    last 100 steps."""

    def __post_init__(self) -> None:
        # finite: a spec's .inf passes "> 0" and trains nothing but NaN
        require(0 < self.lr < math.inf, "optim.lr", f"must be > 0 and finite, but got {self.lr}")
        require(
            len(self.betas) == 2 and all(0.0 <= b < 1.0 for b in self.betas),
            "optim.betas",
            f"expected two numbers in [0, 1), but got {list(self.betas)}",
        )
        require(
            0 <= self.weight_decay < math.inf,
            "optim.weight_decay",
            f"must be >= 0 and finite, got {self.weight_decay}",
        )
        require(0 < self.eps < math.inf, "optim.eps", f"must be > 0 and finite, but got {self.eps}")
        require(
            self.warmup_steps >= 0, "optim.warmup_steps", f"must be >= 0, got {self.warmup_steps}"
        )
        require(
            self.decay_steps is None or self.decay_steps >= 1,
            "optim.decay_steps",
            f"must be >= 1 or null, but got {self.decay_steps}",
        )
        require(
            0.0 <= self.min_lr_ratio <= 1.0,
            "optim.min_lr_ratio",
            f"must be in [0, 1], but got {self.min_lr_ratio}",
        )
        require(
            self.weight_ema is None or 0.0 <= self.weight_ema < 1.0,
            "optim.weight_ema",
            f"must be in [0, 1) or null, but got {self.weight_ema}",
        )
        require(
            self.grad_clip is None or self.grad_clip > 0,
            "optim.grad_clip",
            f"must be > 0 or null, but got {self.grad_clip}",
        )
        require(
            0 < self.abacus_bias_lr_mult < math.inf,
            "optim.abacus_bias_lr_mult",
            f"must be > 0 and finite, but got {self.abacus_bias_lr_mult}",
        )
        require(
            0.0 <= self.grad_filter_alpha < 1.0,
            "optim.grad_filter_alpha",
            f"must be in [0, 1), but got {self.grad_filter_alpha}",
        )
        require(
            0 <= self.grad_filter_lamb < math.inf,
            "optim.grad_filter_lamb",
            f"must be >= 0 and finite, but got {self.grad_filter_lamb}",
        )


def lr_factor(cfg: OptimConfig, step: int, total_steps: int) -> float:
    """Multiplier of ``cfg.lr`` at ``step`` (0-based): a pure function, as in nanoGPT's get_lr."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    decay_steps = cfg.decay_steps or max(1, total_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / decay_steps)
    if cfg.schedule == "cosine":
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        shape = 1.0 - progress
    return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * shape

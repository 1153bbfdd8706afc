"""The learning-rate schedule (``arith.training.optim.lr_factor``): warmup, then the decay over
the run or over ``optim.decay_steps``, then its end."""

from __future__ import annotations

import pytest

from arith.errors import ConfigError
from arith.training.optim import OptimConfig, lr_factor


def test_the_decay_ends_at_decay_steps_and_stays_at_its_end():
    cfg = OptimConfig(warmup_steps=10, schedule="cosine", min_lr_ratio=0.1, decay_steps=100)
    assert lr_factor(cfg, 9, 4000) == 1.0  # the end of warmup
    assert lr_factor(cfg, 60, 4000) == pytest.approx(0.55)  # half way down the cosine
    assert lr_factor(cfg, 110, 4000) == pytest.approx(0.1)
    assert lr_factor(cfg, 3999, 4000) == pytest.approx(0.1)
    whole_run = OptimConfig(warmup_steps=10, schedule="cosine", min_lr_ratio=0.1)
    assert lr_factor(whole_run, 60, 110) == lr_factor(cfg, 60, 4000)  # None: the run's length
    linear = OptimConfig(warmup_steps=0, schedule="linear", min_lr_ratio=0.0, decay_steps=50)
    assert lr_factor(linear, 25, 1000) == pytest.approx(0.5) and lr_factor(linear, 80, 1000) == 0


def test_decay_steps_must_be_positive():
    with pytest.raises(ConfigError, match=r"^optim\.decay_steps: must be >= 1 or null"):
        OptimConfig(decay_steps=0)

"""Numbers that mean what they say (issue 33, item 4): each reported number counts what its
name says, under every setting that could bend it."""

from __future__ import annotations

import math

import torch

from arith.model import gpt
from arith.model.gpt import CausalSelfAttention, ModelConfig
from arith.model.kv_cache import KVCache
from arith.training.stopping import LoopState
from arith.training.trainconf import TrainConfig


def test_best_is_the_true_best_while_patience_counts_on_min_delta():
    tc = TrainConfig(monitor="val/exact_match", min_delta=0.05, patience=3)
    state = LoopState()
    reasons = [
        state.update({"val/exact_match": v}, step, tc)
        for step, v in enumerate([0.50, 0.52, 0.53, 0.54], start=1)
    ]
    assert state.best == 0.54  # small gains are still the best value seen
    assert state.evals_without_improvement == 3  # none beat 0.50 by more than 0.05
    assert reasons[-1] == "early_stopping"


def test_best_of_a_loss_is_its_lowest_with_min_delta():
    tc = TrainConfig(monitor="val/loss", min_delta=0.1)
    state = LoopState()
    for step, v in enumerate([1.0, 0.95, 0.7, 0.75], start=1):
        state.update({"val/loss": v}, step, tc)
    assert state.best == 0.7
    assert state.evals_without_improvement == 1  # 0.7 beat 1.0 by more than 0.1


def test_a_checkpoint_from_before_patience_best_keeps_counting_from_its_best():
    tc = TrainConfig(min_delta=0.05)
    state = LoopState(best=0.5, evals_without_improvement=2)  # as an older checkpoint loads
    state.update({"val/exact_match": 0.53}, 10, tc)
    assert state.best == 0.53 and state.evals_without_improvement == 3


def test_log_length_scale_is_fp32_under_bf16_autocast(monkeypatch):
    """257 keys: bf16 reads 257 as 256, and log(256) rounds to a different bf16 than log(257)."""
    cfg = ModelConfig(n_layer=1, d_model=4, n_head=1, bias=False, log_length_attention=True)
    attn = CausalSelfAttention(cfg, members=1)
    with torch.no_grad():
        eye = torch.eye(4)
        attn.qkv.weight[0].copy_(torch.cat([eye, eye, eye]))  # q = x
    seen = {}

    def keep_q(q, k, v, *args):
        seen["q"] = q
        return v

    monkeypatch.setattr(gpt, "attention", keep_q)
    x = torch.ones(1, 257, 4)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        attn(x, None, KVCache(), 0, dropout=(0.0,))
    q = seen["q"]  # (B, nh, T, hs), q = 1 before the scale
    expected = torch.tensor(math.log(257.0)).to(q.dtype)
    assert torch.equal(q[0, 0, -1], expected.expand(4))
    assert torch.equal(q[0, 0, 0], torch.zeros(4, dtype=q.dtype))  # log(1): the first sees itself

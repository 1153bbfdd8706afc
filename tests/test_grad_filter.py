"""Grokfast's EMA gradient filter (optim.grad_filter): its arithmetic, that it changes nothing
when off, its config errors, and that a resumed run with it continues bit-identically. (That a
step with it reads nothing back on the host: tests/test_host_reads.py.)"""

from __future__ import annotations

import re

import pytest
import torch
from optim_runs import TINY, assert_members_train_as_alone, assert_resumes_bit_identically

from arith import config as config_lib
from arith.errors import ConfigError
from arith.training import checkpoint as ckpt
from arith.training.grad_filter import EmaGradFilter
from arith.training.trainer import train_pack

EMA = ["optim.grad_filter=ema"]


class Stepper:
    """The filter over one parameter of shape (members, 2), as a pack stacks it, with the step
    counts the optimiser would keep."""

    def __init__(self, alphas: list[float], lambs: list[float | None]) -> None:
        self.filter = EmaGradFilter([torch.zeros(len(alphas), 2)], alphas, lambs)
        self.step_counts = [0] * len(alphas)

    def __call__(self, grads: list[list[float]], members: list[int]) -> list[list[float]]:
        """The filtered gradients of a step whose gradients are ``grads`` (a row per member)."""
        (param,) = self.filter.params
        param.grad = torch.tensor(grads)
        self.filter.apply(members, self.step_counts)
        for i in members:
            self.step_counts[i] += 1
        return param.grad.tolist()


def test_one_model_filters_as_computed_by_hand():
    step = Stepper([0.5], [2.0])
    # step 1: the average starts at the gradient, ema = g1, so the gradient is g1 + 2 g1
    assert step([[1.0, -2.0]], [0]) == [[3.0, -6.0]]
    # step 2: ema = 0.5 [1, -2] + 0.5 [3, 2] = [2, 0]; gradient [3, 2] + 2 [2, 0]
    assert step([[3.0, 2.0]], [0]) == [[7.0, 2.0]]
    assert step.filter.ema[0].tolist() == [[2.0, 0.0]]


def test_a_pack_filters_each_member_with_its_own_settings():
    # member 0 as above; member 1 alpha 0.75, lamb 1; member 2 does not filter
    step = Stepper([0.5, 0.75, 0.98], [2.0, 1.0, None])
    first = [[1.0, -2.0], [4.0, 8.0], [5.0, 6.0]]
    assert step(first, [0, 1, 2]) == [[3.0, -6.0], [8.0, 16.0], [5.0, 6.0]]
    # member 1: ema = 0.75 [4, 8] + 0.25 [0, 4] = [3, 7]; gradient [0, 4] + [3, 7]
    second = [[3.0, 2.0], [0.0, 4.0], [7.0, 8.0]]
    assert step(second, [0, 1, 2]) == [[7.0, 2.0], [3.0, 11.0], [7.0, 8.0]]
    assert step.filter.ema[0][2].tolist() == [0.0, 0.0]  # nothing kept for member 2


def test_a_member_that_stopped_keeps_its_average():
    step = Stepper([0.5, 0.5], [2.0, 2.0])
    step([[1.0, 1.0], [2.0, 2.0]], [0, 1])
    step([[3.0, 3.0], [9.0, 9.0]], [0])  # member 1 no longer steps
    assert step.filter.ema[0].tolist() == [[2.0, 2.0], [2.0, 2.0]]


def losses(*overrides: str) -> list[tuple[float | None, float]]:
    """The training and validation losses at each evaluation of a tiny run (step 0 has
    trained on nothing yet)."""
    reports: list[dict] = []
    config = config_lib.load(None, [*TINY, *overrides])
    train_pack([config], lambda member, metrics: reports.append(metrics))
    return [(m.get("train/loss"), m["val/loss"]) for m in reports]


def test_the_filter_off_or_at_lamb_0_leaves_training_unchanged():
    default = losses()
    # off, its knobs do nothing; on with lamb 0 it adds nothing to a gradient
    assert losses("optim.grad_filter_lamb=5.0", "optim.grad_filter_alpha=0.5") == default
    assert losses(*EMA, "optim.grad_filter_lamb=0.0") == default
    assert losses(*EMA, "optim.grad_filter_lamb=2.0") != default  # and on, it filters


def test_each_member_of_a_pack_filters_as_it_would_alone():
    members = [EMA, ["train.seed=1"], [*EMA, "optim.grad_filter_alpha=0.9", "train.seed=2"]]
    configs = [config_lib.load(None, [*TINY, "train.max_steps=10", *m]) for m in members]
    assert_members_train_as_alone(configs)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("optim.grad_filter_alpha=1.0", "optim.grad_filter_alpha: must be in [0, 1), but got 1.0"),
        ("optim.grad_filter_alpha=-0.1", "optim.grad_filter_alpha: must be in [0, 1)"),
        ("optim.grad_filter_lamb=-1", "optim.grad_filter_lamb: must be >= 0 and finite"),
        ("optim.grad_filter_lamb=.inf", "optim.grad_filter_lamb: must be >= 0 and finite"),
        ("optim.grad_filter=sma", "optim.grad_filter: expected one of 'none', 'ema'"),
    ],
)
def test_a_bad_setting_is_a_config_error_naming_it(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        config_lib.load(None, [override])


@pytest.mark.parametrize(
    "members",
    [
        [EMA],
        [EMA, ["train.seed=1", "optim.grad_filter_alpha=0.9", "optim.grad_filter_lamb=5.0"]],
    ],
    ids=["one", "pack"],
)
def test_a_resumed_run_with_the_filter_continues_bit_identically(members, tmp_path):
    configs = [config_lib.load(None, [*TINY, *EMA, *m]) for m in members]
    assert_resumes_bit_identically(configs, tmp_path / "whole", tmp_path / "run")
    stored = ckpt.read(tmp_path / "whole")["optimizer"]["grad_ema"]
    assert any(ema.abs().sum() > 0 for ema in stored)  # the averages are in the checkpoint

"""The weights' moving average (optim.weight_ema): its arithmetic, that it leaves training
itself alone and changes only what is measured and saved, its config errors, that a pack's
members average as they would alone, and that a resumed run with it continues bit-identically.
(That a step with it reads nothing back on the host: tests/test_host_reads.py; the graphed
step with it: tests/test_graph_step.py.)"""

from __future__ import annotations

import re

import pytest
import torch
from optim_runs import TINY as OPTIM_TINY
from optim_runs import assert_members_train_as_alone, assert_resumes_bit_identically

from arith import config as config_lib
from arith.errors import ConfigError
from arith.training import checkpoint as ckpt
from arith.training.trainer import train, train_pack
from arith.training.weight_average import WeightAverage

TINY = [*OPTIM_TINY, "optim.lr=1e-2"]
EMA = ["optim.weight_ema=0.8"]


def test_the_average_is_bias_corrected_and_swapped_in_only_for_the_block():
    param = torch.tensor([[2.0, 4.0], [1.0, 1.0], [5.0, 5.0]])  # three members, stacked
    average = WeightAverage([param], [0.5, 0.5, None])
    average.update([0, 1, 2])  # average = 0.5 * weights (member 2: decay 0, the weights)
    param.copy_(torch.tensor([[4.0, 8.0], [3.0, 3.0], [6.0, 6.0]]))
    average.update([0, 2])  # member 1 did not step
    # member 0: 0.25 [2, 4] + 0.5 [4, 8] = [2.5, 5], read / (1 - 0.5 ** 2) = [10/3, 20/3]
    # member 1: 0.5 [1, 1] after its one step, read / (1 - 0.5) = [1, 1]; member 2: [6, 6]
    with average.swapped_in([2, 1, 2]):
        torch.testing.assert_close(param, torch.tensor([[10 / 3, 20 / 3], [1.0, 1.0], [6.0, 6.0]]))
        param.add_(100.0)  # what the block does to the weights is undone after it
    assert param.tolist() == [[4.0, 8.0], [3.0, 3.0], [6.0, 6.0]]
    with average.swapped_in([2, 0, 2]):  # a member that has not stepped keeps its weights
        assert param[1].tolist() == [3.0, 3.0]


def reports(*overrides: str) -> list[dict]:
    out: list[dict] = []
    train(config_lib.load(None, [*TINY, *overrides]), out.append)
    return out


def test_the_average_changes_what_is_measured_not_how_the_model_trains():
    plain, averaged = reports(), reports(*EMA)
    # the same steps and training losses: the average is read, never trained
    assert [(r["step"], r.get("train/loss")) for r in averaged] == [
        (r["step"], r.get("train/loss")) for r in plain
    ]
    # what is measured comes from the average: other validation losses after step 0
    assert averaged[0]["val/loss"] == plain[0]["val/loss"]
    later = zip(averaged[1:], plain[1:], strict=True)
    assert all(a["val/loss"] != p["val/loss"] for a, p in later)
    # a decay of 0 averages nothing: every figure as without one
    keep = ("step", "train/loss", "val/loss", "val/exact_match", "test/loss")
    zero = reports("optim.weight_ema=0.0")
    figures = lambda runs: [{k: r.get(k) for k in keep} for r in runs]  # noqa: E731
    assert figures(zero) == figures(plain)


def test_the_saved_model_is_the_average_and_the_checkpoint_keeps_the_weights(tmp_path):
    (summary,) = train_pack([config_lib.load(None, [*TINY, *EMA])], checkpoint_dir=tmp_path)
    state = ckpt.read(tmp_path)
    saved = ckpt.read_model(ckpt.member_dir(tmp_path, 0, 1))["model"]
    raw = state["model"]
    differs = [k for k in saved if not torch.equal(saved[k], raw[k])]
    assert differs  # the model kept is the average, the checkpoint the loop's weights
    assert any(a.abs().sum() > 0 for a in state["optimizer"]["weight_average"])
    assert summary["final_weights"] == "last"


def test_each_member_of_a_pack_averages_as_it_would_alone():
    members = [EMA, ["train.seed=1"], ["optim.weight_ema=0.5", "train.seed=2"]]
    configs = [config_lib.load(None, [*TINY, "train.max_steps=10", *m]) for m in members]
    assert_members_train_as_alone(configs)


@pytest.mark.parametrize("value", ["1.0", "-0.1", "1.5"])
def test_a_bad_decay_is_a_config_error_naming_it(value):
    message = f"optim.weight_ema: must be in [0, 1) or null, but got {float(value)}"
    with pytest.raises(ConfigError, match=re.escape(message)):
        config_lib.load(None, [f"optim.weight_ema={value}"])


@pytest.mark.parametrize(
    "members", [[EMA], [EMA, ["train.seed=1", "optim.weight_ema=0.5"]]], ids=["one", "pack"]
)
def test_a_resumed_run_with_the_average_continues_bit_identically(members, tmp_path):
    configs = [config_lib.load(None, [*TINY, *m]) for m in members]
    assert_resumes_bit_identically(configs, tmp_path / "whole", tmp_path / "run")

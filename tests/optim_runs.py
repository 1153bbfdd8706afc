"""What the tests of an optimiser option share (Grokfast's filter, the weights' average): a
tiny run's overrides, and the check that a run killed at step 10 and resumed ends as the run
that was never stopped."""

from __future__ import annotations

import pytest
import torch

from arith.training import checkpoint as ckpt
from arith.training.trainer import train, train_pack

TINY = [
    "task.n_digits=2",
    "format.name=reversed",
    "model.d_model=16",
    "model.n_layer=1",
    "model.n_head=2",
    "train.batch_size=16",
    "train.max_steps=20",
    "train.eval_every=5",
    "train.train_eval_size=16",
    "train.precision=fp32",
    "train.device=cpu",
    "data.val_size=16",
    "data.test_size=16",
    "optim.warmup_steps=2",
]
# What differs between any two runs of one config: timings and where files live.
VARIES = ("wall_time_s", "time/elapsed_s", "perf/", "checkpoint")


class Killed(Exception):
    """What the report callback raises to end a run as a killed trial would end."""


def assert_resumes_bit_identically(configs, whole_dir, run_dir) -> None:
    """Train ``configs`` (a pack, or one) whole into ``whole_dir`` (done already where it
    holds a run), then killed at step 10 and resumed in ``run_dir``: the same summaries and the
    same saved models."""
    whole = train_pack(configs, checkpoint_dir=whole_dir)

    def die_at_10(member, metrics):
        if metrics["step"] == 10:
            raise Killed

    with pytest.raises(Killed):
        train_pack(configs, die_at_10, checkpoint_dir=run_dir)
    resumed = train_pack(configs, checkpoint_dir=run_dir, resume_from=run_dir)
    for i, (a, b) in enumerate(zip(whole, resumed, strict=True)):
        assert {k: v for k, v in b.items() if not k.startswith(VARIES)} == {
            k: v for k, v in a.items() if not k.startswith(VARIES)
        }, i
        saved = ckpt.read_model(ckpt.member_dir(run_dir, i, len(configs)))
        expected = ckpt.read_model(ckpt.member_dir(whole_dir, i, len(configs)))
        assert all(torch.equal(saved["model"][k], expected["model"][k]) for k in saved["model"])


def assert_members_train_as_alone(configs) -> None:
    """Each member of a pack of ``configs`` reports, at every evaluation, the training and
    validation losses it reports trained alone, up to the pack's rounding."""
    packed: list[list[dict]] = [[] for _ in configs]
    train_pack(configs, lambda i, metrics: packed[i].append(metrics))
    for config, got in zip(configs, packed, strict=True):
        alone: list[dict] = []
        train(config, alone.append)
        assert [r["step"] for r in got] == [r["step"] for r in alone]
        for p, a in zip(got, alone, strict=True):
            for key in ("train/loss", "val/loss"):
                if key in a:
                    assert p[key] == pytest.approx(a[key], rel=1e-4, abs=1e-5), key

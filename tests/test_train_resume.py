"""A run killed after a checkpoint and resumed ends as the uninterrupted run does: same steps,
same stop, same model chosen by the monitor, same test metrics (single runs and packs)."""

from __future__ import annotations

import pytest
import torch

from arith import config as config_lib
from arith.training import checkpoint as ckpt
from arith.training.trainer import train_pack

TINY = [
    "task.n_digits=2",
    "format.name=reversed",
    "model.d_model=32",
    "model.n_layer=1",
    "train.batch_size=32",
    "train.eval_every=5",
    "train.train_eval_size=32",
    "data.val_size=32",
    "data.test_size=32",
    "optim.warmup_steps=5",
    "train.max_steps=60",
]
# Early stopping that picks an earlier model: val loss rises once lr 3e-2 overshoots (seed 0
# stops at step 35 on step 25's weights; seed 1 trains to the end).
PATIENCE = ["train.monitor=val/loss", "train.patience=2", "optim.lr=3e-2"]
TARGET = ["train.monitor=val/token_accuracy", "train.target=0.4", "optim.lr=1e-2"]  # step 30
GRAPH = ["train.compile=graph"]
# What differs between any two runs of one config: timings and where files live.
VARIES = ("wall_time_s", "time/elapsed_s", "perf/", "checkpoint")


class Killed(Exception):
    """What the report callback raises to end a run as a killed trial would end."""


def runs(*member_overrides: list[str]):
    return [config_lib.load(None, [*TINY, *o]) for o in member_overrides]


def comparable(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if not k.startswith(VARIES)}


def train_killed_then_resumed(configs, kill_at: int, tmp_path) -> list[dict]:
    """Train until the checkpoint of step ``kill_at`` is written, die, then resume from it."""

    def die_at(member, metrics):
        if metrics["step"] == kill_at:
            raise Killed

    with pytest.raises(Killed):
        train_pack(configs, die_at, checkpoint_dir=tmp_path / "run")
    return train_pack(configs, checkpoint_dir=tmp_path / "run", resume_from=tmp_path / "run")


@pytest.mark.parametrize(
    ("members", "kill_at"),
    [
        ([PATIENCE], 30),  # killed after the best step: the best weights come from the file
        ([TARGET], 20),
        ([PATIENCE, ["train.seed=1", *PATIENCE]], 40),  # member 0 stopped before the kill
        ([PATIENCE, TARGET], 30),
        # the graphed step (train.compile: graph): member 0 stopped before the kill, member 1
        # with Grokfast's filter trains on
        ([[*PATIENCE, *GRAPH], ["train.seed=1", *GRAPH, "optim.grad_filter=ema"]], 40),
    ],
    ids=["patience", "target", "pack-stopped-member", "pack-patience-target", "pack-graph"],
)
def test_a_resumed_run_ends_on_the_model_the_monitor_chose(members, kill_at, tmp_path):
    configs = runs(*members)
    whole = train_pack(configs, checkpoint_dir=tmp_path / "whole")
    assert whole[0]["stopped_reason"] != "max_steps"  # the stop is exercised
    resumed = train_killed_then_resumed(configs, kill_at, tmp_path)
    for i, (a, b) in enumerate(zip(whole, resumed, strict=True)):
        assert comparable(b) == comparable(a), i
        saved = ckpt.read_model(ckpt.member_dir(tmp_path / "run", i, len(configs)))
        expected = ckpt.read_model(ckpt.member_dir(tmp_path / "whole", i, len(configs)))
        assert saved["step"] == expected["step"] and saved["weights"] == expected["weights"]
        assert all(torch.equal(saved["model"][k], expected["model"][k]) for k in saved["model"])


def test_the_checkpoint_holds_the_monitor_state_and_best_weights(tmp_path):
    (config,) = runs(PATIENCE)
    with pytest.raises(Killed):
        train_pack([config], lambda _, m: _raise_at(m, 30), checkpoint_dir=tmp_path)
    payload = ckpt.read(tmp_path)
    (loop,) = payload["loops"]
    assert (loop["best_step"], loop["evals_without_improvement"]) == (25, 1)
    assert loop["stopped_reason"] is None and loop["best"] > 0
    assert set(loop["best_weights"]) == set(payload["model"])
    assert not all(torch.equal(loop["best_weights"][k], v) for k, v in payload["model"].items())


def _raise_at(metrics: dict, step: int) -> None:
    if metrics["step"] == step:
        raise Killed

"""The trainer: exact resume, overfitting, stopping rules, and small real learning runs on CPU."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
import torch

from arith import config as config_lib
from arith.data.dataset import build_dataset
from arith.training import checkpoint as ckpt
from arith.training.cost import describe, mean_seq_len, planned_steps, step_cost
from arith.training.reported import reported_metrics
from arith.training.trainconf import DEFAULT_MAX_STEPS
from arith.training.trainer import train

TINY = [
    "task.n_digits=2",
    "format.name=reversed",
    "model.d_model=32",
    "model.n_layer=1",
    "train.batch_size=32",
    "train.eval_every=10",
    "train.train_eval_size=32",
    "data.val_size=32",
    "data.test_size=32",
    "optim.warmup_steps=5",
]


def tiny(*overrides: str):
    return config_lib.load(None, [*TINY, *overrides])


def test_resumed_run_continues_bit_identically(tmp_path):
    config = tiny("train.max_steps=30", "model.dropout=0.1", "model.position=abacus")
    copied = tmp_path / "at_step_10"

    def keep_step_10(metrics):
        if metrics["step"] == 10:
            shutil.copytree(metrics["checkpoint"], copied)

    full = train(config, keep_step_10, checkpoint_dir=tmp_path / "full")
    resumed_reports: list[dict] = []
    resumed = train(
        config, resumed_reports.append, checkpoint_dir=tmp_path / "resumed", resume_from=copied
    )
    assert [r["step"] for r in resumed_reports] == [20, 30]
    for key in ("train/loss", "val/loss", "val/exact_match", "test/loss"):
        assert resumed[key] == full[key], key
    a = ckpt.read(tmp_path / "full")["model"]
    b = ckpt.read(tmp_path / "resumed")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_single_batch_is_overfit():
    config = tiny(
        "data.train_size=32",
        "train.max_steps=150",
        "train.eval_every=50",
        "optim.lr=1e-2",
        "optim.weight_decay=0",
        "model.d_model=64",
    )
    summary = train(config)
    assert summary["train/exact_match"] == 1.0
    assert summary["train/loss"] < 0.05


def test_reports_are_namespaced_and_the_last_one_has_the_test_set():
    reports: list[dict] = []
    summary = train(tiny("train.max_steps=20"), reports.append)
    assert [r["step"] for r in reports] == [0, 10, 20]
    assert "test/exact_match" not in reports[0] and "test/exact_match" in reports[-1]
    assert reports[-1]["done"] == 1
    plain_keys = {k for k in reports[-1] if "/" not in k}
    assert plain_keys == {"step", "epoch", "lr", "done", "final_weights_step"}
    assert {"train/loss", "val/exact_match", "perf/tokens_per_s"} <= set(reports[-1])
    assert {"val/exact_match", "test/exact_match", "edge/exact_match"} <= reported_metrics(tiny())
    assert summary["n_params"] == describe(tiny())["n_params"]
    assert summary["stopped_reason"] == "max_steps"


def test_target_accuracy_stops_early():
    summary = train(tiny("train.max_steps=100", "train.target=0.0"))
    assert summary["stopped_reason"] == "target_reached"
    assert summary["steps"] == 0


def test_patience_stops_a_run_that_does_not_improve():
    summary = train(tiny("train.max_steps=200", "train.patience=2", "optim.lr=1e-9"))
    assert summary["stopped_reason"] == "early_stopping"
    assert summary["steps"] < 200


def test_divergence_stops_the_run_and_says_so():
    summary = train(tiny("train.max_steps=50", "optim.lr=1e30", "optim.grad_clip=null"))
    assert summary["stopped_reason"] == "diverged"
    assert summary["steps"] < 50


def test_epochs_need_a_finite_training_set():
    config = tiny("task.n_digits=30", "train.epochs=1")
    with pytest.raises(config_lib.ConfigError, match=r"train\.epochs"):
        train(config)


@pytest.mark.slow
def test_two_digit_reversed_addition_is_learned():
    """A real learning run: 2-digit addition, reversed digits, to >= 99 % exact match."""
    config = config_lib.load(
        None,
        [
            "task.n_digits=2",
            "format.name=reversed",
            "model.d_model=64",
            "model.n_layer=2",
            "train.batch_size=128",
            "train.max_steps=1600",
            "train.eval_every=400",
            "data.val_size=500",
            "data.test_size=1000",
            "optim.lr=3e-3",
            "optim.weight_decay=0",
        ],
    )
    # One torch thread, as a one-CPU Tune trial trains: with two, float sums reorder and the
    # result moves. 1,200 steps sat on the bar (0.975 on test in a CI run and here, 2026-11-28;
    # seed 1: 0.999); 1,600 reach 1.0 on val and test with one thread.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        summary = train(config)
    finally:
        torch.set_num_threads(threads)
    assert summary["test/exact_match"] >= 0.99, summary["test/exact_match"]
    # the edge cases it is scored on are none of its training problems (4 of 7 are, here)
    dataset = build_dataset(config.task, config.format, config.data, config.train.seed)
    edge = dataset.eval_sets["edge"]
    assert not np.isin(edge.keys(), dataset.train_pool.keys()).any()
    assert summary["data/edge/size"] == len(edge) == 7 - summary["data/edge/dropped"]
    assert summary["data/edge/dropped"] > 0 and summary["data/edge/train_overlap"] == 0
    assert summary["edge/exact_match"] == 1.0


@pytest.mark.slow
def test_modular_addition_mod_11_is_memorised():
    """Modular addition mod 11: the training split is fit exactly (generalising is grokking)."""
    config = config_lib.load(
        None,
        [
            "task.name=modular",
            "task.modulus=11",
            "model.d_model=64",
            "train.batch_size=64",
            "train.max_steps=500",
            "train.eval_every=100",
            "optim.lr=3e-3",
            "optim.weight_decay=0.5",
            "optim.warmup_steps=50",
        ],
    )
    summary = train(config)
    assert summary["train/exact_match"] == 1.0
    assert summary["train/steps_to_100pct"] is not None


def test_progress_is_called_after_every_step_with_the_running_loss():
    calls: list[tuple[int, dict]] = []
    train(tiny("train.max_steps=12"), progress=lambda step, total, m: calls.append((step, m)))
    per_step = [(step, m["train/loss"]) for step, m in calls if "val/exact_match" not in m]
    assert [step for step, _ in per_step] == list(range(1, 13))
    assert all(math.isfinite(loss) and loss > 0 for _, loss in per_step)
    evaluations = [step for step, m in calls if "val/exact_match" in m]
    assert evaluations == [0, 10, 12]


def test_early_stopping_tests_and_saves_the_best_weights(tmp_path):
    """lr ~0: step 0 stays the monitor's best, so the final model is step 0's weights."""
    config = tiny("train.max_steps=200", "train.patience=2", "optim.lr=1e-9")
    first = tmp_path / "at_step_0"

    def keep_step_0(metrics):
        if metrics["step"] == 0:
            shutil.copytree(metrics["checkpoint"], first)

    summary = train(config, keep_step_0, checkpoint_dir=tmp_path / "run")
    assert summary["stopped_reason"] == "early_stopping"
    assert summary["final_weights"] == "best" and summary["final_weights_step"] == 0
    saved = ckpt.read_model(tmp_path / "run")
    assert saved["weights"] == "best" and saved["step"] == 0
    at_0, last = ckpt.read(first)["model"], ckpt.read(tmp_path / "run")["model"]
    assert all(torch.equal(saved["model"][k], at_0[k]) for k in at_0)
    assert not all(torch.equal(saved["model"][k], last[k]) for k in last)


def test_without_early_stopping_the_last_weights_are_final(tmp_path):
    summary = train(tiny("train.max_steps=10"), checkpoint_dir=tmp_path)
    assert summary["final_weights"] == "last" and summary["final_weights_step"] == 10
    assert ckpt.read_model(tmp_path)["weights"] == "last"


def test_budgets_derive_the_step_count_from_the_cost_of_a_step():
    cost = step_cost(tiny())
    assert cost["flops"] == cost["tokens"] * cost["flops_per_token"]
    assert cost["tokens"] == round(32 * mean_seq_len(tiny().task, tiny().format))
    assert planned_steps(tiny()) == DEFAULT_MAX_STEPS
    assert planned_steps(tiny("train.flops_budget=" + str(cost["flops"] * 7))) == 7
    assert planned_steps(tiny("train.flops_budget=" + str(cost["flops"] * 7 + 1))) == 8
    assert planned_steps(tiny(f"train.tokens_budget={cost['tokens'] * 12 - 5}")) == 12
    # A wider model costs more per step: the same budget buys it fewer steps.
    budget = f"train.flops_budget={cost['flops'] * 40}"
    wide = tiny(budget, "model.d_model=64")
    assert planned_steps(wide) < 40 == planned_steps(tiny(budget))
    sizes = describe(wide)
    assert sizes["steps"] == planned_steps(wide)
    assert sizes["flops"] == sizes["steps"] * sizes["flops_per_step"]
    assert {"tokens", "flops"} <= reported_metrics(wide)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["train.max_steps=30", "train.flops_budget=1e9"], r"^train\.flops_budget: cannot be .*"),
        (["train.flops_budget=1e9", "train.tokens_budget=1e5"], r"^train\.tokens_budget: canno"),
        (["train.epochs=2", "train.tokens_budget=1e5"], r"^train\.tokens_budget: .*epochs"),
        (["train.flops_budget=0"], r"^train\.flops_budget: must be > 0"),
    ],
)
def test_a_budget_with_another_length_is_refused(overrides, message):
    with pytest.raises(config_lib.ConfigError, match=message):
        tiny(*overrides)


def test_a_budgeted_run_trains_the_derived_steps():
    cost = step_cost(tiny())
    summary = train(tiny(f"train.flops_budget={cost['flops'] * 12.5}"))
    assert summary["steps"] == 13  # ceil(12.5)
    assert summary["tokens"] == 13 * cost["tokens"]
    assert summary["flops"] == 13 * cost["flops"]


@pytest.mark.parametrize(
    "override",
    [
        "train.eval_every=0",
        "train.patience=0",
        "train.min_steps=-1",
        "train.epochs=0",
        "train.train_eval_size=0",
        "train.length_buckets=0",
        "train.length_buckets=257",  # more micro-batches than rows (batch_size 256)
    ],
)
def test_out_of_range_train_keys_are_config_errors(override):
    key = override.split("=")[0]
    with pytest.raises(config_lib.ConfigError, match=key.replace(".", r"\.")):
        config_lib.load(None, [override])


@pytest.mark.parametrize(
    ("monitor", "suggested"),
    [
        ("val/exact_matc", "val/exact_match"),  # a typo
        ("test/exact_match", "val/exact_match"),  # measured once, at the end
        ("val/short_answers", None),  # the text's metric: the final sets only
    ],
)
def test_a_monitor_no_evaluation_reports_is_refused(monitor, suggested):
    """Early stopping, the target and the best weights follow the monitor at every evaluation:
    one never reported would leave them unused without a word."""
    with pytest.raises(config_lib.ConfigError, match=r"^train\.monitor: ") as err:
        config_lib.load(None, [f"train.monitor={monitor}", "train.target=0.9"])
    assert repr(monitor) in str(err.value)
    assert (f"did you mean {suggested}?" in str(err.value)) == (suggested is not None)


@pytest.mark.parametrize(
    "monitor", ["val/exact_match", "val/loss", "train/exact_match", "val/exact_match/carry_1"]
)
def test_a_monitor_every_evaluation_reports_is_taken(monitor):
    reported = []
    train(tiny(f"train.monitor={monitor}", "train.max_steps=10"), reported.append)
    assert monitor in reported[1]  # the first evaluation after step 0


def test_under_early_stopping_every_final_figure_comes_from_the_kept_weights(tmp_path):
    """val/ at the end is measured on the weights the run keeps (and tests), not on the last
    ones: a sweep that ranks trials on val/ ranks the models it reports. lr 3e-2 overshoots,
    so val/loss rises after its best and the monitor keeps an earlier model."""
    config = tiny(
        "train.max_steps=60",
        "train.eval_every=5",
        "train.monitor=val/loss",
        "train.patience=2",
        "optim.lr=3e-2",
    )
    reports = []
    summary = train(config, reports.append, checkpoint_dir=tmp_path)
    assert summary["final_weights"] == "best"
    at = {r["step"]: r for r in reports if "val/loss" in r}
    best_step, last_step = summary["final_weights_step"], summary["steps"]
    assert best_step < last_step
    assert summary["val/loss"] == pytest.approx(at[best_step]["val/loss"], rel=1e-5)
    assert summary["val/loss"] == summary["best/val/loss"]
    assert reports[-1]["val/loss"] == summary["val/loss"]  # what a sweep's last report carries

"""A pack's members evaluated together: one batch through the packed model gives each member
what it measures alone (issue 32: pack members decoded in one batch)."""

from __future__ import annotations

import pytest
import torch
from test_pack import MEMBERS, assert_same_curves, run_pack, tiny

from arith.evaluation import decode
from arith.evaluation.evaluate import evaluate_members, evaluate_set
from arith.training import member_run
from arith.training.trainer import build_pack, train

DEVICE = torch.device("cpu")


@pytest.mark.parametrize("task", [["format.mask_first_n=1"], ["task.name=multi_op"]])
def test_members_decoded_together_measure_what_each_measures_alone(task, monkeypatch):
    # a packed decoding batch of 3 rows per member: the members' blocks must not mix across
    # chunks; prompts of several lengths and fed answer tokens (mask_first_n) must line up
    monkeypatch.setattr(decode, "PACK_ROWS", 9)
    packed, fmt, problems = pack_and_val_set(*task)
    together = evaluate_members(packed, fmt, problems, DEVICE)
    alone = [evaluate_set(view, fmt, problems, DEVICE) for view in packed.member_views()]
    for got, expected in zip(together, alone, strict=True):
        assert list(got) == list(expected)  # the same metrics, in the same order
        for key, value in expected.items():
            assert got[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    assert len({a["loss"] for a in alone}) == 3  # three different models were measured


def pack_and_val_set(*sets: str):
    """The members of ``MEMBERS`` on one split of 40 validation problems, packed; their
    format and validation set."""
    configs = [tiny(*m, "data.seed=0", "data.val_size=40", *sets) for m in MEMBERS]
    members, packed = build_pack(configs, DEVICE)
    return packed, members[0].dataset.format, members[0].dataset.eval_sets["val"]


def test_a_model_of_one_member_is_measured_as_before():
    (config,) = [tiny()]
    members, model = build_pack([config], DEVICE)
    problems = members[0].dataset.eval_sets["val"]
    fmt = members[0].dataset.format
    assert evaluate_members(model, fmt, problems, DEVICE) == [
        evaluate_set(model, fmt, problems, DEVICE)
    ]
    with pytest.raises(ValueError, match="evaluate_members"):
        evaluate_set(build_pack([config, config], DEVICE)[1], fmt, problems, DEVICE)


def test_a_pack_of_one_dataset_is_measured_in_one_batch_and_trains_as_alone(monkeypatch):
    """Three members of one data split: members 0 and 1 (training seeds 0 and 1) share their
    validation set and training sample, decoded together; member 2 samples another number of
    training problems (its sample measured alone). Each reports what it reports alone."""
    calls = []
    measure = member_run.measure_together

    def counted(packed, members, due, device):
        measured = measure(packed, members, due, device)
        if due:
            calls.append(measured)
        return measured

    monkeypatch.setattr("arith.training.trainer.measure_together", counted)
    overrides = [["optim.lr=1e-3"], ["train.seed=1"], ["optim.lr=3e-3", "train.train_eval_size=8"]]
    configs = [tiny(*m, "data.seed=0") for m in overrides]
    _, reports = run_pack(configs)
    assert calls and all(sorted(c) == [0, 1, 2] for c in calls)
    assert all("train" in c[0] and "train" not in c[2] for c in calls)
    for config, packed in zip(configs, reports, strict=True):
        alone: list[dict] = []
        train(config, alone.append)
        assert_same_curves(packed, alone)
        for p, a in zip(packed, alone, strict=True):
            assert p["train/exact_match"] == a["train/exact_match"]
            assert p["val/exact_match"] == a["val/exact_match"]


def test_a_bf16_run_is_evaluated_in_fp32():
    """A run that trains in bf16 is measured in fp32 (bf16 decoding lowered the main job's test
    exact match, 0.992 -> 0.989 for its chosen model): its first evaluation, on its initial
    weights, is the fp32 measurement of those weights, not the bf16 one."""
    config = tiny("train.precision=bf16", "data.seed=0")
    reports: list[dict] = []
    summary = train(config, reports.append)
    assert summary["hardware.precision"] == "bf16" and reports[0]["step"] == 0
    members, model = build_pack([config], DEVICE)  # the same seed: the same initial weights
    problems, fmt = members[0].dataset.eval_sets["val"], members[0].dataset.format
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bf16 = evaluate_set(model, fmt, problems, DEVICE)
    fp32 = evaluate_set(model, fmt, problems, DEVICE)
    assert reports[0]["val/loss"] == pytest.approx(fp32["loss"], rel=1e-6)
    assert reports[0]["val/loss"] != pytest.approx(bf16["loss"], rel=1e-6)


def test_a_pack_of_one_dataset_measures_its_final_sets_in_one_batch_on_the_chosen_weights(
    monkeypatch,
):
    """Members of one data split that end at one evaluation have their test sets decoded in one
    batch, each on the weights it keeps: member 1 stops on patience with its best weights
    earlier than its last, which must be in the pack when the batch runs. Each reports the test
    metrics it reports alone, and keeps the model it keeps alone."""
    calls = []
    together = member_run.final_sets_together

    def counted(packed, members, ending, device):
        measured = together(packed, members, ending, device)
        calls.append(sorted(measured))
        return measured

    monkeypatch.setattr(member_run, "final_sets_together", counted)
    overrides = [MEMBERS[0], [*MEMBERS[1], "train.patience=5", "optim.lr=0.3"], MEMBERS[2]]
    configs = [tiny(*m, "data.seed=0", "train.max_steps=12") for m in overrides]
    summaries, _ = run_pack(configs)
    assert calls == [[0, 1, 2]]
    assert [s["final_weights_step"] for s in summaries] != [12, 12, 12]  # a best before the end
    for config, summary in zip(configs, summaries, strict=True):
        alone = train(config)
        assert summary["final_weights_step"] == alone["final_weights_step"]
        tested = [k for k in alone if k.startswith("test/")]
        assert "test/exact_match" in tested and "test/loss" in tested
        for key in tested:
            assert summary[key] == pytest.approx(alone[key], rel=1e-5, abs=1e-6), key

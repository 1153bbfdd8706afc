"""Numbers that mean what they say (issue 33, item 4): each reported number counts what its
name says, under every setting that could bend it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from arith import config as config_lib
from arith.evaluation.evaluate import digit_accuracy, evaluate_set
from arith.model import gpt, positions
from arith.model.gpt import CausalSelfAttention, ModelConfig
from arith.model.kv_cache import KVCache
from arith.model.positions import abacus_index
from arith.problems import tasks
from arith.problems.tasks import TaskConfig, from_ints
from arith.text.formats import FormatConfig, build_format
from arith.training.cost import planned_steps, step_cost
from arith.training.stopping import LoopState
from arith.training.trainconf import TrainConfig
from arith.training.trainer import train


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


class Learned(torch.nn.Module):
    """A stand-in for a model that learned what its loss trained and nothing else: after a
    true prefix it predicts the true next token where the loss mask counts that target, and
    PAD everywhere else (the untrained first answer tokens among them)."""

    def __init__(self, encoded, loss_mask: np.ndarray, pad_id: int, vocab_size: int) -> None:
        super().__init__()
        self.pad_id, self.vocab_size = pad_id, vocab_size
        self.next = {}
        for row, mask in zip(encoded.tokens.tolist(), loss_mask, strict=True):
            for t in np.flatnonzero(mask):  # target t + 1, read after tokens[: t + 1]
                self.next[tuple(row[: t + 1])] = row[t + 1]

    def forward(self, idx: torch.Tensor, cache=None, reserve: int = 0):
        seen = idx if cache is None else torch.cat([cache, idx], dim=1)
        new = idx.shape[1]
        logits = torch.zeros(idx.shape[0], new, self.vocab_size)
        for b, row in enumerate(seen.tolist()):
            for i in range(new):
                prefix = tuple(row[: len(row) - new + i + 1])
                logits[b, i, self.next.get(prefix, self.pad_id)] = 1.0
        return logits, seen


def test_exact_match_scores_only_the_answer_tokens_the_loss_trains():
    task = TaskConfig(name="addition", n_digits=3, operand_lengths="fixed")
    fmt = build_format(FormatConfig(name="plain", mask_first_n=1), task)
    problems = from_ints(task, [[123, 456], [999, 999], [500, 700]])  # "579", "1998", "1200"
    encoded = fmt.encode(problems)
    model = Learned(encoded, encoded.loss_mask(1), fmt.pad_id, len(fmt.vocab))
    scores = evaluate_set(model, fmt, problems, torch.device("cpu"))
    assert scores["token_accuracy"] == 1.0  # teacher forced: every trained token right
    assert scores["exact_match"] == 1.0  # generated: the untrained first token is fed in


def test_a_model_wrong_on_trained_tokens_still_fails_exact_match_with_a_mask():
    task = TaskConfig(name="addition", n_digits=3, operand_lengths="fixed")
    fmt = build_format(FormatConfig(name="plain", mask_first_n=1), task)
    problems = from_ints(task, [[123, 456]])
    encoded = fmt.encode(problems)
    mask = encoded.loss_mask(1)
    mask[0, np.flatnonzero(mask[0])[-1]] = False  # it never learned to end (EOS)
    model = Learned(encoded, mask, fmt.pad_id, len(fmt.vocab))
    assert evaluate_set(model, fmt, problems, torch.device("cpu"))["exact_match"] == 0.0


def test_digit_accuracy_leaves_out_the_digits_fed_in_under_a_mask():
    """With mask_first_n the first answer characters are fed in, right by construction: they
    are not scored, and a position only fed digits is left out (1.0 for free before)."""
    task = TaskConfig(name="addition", n_digits=3, operand_lengths="fixed")
    fmt = build_format(FormatConfig(name="plain", mask_first_n=1), task)
    problems = from_ints(task, [[123, 456], [999, 999], [500, 700]])  # "579", "1998", "1200"
    got = ["579", "1098", "1200"]  # the second row's hundreds digit wrong
    scores = digit_accuracy(got, problems, fmt, fed=np.array([1, 1, 1]))
    assert scores == {
        "digit_accuracy/0": 1.0,
        "digit_accuracy/1": 1.0,
        "digit_accuracy/2": 0.5,  # 579's 5 was fed: 1998 wrong, 1200 right
    }  # digit 3: the 1s of 1998 and 1200 were fed, no row wrote one
    assert digit_accuracy(got, problems, fmt)["digit_accuracy/3"] == 1.0  # what fed counts


def test_evaluate_set_scores_digits_without_the_fed_ones():
    task = TaskConfig(name="addition", n_digits=3, operand_lengths="fixed")
    fmt = build_format(FormatConfig(name="plain", mask_first_n=1), task)
    problems = from_ints(task, [[999, 999], [500, 700]])  # "1998", "1200": 1 is fed in both
    encoded = fmt.encode(problems)
    model = Learned(encoded, encoded.loss_mask(1), fmt.pad_id, len(fmt.vocab))
    scores = evaluate_set(model, fmt, problems, torch.device("cpu"))
    assert "digit_accuracy/3" not in scores and scores["digit_accuracy/2"] == 1.0


def test_enumerated_multi_op_sets_follow_the_operation_weights_as_sampled_ones_do():
    from arith.data.dataset import DataConfig, build_dataset

    weights = (0.05, 0.10, 0.20, 0.30, 0.35)
    task = TaskConfig(name="multi_op", n_digits=2, op_weights=weights)
    assert tasks.space_size(task) is not None  # enumerated
    data = DataConfig(val_size=1000, test_size=2000)
    dataset = build_dataset(task, FormatConfig(name="carry_trace"), data, seed=0)
    for name, size in (("val", 1000), ("test", 2000)):
        counts = np.bincount(dataset.eval_sets[name].op, minlength=len(weights))
        assert counts.tolist() == [round(w * size) for w in weights]


def test_an_operation_short_of_its_share_shrinks_the_whole_set():
    from arith.data.dataset import DataConfig, build_dataset

    task = TaskConfig(name="multi_op", n_digits=1, ops=("+", "-"), op_weights=(0.9, 0.1))
    data = DataConfig(
        val_fraction=0.2, test_fraction=0.2, val_size=1000, test_size=1000, edge_cases=False
    )
    dataset = build_dataset(task, FormatConfig(name="carry_trace"), data, seed=0)
    val = dataset.eval_sets["val"]
    counts = np.bincount(val.op, minlength=2)
    assert len(val) < 1000  # the split holds about 20 + problems: 0.9 of the set at most
    assert counts.tolist() == [round(0.9 * len(val)), round(0.1 * len(val))]


SEED_004 = Path(__file__).resolve().parents[1] / "arith" / "configs" / "seed004_multi_op.yaml"


def test_a_step_counts_the_real_tokens_of_its_rows_not_the_longest_sequence():
    config = config_lib.load(SEED_004, ["format.division_trace=true", "task.op_weights=null"])
    fmt = build_format(config.format, config.task)
    sample = tasks.sample(config.task, 20_000, np.random.default_rng(123))
    encoded = fmt.encode(sample)
    real = config.train.batch_size * float((encoded.prompt_len + encoded.answer_len).mean())
    cost = step_cost(config)
    assert cost["tokens"] == pytest.approx(real, rel=0.02)
    assert 5 * cost["tokens"] < config.train.batch_size * fmt.max_seq_len()  # ~7x before
    assert cost["flops"] == cost["tokens"] * cost["flops_per_token"]
    budgeted = config_lib.load(
        SEED_004,
        [
            "format.division_trace=true",
            "task.op_weights=null",
            "train.max_steps=null",
            f"train.tokens_budget={cost['tokens'] * 10}",
        ],
    )
    assert planned_steps(budgeted) == 10


@pytest.mark.parametrize(("max_k", "longest_run"), [(7, 6), (20, 5), (6, 6)])
def test_training_offsets_reach_every_abacus_entry_and_no_further(max_k, longest_run):
    offsets = positions.training_offsets(4096, max_k, longest_run, torch.Generator().manual_seed(0))
    assert int(offsets.min()) == 0
    assert int(offsets.max()) + longest_run == max_k  # the last entry trains, none past it
    reached = {int(o) + r for o in offsets.unique() for r in range(1, longest_run + 1)}
    assert reached == set(range(1, max_k + 1))


def test_training_reaches_the_abacus_table_s_last_entry(monkeypatch):
    # reversed 3-digit multiplication writes 6-digit runs; the table's last entry is 7, which
    # a 7-digit operand of a longer set reads
    trained: list[int] = []

    def recording(run, offset):
        index = abacus_index(run, offset)
        if offset is not None:
            trained.append(int(index.max()))
        return index

    monkeypatch.setattr(positions, "abacus_index", recording)
    overrides = [
        "task.name=multiplication",
        "format.name=reversed",
        "model.position=abacus",
        "model.abacus_max_k=7",
        "model.d_model=16",
        "model.n_layer=1",
        "train.batch_size=64",
        "train.max_steps=6",
        "train.eval_every=6",
        "train.train_eval_size=8",
        "data.val_size=8",
        "data.test_size=8",
    ]
    train(config_lib.load(None, overrides))
    assert max(trained) == 7


def test_the_kept_weights_are_those_of_the_best_value_with_min_delta():
    """min_delta=10 on val/loss: no later evaluation counts for patience, but the loss still
    falls; the run keeps (and reports on) the weights of its lowest loss, not step 0's."""
    overrides = [
        "task.n_digits=2",
        "format.name=reversed",
        "model.d_model=32",
        "model.n_layer=1",
        "train.batch_size=32",
        "train.eval_every=10",
        "train.train_eval_size=32",
        "data.val_size=32",
        "data.test_size=32",
        "train.max_steps=40",
        "train.monitor=val/loss",
        "train.min_delta=10",
        "train.patience=3",
    ]
    summary = train(config_lib.load(None, overrides))
    assert summary["stopped_reason"] == "early_stopping"
    assert summary["final_weights_step"] > 0
    assert summary["val/loss"] == summary["best/val/loss"]

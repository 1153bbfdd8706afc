"""Evaluation costs little anywhere: greedy decoding reads back from the device only every few
tokens, each evaluation set is encoded once per format, and the training sample measures only
the numbers it reports. None of it changes a result."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_host_reads import HostReads

from arith import config as config_lib
from arith.data.dataset import build_dataset
from arith.evaluation import decode
from arith.evaluation.decode import greedy_decode
from arith.evaluation.evaluate import evaluate_set
from arith.text.formats import Format
from arith.training.trainer import build_model

CPU = torch.device("cpu")


class EndsSometimes(torch.nn.Module):
    """A random GPT that writes EOS where its own choice is a token id divisible by ``period``
    (never for 0): rows then end at varied steps, and some never do."""

    def __init__(self, model: torch.nn.Module, eos_id: int, period: int) -> None:
        super().__init__()
        self.model, self.eos_id, self.period = model, eos_id, period

    def forward(self, idx, cache=None, reserve: int = 0):
        logits, cache = self.model(idx, cache, reserve=reserve)
        if self.period:
            top = logits.max(-1)
            ends = top.indices % self.period == 0
            logits = logits.clone()
            logits[..., self.eos_id] = torch.where(ends, top.values + 1, logits[..., self.eos_id])
        return logits, cache


def _setup(overrides: list[str], size: int = 96):
    config = config_lib.load(
        None, ["model.n_layer=1", "model.d_model=32", f"data.val_size={size}", *overrides]
    )
    torch.manual_seed(0)
    dataset = build_dataset(config.task, config.format, config.data, 0)
    model = build_model(config, dataset).eval()
    with torch.no_grad():  # larger weights: a random model then writes varied tokens
        for weight in model.parameters():
            if weight.dim() > 1:
                weight.mul_(4)
    return dataset, model


DECODE = ["task.n_digits=3", "format.name=reversed", "model.position=rope"]  # any length decodes


@torch.no_grad()
def _reference_decode(model, prompts: torch.Tensor, n: int, eos_id: int) -> torch.Tensor:
    """The plain loop: every token, look whether every row ended; EOS fills what is left."""
    logits, cache = model(prompts, reserve=n)
    out = torch.full((prompts.shape[0], n), eos_id, dtype=prompts.dtype)
    finished = torch.zeros(prompts.shape[0], dtype=torch.bool)
    for i in range(n):
        token = logits[:, -1].argmax(-1)
        token = torch.where(finished, torch.full_like(token, eos_id), token)
        out[:, i] = token
        finished |= token == eos_id
        if bool(finished.all()):
            break
        logits, cache = model(token[:, None], cache)
    return out


@pytest.mark.parametrize("period", [0, 2, 3, 5, 7])
@pytest.mark.parametrize("n_tokens", [1, 5, 8, 13, 30])
def test_greedy_decode_matches_the_every_token_loop(period, n_tokens):
    dataset, gpt = _setup(DECODE)
    fmt = dataset.format
    model = EndsSometimes(gpt, fmt.eos_id, period)
    encoded = fmt.encode(dataset.eval_sets["val"])
    length = int(np.bincount(encoded.prompt_len).argmax())
    prompts = torch.from_numpy(encoded.tokens[encoded.prompt_len == length, :length])
    got = greedy_decode(model, prompts, n_tokens, fmt.eos_id)
    assert torch.equal(got, _reference_decode(model, prompts, n_tokens, fmt.eos_id))


@pytest.mark.parametrize("n_tokens", [7, 8, 20, 64])
def test_greedy_decode_reads_from_the_device_every_few_tokens(n_tokens):
    dataset, gpt = _setup(DECODE)
    fmt = dataset.format
    encoded = fmt.encode(dataset.eval_sets["val"])
    length = int(encoded.prompt_len.min())
    prompts = torch.from_numpy(encoded.tokens[encoded.prompt_len == length, :length])
    mode = HostReads()
    with mode:
        mode.armed = True
        greedy_decode(EndsSometimes(gpt, fmt.eos_id, 0), prompts, n_tokens, fmt.eos_id)
    assert sum(mode.reads.values()) <= math.ceil(n_tokens / decode.CHECK_EVERY) + 1


CASES = {
    "plain": (["task.n_digits=3"], None),
    "reversed-mask": (["task.n_digits=3", "format.name=reversed", "format.mask_first_n=1"], None),
    "carry_trace-division": (
        [
            "task.name=multi_op",
            "task.n_digits=2",
            "format.name=carry_trace",
            "format.division_trace=true",
        ],
        None,
    ),
    "spaced-reference-plain": (["task.n_digits=3", "format.name=spaced"], "plain"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_evaluate_set_encodes_each_format_once_and_breakdowns_false_keeps_its_numbers(
    case, monkeypatch
):
    overrides, reference_name = CASES[case]
    dataset, gpt = _setup(overrides)
    fmt = dataset.format
    reference = None
    if reference_name is not None:
        reference = _setup([*overrides[:-1], f"format.name={reference_name}"])[0].format
    model = EndsSometimes(gpt, fmt.eos_id, 3)
    problems = dataset.eval_sets["val"]
    calls: list[str] = []
    encode = Format.encode

    def counting(self, problems):
        calls.append(self.config.name)
        return encode(self, problems)

    monkeypatch.setattr(Format, "encode", counting)
    full = evaluate_set(model, fmt, problems, CPU, reference)
    assert sorted(calls) == sorted({fmt.config.name, (reference or fmt).config.name})
    calls.clear()
    brief = evaluate_set(model, fmt, problems, CPU, reference, breakdowns=False)
    assert len(calls) == len({id(fmt), id(reference or fmt)})
    assert brief == {key: full[key] for key in brief}
    assert set(brief) <= {"exact_match", "loss", "token_accuracy"}
    assert "exact_match" in brief and ("token_accuracy" in brief) == (reference is None)


def test_decoding_in_chunks_of_alike_answers_reads_each_row_as_if_decoded_alone(monkeypatch):
    """A set of mixed answer lengths (multi_op's traces) decodes in chunks of alike expected
    answers, each only to its own longest answer plus one, where every chunk ran to the set's
    longest; what a row reads is what it reads decoded alone, cut after its answer plus one."""
    dataset, gpt = _setup(CASES["carry_trace-division"][0])
    fmt = dataset.format
    model = EndsSometimes(gpt, fmt.eos_id, 3)  # rows end at varied steps, some never
    problems = dataset.eval_sets["val"]
    lengths = fmt.encode(problems).answer_len
    assert len(np.unique(lengths)) >= 4, "a set of mixed answer lengths"
    budgets: list[int] = []
    real = decode.greedy_decode

    def counting(model, prompts, n_tokens, eos_id):
        budgets.append(n_tokens)
        return real(model, prompts, n_tokens, eos_id)

    monkeypatch.setattr(decode, "greedy_decode", counting)
    together = decode.generate_ids(model, fmt, problems, CPU, batch_size=16)
    assert together.shape == (len(problems), lengths.max() + 1)
    assert sum(budgets) < len(budgets) * (lengths.max() + 1), budgets
    for row in range(0, len(problems), 5):
        alone = decode.generate_ids(model, fmt, problems.take([row]), CPU, batch_size=1)[0]
        assert np.array_equal(together[row, : len(alone)], alone), row
        assert (together[row, len(alone) :] == fmt.eos_id).all(), row
        assert len(alone) == lengths[row] + 1

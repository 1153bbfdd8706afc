"""Exact and normalised match score token ids up to EOS, digit accuracy scores each answer digit
from the ones up, and the teacher-forced loss counts the tokens the training loss counts."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from arith import config as config_lib
from arith.data.batches import to_tensors
from arith.data.dataset import build_dataset
from arith.evaluation.evaluate import digit_accuracy, evaluate_set, teacher_forced
from arith.problems.tasks import TaskConfig, from_ints
from arith.text.formats import FormatConfig, build_format
from arith.training.trainer import build_model

TASK = TaskConfig(name="addition", n_digits=4, operand_lengths="fixed")
PLAIN = build_format(FormatConfig(name="plain"), TASK)
SPACED = build_format(FormatConfig(name="spaced"), TASK)
PROBLEMS = from_ints(TASK, [[1234, 5678]], ["+"])  # plain "1234 + 5678 =" -> "6912"


class Scripted(torch.nn.Module):
    """A stand-in model that emits a fixed token script, one token per decoding step."""

    def __init__(self, script: list[int], vocab_size: int) -> None:
        super().__init__()
        self.script, self.vocab_size = script, vocab_size

    def forward(self, idx: torch.Tensor, cache=None, reserve: int = 0):
        position = 0 if cache is None else cache + 1
        token = self.script[min(position, len(self.script) - 1)]
        logits = torch.zeros(idx.shape[0], idx.shape[1], self.vocab_size)
        logits[:, -1, token] = 1.0
        return logits, position


def ids(fmt, text: str) -> list[int]:
    """Token ids of ``text``, one character a token; ``|`` is PAD and ``$`` is EOS."""
    special = {"|": fmt.pad_id, "$": fmt.eos_id}
    return [special.get(c, fmt.vocab.index(c) if c in fmt.vocab else -1) for c in text]


def scores(fmt, reference, script: str) -> dict[str, float]:
    model = Scripted(ids(fmt, script), len(fmt.vocab))
    return evaluate_set(model, fmt, PROBLEMS, torch.device("cpu"), reference)


@pytest.mark.parametrize(
    ("script", "exact"),
    [
        ("6912$", 1.0),
        ("6|9|12$", 0.0),  # PAD inside the answer: decode drops it, exact match must not
        ("69122", 0.0),  # never ends: the answer's digits then no EOS within the budget
        ("6912" + "|" * 4, 0.0),  # no EOS, PAD to the end of the budget
        ("691$", 0.0),
    ],
)
def test_exact_match_compares_ids_up_to_eos(script, exact):
    assert PLAIN.decode(ids(PLAIN, script)).startswith("691")
    metrics = scores(PLAIN, None, script)
    assert metrics["exact_match"] == exact
    carry = [v for k, v in metrics.items() if k.startswith("exact_match/carry_")]
    assert carry == [exact]  # the breakdowns score the same rows


@pytest.mark.parametrize(
    ("script", "normalised"),
    [
        ("6 912$", 1.0),
        ("6912$", 1.0),
        ("6|912$", 0.0),
        ("6 9 1 2 ", 0.0),  # spaced digits with no EOS
    ],
)
def test_normalised_match_needs_eos_and_no_pad(script, normalised):
    """Spaced prompts answered against plain answers (the OOD set): spacing aside."""
    metrics = scores(SPACED, PLAIN, script)
    assert metrics["normalised_match"] == normalised
    assert metrics["exact_match"] == float(script == "6912$")


SUMS = from_ints(TASK, [[1166, 9834], [1234, 1111]], ["+", "+"])  # 11000 and 2345


def test_a_wrong_tens_digit_shows_in_digit_accuracy_1_only():
    metrics = scores(PLAIN, None, "6902$")  # 6912 with the tens wrong, from the decoding pass
    assert metrics["exact_match"] == 0.0
    digits = {k: v for k, v in metrics.items() if k.startswith("digit_accuracy/")}
    assert digits == {"digit_accuracy/0": 1.0, "digit_accuracy/1": 0.0} | {
        f"digit_accuracy/{i}": 1.0 for i in (2, 3)
    }


@pytest.mark.parametrize(
    ("name", "got"),
    [
        ("plain", ["10000", "2355"]),  # 11000 missing the cascade's carry; 2345 with a wrong tens
        ("spaced", ["10 000", "2 355"]),
        ("reversed", ["00001", "5532"]),
    ],
)
def test_digit_accuracy_counts_positions_from_the_ones_digit(name, got):
    fmt = build_format(FormatConfig(name=name), TASK)
    assert digit_accuracy(got, SUMS, fmt) == {
        "digit_accuracy/0": 1.0,
        "digit_accuracy/1": 0.5,
        "digit_accuracy/2": 1.0,
        "digit_accuracy/3": 0.5,
        "digit_accuracy/4": 1.0,  # only 11000 has a fifth digit
    }


def test_a_missing_digit_is_wrong_where_it_should_be():
    got = ["1000", "234a"]  # 11000 one digit short; a letter for 2345's ones digit
    acc = digit_accuracy(got, SUMS, PLAIN)
    assert (acc["digit_accuracy/3"], acc["digit_accuracy/4"]) == (1.0, 0.0)
    assert (acc["digit_accuracy/0"], acc["digit_accuracy/1"]) == (0.5, 1.0)


TRACES = {"division_trace": True, "sign_trace": True, "mul_trace": True}


@pytest.mark.parametrize(
    ("name", "traces"),
    [(n, {}) for n in ["plain", "spaced", "reversed", "carry_trace", "base100"]]
    + [("carry_trace", TRACES)],  # the answer's digits after the traces written before it
)
def test_right_answers_score_every_digit_in_every_format(name, traces):
    task = TaskConfig(name="multi_op", n_digits=3)
    problems = from_ints(task, [[0, 999], [12, 34], [999, 999], [7, 3]], ["-", "+", "*", "//"])
    fmt = build_format(FormatConfig(name=name, **traces), task)
    right = digit_accuracy(fmt.answer_text(problems), problems, fmt)
    assert right == {f"digit_accuracy/{i}": 1.0 for i in range(6)}  # 998001 has 6 digits
    wrong = digit_accuracy(fmt.answer_text(problems.take(np.array([1, 1]))), problems, fmt)
    assert wrong["digit_accuracy/0"] == 0.25  # 46 in every row: only 12 + 34 is right


def test_exact_match_scores_a_traced_answer_whole_and_digit_accuracy_its_answer_only():
    """As for division_trace rows, exact match compares every answer token (the mul_trace lines
    too), and digit accuracy reads the answer after the trace's last comma."""
    task = TaskConfig(name="multi_op", n_digits=3)
    fmt = build_format(FormatConfig(name="carry_trace", mul_trace=True), task)
    problems = from_ints(task, [[123, 45]], ["*"])
    (right,) = fmt.answer_text(problems)  # "5511160,4219040,...,+500300500500000000"
    wrong_trace = "6" + right[1:]  # b's ones digit miscopied, the answer right
    wrong_ones = right[:-18] + "6" + right[-17:]  # 5536
    runs = {
        script: evaluate_set(
            Scripted(ids(fmt, script + "$"), len(fmt.vocab)), fmt, problems, torch.device("cpu")
        )
        for script in (right, wrong_trace, wrong_ones)
    }
    digits = [f"digit_accuracy/{i}" for i in range(4)]  # 5535
    assert [runs[right][k] for k in ["exact_match", *digits]] == [1.0] * 5
    assert [runs[wrong_trace][k] for k in ["exact_match", *digits]] == [0.0, 1.0, 1.0, 1.0, 1.0]
    assert [runs[wrong_ones][k] for k in ["exact_match", *digits]] == [0.0, 0.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize("mask_first_n", [0, 2])
def test_teacher_forced_loss_counts_the_tokens_training_counts(mask_first_n):
    config = config_lib.load(
        None,
        [
            "task.n_digits=3",
            f"format.mask_first_n={mask_first_n}",
            "model.n_layer=1",
            "model.d_model=32",
            "data.val_size=64",
        ],
    )
    torch.manual_seed(0)
    dataset = build_dataset(config.task, config.format, config.data, 0)
    model = build_model(config, dataset).eval()
    problems = dataset.eval_sets["val"]
    fmt = dataset.format
    inputs, targets, mask = to_tensors(fmt.encode(problems), mask_first_n, torch.device("cpu"))
    with torch.no_grad():
        logits, _ = model(inputs)
    losses = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
    expected = float(losses[mask.flatten()].mean())
    measured = teacher_forced(model, fmt, problems, torch.device("cpu"))["loss"]
    assert measured == pytest.approx(expected, rel=1e-5)
    assert not np.isclose(measured, float(losses[mask.flatten() == 0].mean()))


def test_several_operations_report_their_worst_one():
    """multi_op's bar is every operation at 99 %: ``exact_match/worst_op`` is the lowest of the
    per-operation exact matches, and a single operation has none."""
    from arith.evaluation.breakdowns import WORST_OP_KEY, exact_match_breakdowns, set_metric_names

    dataset = _dataset("task.name=multi_op", "task.n_digits=2", "data.val_size=200")
    problems = dataset.eval_sets["val"]
    exact = problems.op != 2  # every * wrong, every other operation right
    out = exact_match_breakdowns(problems, exact, dataset.format)
    assert out["exact_match/mul"] == 0.0 and out["exact_match/add"] == 1.0
    assert out[WORST_OP_KEY] == 0.0
    exact[problems.op == 3] &= np.arange((problems.op == 3).sum()) % 4 > 0  # // 75 %
    out = exact_match_breakdowns(problems, exact, dataset.format)
    assert out[WORST_OP_KEY] == 0.0
    exact[problems.op == 2] = True  # * right now: // is the worst
    out = exact_match_breakdowns(problems, exact, dataset.format)
    assert out[WORST_OP_KEY] == out["exact_match/floordiv"] < 1.0
    assert WORST_OP_KEY in set_metric_names(
        dataset.task, "plain", reference_differs=False, lengths=[2], max_chain=2
    )
    single = _dataset("task.name=addition", "task.n_digits=2")
    right = np.ones(len(single.eval_sets["val"].op), dtype=bool)
    assert WORST_OP_KEY not in exact_match_breakdowns(single.eval_sets["val"], right, single.format)


def _dataset(*sets: str):
    config = config_lib.load(None, list(sets))
    return build_dataset(config.task, config.format, config.data, config.train.seed)

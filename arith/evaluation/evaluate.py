"""The metrics of an evaluation set: exact match, normalised match, per op, per length, per
carry chain and cascade, and per answer digit position, from batched greedy decoding (decode).

Each set is encoded once per format and the encoding handed to every metric that reads it.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from arith.evaluation.breakdowns import (  # noqa: F401 -- callers' old address
    OP_NAMES,
    _carry_breakdown,
    by_digit,
    digit_accuracy,
    exact_match_breakdowns,
    fed_chars,
    reports_normalised,
    set_metric_names,
)
from arith.evaluation.decode import (
    generate_ids,
    generate_member_ids,
    members_of,
    rows_per_member,
)
from arith.evaluation.decode import greedy_decode as greedy_decode  # callers' old address
from arith.evaluation.decode import predict_answers as predict_answers
from arith.model.gpt import GPT
from arith.problems.tasks import Problems
from arith.text.formats import Encoded, Format


def answer_ids(fmt: Format, problems: Problems, encoded: Encoded | None = None) -> list[np.ndarray]:
    """Each problem's expected answer token ids, EOS excluded (``encoded``: already encoded)."""
    encoded = encoded if encoded is not None else fmt.encode(problems)
    ends = encoded.prompt_len + encoded.answer_len - 1
    return [
        row[start:end]
        for row, start, end in zip(encoded.tokens, encoded.prompt_len, ends, strict=True)
    ]


def well_formed(generated: np.ndarray, fmt: Format) -> np.ndarray:
    """Rows that end with EOS within their budget and hold no PAD before it.

    ``Format.decode`` drops PAD and stops at the end of the row, so text alone would pass
    ``6 <pad> 9 <pad> 1 2 <eos>`` as ``"6912"`` and an answer that never ends.
    """
    is_eos = generated == fmt.eos_id
    has_eos = is_eos.any(axis=1)
    before_eos = np.cumsum(is_eos, axis=1) == 0
    pad_before_eos = ((generated == fmt.pad_id) & before_eos).any(axis=1)
    return has_eos & ~pad_before_eos


def exact_matches(generated: np.ndarray, expected: list[np.ndarray], fmt: Format) -> np.ndarray:
    """Rows whose generated ids up to the first EOS are the expected ids, and EOS follows."""
    width = generated.shape[1]
    hits = np.zeros(len(expected), dtype=bool)
    for row, (ids, target) in enumerate(zip(generated, expected, strict=True)):
        n = len(target)
        hits[row] = n < width and ids[n] == fmt.eos_id and np.array_equal(ids[:n], target)
    return hits


@torch.no_grad()
def exact_rows(
    model: GPT,
    fmt: Format,
    problems: Problems,
    device: torch.device,
    batch_size: int = 256,
    encoded: Encoded | None = None,
) -> np.ndarray:
    """Which problems greedy decoding answers exactly (the length grid's and the length
    probe's one number per problem; ``evaluate_set`` measures a set's every metric).
    ``encoded``: ``problems`` already encoded with ``fmt``."""
    was_training = model.training
    model.eval()
    encoded = encoded if encoded is not None else fmt.encode(problems)
    generated = generate_ids(model, fmt, problems, device, batch_size, encoded=encoded)
    model.train(was_training)
    return exact_matches(generated, answer_ids(fmt, problems, encoded), fmt)


@torch.no_grad()
def teacher_forced(
    model: GPT,
    fmt: Format,
    problems: Problems,
    device: torch.device,
    batch_size: int = 256,
    encoded: Encoded | None = None,
) -> dict[str, float]:
    """Answer-token loss and accuracy with the true answer fed in (no decoding), over the tokens
    the training loss counts (``format.mask_first_n`` skips the same first answer tokens)."""
    return forced_members(model, fmt, problems, device, batch_size, encoded)[0][0]


@torch.no_grad()
def forced_members(
    model: GPT,
    fmt: Format,
    problems: Problems,
    device: torch.device,
    batch_size: int = 256,
    encoded: Encoded | None = None,
) -> tuple[list[dict[str, float]], np.ndarray]:
    """``teacher_forced`` of each member of a packed model, measured in one batch of M blocks
    of rows (the same problems in each) and read from the device once, at the end; and, per
    member, which rows it gets entirely right: (M, N) bool, every scored answer token and EOS
    the argmax given the true prefix.

    That is greedy decoding's exact match, without decoding: a greedy decoder that has
    written the answer's first i tokens right sees the prefix teacher forcing feeds, so it
    writes the whole answer and EOS exactly where every argmax here is right, and goes astray
    at the first one that is not (the tokens ``format.mask_first_n`` skips are fed in both).
    Rows are taken in order of length and each chunk cut to its longest row, so a set of long
    and short answers is not padded to its longest throughout."""
    encoded = encoded if encoded is not None else fmt.encode(problems)
    loss_mask = encoded.loss_mask(fmt.config.mask_first_n)
    members = members_of(model)
    chunk_rows = rows_per_member(batch_size, members)
    total_loss = torch.zeros(members, device=device, dtype=loss_sum_dtype(device))
    correct = torch.zeros(members, device=device, dtype=torch.long)
    count = int(loss_mask.sum())  # the same tokens for every member
    lengths = encoded.prompt_len + encoded.answer_len
    order = np.argsort(lengths, kind="stable")
    exact_parts = []
    for start in range(0, len(problems), chunk_rows):
        picked = order[start : start + chunk_rows]
        width = int(lengths[picked].max())
        rows = encoded.tokens[picked, :width]
        tokens = torch.from_numpy(np.tile(rows, (members, 1))).to(device)
        mask = torch.from_numpy(np.tile(loss_mask[picked, : width - 1], (members, 1)))
        mask = mask.to(device)
        logits, _ = model(tokens[:, :-1])
        targets = tokens[:, 1:]
        losses = F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")
        total_loss += (losses.to(total_loss.dtype) * mask).view(members, -1).sum(1)
        right = logits.argmax(-1) == targets
        correct += (right & mask).view(members, -1).sum(1)
        exact_parts.append((right | ~mask).all(1).view(members, -1))
    exact = np.zeros((members, len(problems)), dtype=bool)
    if exact_parts:
        exact[:, order] = torch.cat(exact_parts, 1).cpu().numpy()
    metrics = [
        {"loss": loss / max(count, 1), "token_accuracy": hits / max(count, 1)}
        for loss, hits in zip(total_loss.tolist(), correct.tolist(), strict=True)
    ]
    return metrics, exact


def loss_sum_dtype(device: torch.device) -> torch.dtype:
    """What a set's losses are summed in: float64, but on Apple's MPS, which has none."""
    return torch.float32 if device.type == "mps" else torch.float64


def evaluate_set(
    model: GPT,
    fmt: Format,
    problems: Problems,
    device: torch.device,
    reference: Format | None = None,
    batch_size: int = 256,
    *,
    breakdowns: bool = True,
    decode: bool = True,
) -> dict[str, float]:
    """Metrics of one evaluation set, keys without the set's prefix.

    ``fmt`` encodes the prompts; ``reference`` (default ``fmt``) gives the expected answer text:
    a model trained on plain and shown spaced prompts (seed 000's OOD set) must still answer in
    plain for ``exact_match``, while ``normalised_match`` accepts any spacing. Both need an
    answer that ends with EOS and holds no PAD (``well_formed``); exact match compares token ids.
    With ``format.mask_first_n``, the answer tokens the loss skips are fed in, not generated
    (``generate_ids``), as ``teacher_forced`` skips them: both score what training trained.

    ``breakdowns=False`` measures ``exact_match`` and, where ``reference`` is ``fmt``, ``loss``
    and ``token_accuracy`` only: the training sample reports no more (``member_run``).
    ``decode=False`` (``reference`` must be ``fmt``) reads exact match from the teacher-forced
    pass (``forced_members``: the same rows right as greedy decoding, without its sequential
    steps) and leaves out what only decoded text gives (short answers, normalised match, digit
    accuracy): what training's periodic evaluations measure.
    """
    if members_of(model) != 1:
        raise ValueError("evaluate_set measures one model: a pack's members use evaluate_members")
    return evaluate_members(
        model, fmt, problems, device, reference, batch_size, breakdowns=breakdowns, decode=decode
    )[0]


def evaluate_members(
    model: GPT,
    fmt: Format,
    problems: Problems,
    device: torch.device,
    reference: Format | None = None,
    batch_size: int = 256,
    *,
    breakdowns: bool = True,
    decode: bool = True,
) -> list[dict[str, float]]:
    """``evaluate_set`` of each member of a packed model (one model: a list of one), the
    members decoded together in one batch (``generate_member_ids``)."""
    reference = reference or fmt
    if reference.vocab != fmt.vocab:
        raise ValueError("exact match compares token ids: the formats must share a vocabulary")
    if not decode and reference is not fmt:
        raise ValueError("exact match without decoding needs the answers in the prompt's format")
    was_training = model.training
    model.eval()
    encoded = fmt.encode(problems)  # once per format: every metric below reads these rows
    if not decode:
        out = _forced_metrics(model, fmt, problems, device, batch_size, encoded, breakdowns)
        model.train(was_training)
        return out
    answers = encoded if reference is fmt else reference.encode(problems)
    every_generated = generate_member_ids(
        model,
        fmt,
        problems,
        device,
        batch_size,
        reference=reference,
        encoded=encoded,
        answers=answers,
    )
    forced = [{}] * members_of(model)
    if reference is fmt:
        forced = forced_members(model, fmt, problems, device, batch_size, encoded)[0]
    expected = answer_ids(reference, problems, answers)
    out = []
    for generated, member_forced in zip(every_generated, forced, strict=True):
        exact = exact_matches(generated, expected, fmt)
        metrics = {"exact_match": float(exact.mean())}
        got = [fmt.decode(ids) for ids in generated] if breakdowns else []
        if breakdowns:
            metrics.update(_text_metrics(got, generated, answers, fmt, reference))
        metrics.update(member_forced)
        if breakdowns:
            metrics.update(exact_match_breakdowns(problems, exact, reference))
            if by_digit(reference.task):
                fed = fed_chars(generated, answers, reference, fmt)
                metrics.update(digit_accuracy(got, problems, reference, fed))
        out.append(metrics)
    model.train(was_training)
    return out


def _forced_metrics(
    model: GPT,
    fmt: Format,
    problems: Problems,
    device: torch.device,
    batch_size: int,
    encoded: Encoded,
    breakdowns: bool,
) -> list[dict[str, float]]:
    """``evaluate_members(decode=False)``: exact match, loss, token accuracy and the
    breakdowns of exact match, all from one teacher-forced pass."""
    forced, exact = forced_members(model, fmt, problems, device, batch_size, encoded)
    out = []
    for member_exact, member_forced in zip(exact, forced, strict=True):
        metrics = {"exact_match": float(member_exact.mean()), **member_forced}
        if breakdowns:
            metrics.update(exact_match_breakdowns(problems, member_exact, fmt))
        out.append(metrics)
    return out


def _text_metrics(
    got: list[str], generated: np.ndarray, answers: Encoded, fmt: Format, reference: Format
) -> dict[str, float]:
    """``short_answers`` and, where spacing can differ, ``normalised_match``: read as text."""
    # reference.answer_text(problems), from the rows already encoded
    expected = [
        reference.decode(row[start:])
        for row, start in zip(answers.tokens, answers.prompt_len, strict=True)
    ]
    short = ended_early(got, expected, fmt, reference)
    metrics = {"short_answers": float(short.mean())}
    if reports_normalised(fmt.config.name, reference is not fmt):
        ended = well_formed(generated, fmt)
        norm = ended & np.array(
            [fmt.normalise(g) == reference.normalise(e) for g, e in zip(got, expected, strict=True)]
        )
        metrics["normalised_match"] = float(norm.mean())
    return metrics


def ended_early(got: list[str], expected: list[str], fmt: Format, reference: Format) -> np.ndarray:
    """Answers that end (EOS) before the expected answer does, spacing aside.

    The mark of a model that learned the training answer length instead of the algorithm: on
    operands longer than trained it stops where the longest trained answer stopped (seed 001).
    """
    return np.array(
        [
            len(fmt.normalise(g)) < len(reference.normalise(e))
            for g, e in zip(got, expected, strict=True)
        ]
    )

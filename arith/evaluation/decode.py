"""Batched greedy decoding with a KV cache.

Problems are grouped by prompt length, so each group decodes as one batch with no padding:
the prompt is read in one forward pass, then one token per step for the whole group. While a
``static_decode.StaticDecoding`` is entered (a run whose step is a CUDA graph), each set decodes
at one shape instead: every chunk padded to the set's rows, one cache as long as the set needs.
"""

from __future__ import annotations

import numpy as np
import torch

from arith.evaluation import static_decode
from arith.evaluation.static_decode import CHECK_EVERY as CHECK_EVERY  # callers' old address
from arith.evaluation.static_decode import next_tokens, stops_after
from arith.model.gpt import GPT
from arith.problems.tasks import Problems
from arith.text.formats import Encoded, Format


@torch.no_grad()
def greedy_decode(
    model: GPT, prompts: torch.Tensor, max_new_tokens: int, eos_id: int
) -> torch.Tensor:
    """Greedy continuation (B, max_new_tokens) of same-length prompts (B, T), with a KV cache.

    Rows that produced EOS keep producing EOS, so the result reads as text up to the first EOS.
    Whether all rows ended is read every ``CHECK_EVERY`` tokens, not every token.
    """
    logits, cache = model(prompts, reserve=max_new_tokens)
    out = torch.full(
        (prompts.shape[0], max_new_tokens), eos_id, dtype=prompts.dtype, device=prompts.device
    )
    finished = torch.zeros(prompts.shape[0], dtype=torch.bool, device=prompts.device)
    eos = torch.full_like(finished, eos_id, dtype=prompts.dtype)
    for i in range(max_new_tokens):
        next_token = next_tokens(logits, finished, eos)
        out[:, i] = next_token
        if stops_after(i, max_new_tokens, finished):
            break
        logits, cache = model(next_token[:, None], cache)
    return out


PACK_ROWS = 4096
"""Rows of one decoding forward pass of a packed model at most: each member decodes
``PACK_ROWS // members`` problems at a time (``batch_size`` at most), so a pack of 64 small
models runs as few kernels as one model while its activations stay the size of one batch."""


def members_of(model: GPT) -> int:
    """How many members ``model`` holds (1 for a model without the attribute: a test's stand-in)."""
    return getattr(model, "members", 1)


def rows_per_member(batch_size: int, members: int) -> int:
    """Problems each member reads in one forward pass: ``batch_size`` for one model, within
    ``PACK_ROWS`` in all for a pack."""
    return batch_size if members == 1 else max(1, min(batch_size, PACK_ROWS // members))


@torch.no_grad()
def generate_ids(
    model: GPT,
    fmt: Format,
    problems: Problems,
    device: torch.device,
    batch_size: int = 256,
    max_new_tokens: int | None = None,
    reference: Format | None = None,
    *,
    encoded: Encoded | None = None,
    answers: Encoded | None = None,
) -> np.ndarray:
    """The model's greedy continuation of each problem's prompt, (N, max_new_tokens) token ids.

    The default budget is each row's expected answer plus one token, so a row that repeats the
    answer or never ends is seen to run past it; the array is as wide as the set's longest
    answer plus one, EOS after a row's budget.

    The answer tokens the training loss never sees (``format.mask_first_n`` of ``reference``,
    default ``fmt``) are fed in after the prompt, as teacher forcing feeds them, and stand
    first in the row: greedy decoding then scores only what the model was trained to write.
    ``encoded`` and ``answers``: ``problems`` already encoded with ``fmt`` and ``reference``.
    """
    if members_of(model) != 1:
        raise ValueError("generate_ids decodes one model: a pack's members use generate_member_ids")
    return generate_member_ids(
        model,
        fmt,
        problems,
        device,
        batch_size,
        max_new_tokens,
        reference,
        encoded=encoded,
        answers=answers,
    )[0]


@torch.no_grad()
def generate_member_ids(
    model: GPT,
    fmt: Format,
    problems: Problems,
    device: torch.device,
    batch_size: int = 256,
    max_new_tokens: int | None = None,
    reference: Format | None = None,
    *,
    encoded: Encoded | None = None,
    answers: Encoded | None = None,
) -> np.ndarray:
    """``generate_ids`` for each member of a packed model at once, (M, N, max_new_tokens): the
    members decode the same prompts in one batch, member ``i``'s rows in block ``i``."""
    reference = reference or fmt
    encoded = encoded if encoded is not None else fmt.encode(problems)
    if answers is None:
        answers = encoded if reference is fmt else reference.encode(problems)
    limit = max_new_tokens or int(answers.answer_len.max()) + 1
    members = members_of(model)
    chunk_rows = rows_per_member(batch_size, members)
    # EOS is always the model's own: a row whose mask covers its whole answer still must end
    forced = np.minimum(reference.config.mask_first_n, answers.answer_len - 1)
    # columns past a row's budget are EOS, as a row that ended writes them
    generated = np.full((members, len(problems), limit), fmt.eos_id, dtype=np.int64)
    groups, group_sizes = np.unique(
        np.stack([encoded.prompt_len, forced], axis=1), axis=0, return_counts=True
    )
    fixed = _fixed_shape(model, chunk_rows, group_sizes, encoded, limit, fmt.eos_id)
    for length, n in groups.tolist():  # prompts of one length, the same tokens fed in
        rows = np.flatnonzero((encoded.prompt_len == length) & (forced == n))
        # Chunks of alike expected answers, each decoded to its longest answer plus one: a
        # chunk runs until its every row ends, so mixed lengths (multi_op's traces: 19 to 290
        # tokens) would run every chunk to the set's longest, and an untrained model's every
        # chunk to the set's budget. Each row is then cut after its own answer plus one token,
        # so what a row reads does not depend on the rows decoded beside it.
        rows = rows[np.argsort(answers.answer_len[rows], kind="stable")]
        for start in range(0, len(rows), chunk_rows):
            chunk = rows[start : start + chunk_rows]
            budget = max_new_tokens or int(answers.answer_len[chunk].max()) + 1
            given = _answer_prefix(answers, chunk, n)  # (len(chunk), n)
            prompts = np.concatenate([encoded.tokens[chunk, :length], given], axis=1)
            decoded = np.empty((members, len(chunk), budget), dtype=np.int64)
            decoded[:, :, :n] = given[None, :, :budget]
            if n < budget:
                decoded[:, :, n:] = _decode(model, prompts, budget - n, fmt.eos_id, device, fixed)
            if not max_new_tokens:
                past_own = np.arange(budget)[None, :] > answers.answer_len[chunk, None]
                decoded[:, past_own] = fmt.eos_id
            generated[:, chunk, :budget] = decoded
    return generated


def _fixed_shape(
    model: GPT, chunk_rows: int, group_sizes: np.ndarray, encoded: Encoded, limit: int, eos_id: int
) -> static_decode.StaticDecoder | None:
    """The set's fixed-shape decoder while a ``StaticDecoding`` is entered, else None: as many
    rows per member as the set's largest chunk, room for its longest prompt and budget."""
    decoding = static_decode.active()
    if decoding is None:
        return None
    rows = min(chunk_rows, int(group_sizes.max())) * members_of(model)
    capacity = int(encoded.prompt_len.max()) + limit
    return decoding.decoder(model, rows, capacity, eos_id)


def _decode(
    model: GPT,
    prompts: np.ndarray,
    new_tokens: int,
    eos_id: int,
    device,
    fixed: static_decode.StaticDecoder | None,
) -> np.ndarray:
    """Every member's greedy continuation of ``prompts`` (b, T), (M, b, new_tokens): by
    ``greedy_decode``, or by ``fixed`` with the chunk padded to its rows (copies of the first
    prompt, whose continuations are dropped)."""
    members, b = members_of(model), len(prompts)
    if fixed is not None:
        padding = np.repeat(prompts[:1], fixed.rows // members - b, axis=0)
        prompts = np.concatenate([prompts, padding])
    every_member = torch.from_numpy(np.tile(prompts, (members, 1))).to(device)  # (M * b', T)
    if fixed is None:
        out = greedy_decode(model, every_member, new_tokens, eos_id)
    else:
        out = fixed.decode(every_member, new_tokens)
    return out.cpu().numpy().reshape(members, len(prompts), -1)[:, :b]


def _answer_prefix(encoded: Encoded, rows: np.ndarray, n: int) -> np.ndarray:
    """The first ``n`` answer tokens of ``rows`` (n <= each row's answer length), (rows, n)."""
    columns = encoded.prompt_len[rows, None] + np.arange(n)[None, :]
    return np.take_along_axis(encoded.tokens[rows], columns, axis=1)


@torch.no_grad()
def predict_answers(
    model: GPT,
    fmt: Format,
    problems: Problems,
    device: torch.device,
    batch_size: int = 256,
    max_new_tokens: int | None = None,
) -> list[str]:
    """The model's answer text for each problem, decoded greedily in batches."""
    generated = generate_ids(model, fmt, problems, device, batch_size, max_new_tokens)
    return [fmt.decode(ids) for ids in generated]

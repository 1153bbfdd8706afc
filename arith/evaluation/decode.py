"""Batched greedy decoding with a KV cache.

Problems are grouped by prompt length, so each group decodes as one batch with no padding:
the prompt is read in one forward pass, then one token per step for the whole group.
"""

from __future__ import annotations

import numpy as np
import torch

from arith.model.gpt import GPT
from arith.problems.tasks import Problems
from arith.text.formats import Encoded, Format

CHECK_EVERY = 8
"""Decoding steps between two looks at whether every row has ended. Each look reads a value
back from the device, so the host waits for it; rows that ended keep writing EOS, so the steps
decoded past the end change nothing but the time they take."""


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
        next_token = torch.where(finished, eos, logits[:, -1].argmax(-1))
        out[:, i] = next_token
        finished |= next_token == eos_id
        if i + 1 == max_new_tokens or ((i + 1) % CHECK_EVERY == 0 and bool(finished.all())):
            break  # the rest of ``out`` is EOS already
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
    groups = np.unique(np.stack([encoded.prompt_len, forced], axis=1), axis=0)
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
                every_member = np.tile(prompts, (members, 1))  # (M * len(chunk), T)
                out = greedy_decode(
                    model, torch.from_numpy(every_member).to(device), budget - n, fmt.eos_id
                )
                decoded[:, :, n:] = out.cpu().numpy().reshape(members, len(chunk), -1)
            if not max_new_tokens:
                past_own = np.arange(budget)[None, :] > answers.answer_len[chunk, None]
                decoded[:, past_own] = fmt.eos_id
            generated[:, chunk, :budget] = decoded
    return generated


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

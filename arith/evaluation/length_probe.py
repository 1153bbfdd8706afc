"""The length probe: how far past the trained length a model still answers, measured until it
breaks.

The length grid (arith.data.length_grid) stops where its settings stop, so its ratio is often
the grid's end, not the model's. The probe climbs a geometric ladder of operand lengths past
the trained one (arith.data.length_probe's ``RATIOS`` times ``task.n_digits``, up to
``data.length_probe_max`` digits), ``data.length_probe_size`` random problems per rung with
both operands exactly that long, and stops at the first rung below ``SUCCESS`` or where the
model's context ends (learned positions: the table it was built with; Abacus embeddings:
``model.abacus_max_k``; relative schemes: none but the probe's own limit). Carry edge cases are
their own category at every rung: the longest chain (``99..9 + 1`` both ways and ``a + (10^L -
a)``, a carry through every column) and the overflowing leading digit (``99..9 + 99..9``,
``50..0 + 50..0``). Its metrics:

- ``probe/exact_match/<L>`` and ``probe/edge/<L>``: the rung's random problems and edge cases;
- ``probe/extrapolation_ratio``: the longest rung L with every rung up to it >= ``SUCCESS``,
  over the trained length (0 when the first rung misses), and ``probe/edge_ratio`` the same
  for the edge cases (all of a rung's edge cases right);
- ``probe/broke_at``: the first rung below ``SUCCESS`` (0: none did), ``probe/context``: the
  longest operand the model can read (the last rung when the context ends first).

Measured once at the end, on the kept weights, never chosen on: a report, not a validation set.
"""

from __future__ import annotations

import numpy as np
import torch

from arith.data.length_grid import SUCCESS, extrapolation_ratio
from arith.data.length_probe import (
    BROKE_KEY,
    CONTEXT_KEY,
    EDGE_KEY,
    EDGE_RATIO_KEY,
    EXACT_KEY,
    RATIO_KEY,
    edge_problems,
    random_problems,
    rungs,
)
from arith.evaluation.evaluate import exact_rows
from arith.model.gpt import GPT
from arith.problems.tasks import Problems, TaskConfig
from arith.text.formats import Format, longest_digit_run

BATCH_TOKENS = 40_000
"""Prompt tokens decoded at once: 100 problems of 200-digit sums fit, attention scores stay
well under a gigabyte."""


def context_digits(model: GPT, fmt: Format, task: TaskConfig, longest: int) -> int:
    """The longest operand (at most ``longest``) the model can read: a learned position table
    ends at the sequence it was built for, an Abacus table at ``abacus_max_k``."""
    position = model.cfg.position
    if position not in ("learned", "abacus"):
        return longest
    fits = (
        (lambda n: fmt.max_seq_len(n) <= model.max_seq_len)
        if position == "learned"
        else (lambda n: longest_digit_run(fmt.config, task, n) <= model.cfg.abacus_max_k)
    )
    n = task.n_digits
    while n < longest and fits(n + 1):
        n += 1
    return n


@torch.no_grad()
def probe(
    model: GPT,
    fmt: Format,
    task: TaskConfig,
    longest: int,
    size: int,
    seed: int,
    device: torch.device,
) -> dict[str, float]:
    """The probe's metrics (module docstring) for ``model``, rungs up to ``longest`` digits."""
    # three words: no [seed, id] stream of arith.data.dataset draws the same numbers
    rng = np.random.default_rng([seed, longest, size])
    context = context_digits(model, fmt, task, longest)
    out: dict[str, float] = {CONTEXT_KEY: float(context), BROKE_KEY: 0.0}
    exact, edges = {}, {}  # per rung climbed
    for length in rungs(task.n_digits, context):
        exact[length] = _exact(model, fmt, random_problems(task, length, size, rng), device)
        edges[length] = _exact(model, fmt, edge_problems(task, length, rng), device)
        out[EXACT_KEY.format(length)], out[EDGE_KEY.format(length)] = exact[length], edges[length]
        if exact[length] < SUCCESS:
            out[BROKE_KEY] = float(length)
            break
    out[RATIO_KEY] = extrapolation_ratio(exact, task.n_digits)
    # every edge case of a rung right: the grid's ratio with a bar of 1
    all_right = {n: float(e == 1.0) for n, e in edges.items()}
    out[EDGE_RATIO_KEY] = extrapolation_ratio(all_right, task.n_digits)
    return out


def _exact(model: GPT, fmt: Format, problems: Problems, device: torch.device) -> float:
    encoded = fmt.encode(problems)
    batch = max(1, BATCH_TOKENS // int(encoded.prompt_len.max()))
    return float(exact_rows(model, fmt, problems, device, batch, encoded).mean())

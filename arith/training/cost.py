"""What a run costs, without building its model or data: parameters, FLOPs, memory, steps.

The model formulas (``n_params``, ``flops_per_token``, ``training_bytes``) read only the model
config; the run formulas (``step_cost``, ``planned_steps``, ``describe``) add the task, format
and budgets, for the summary, the budgets and dry runs.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from arith.problems import tasks
from arith.problems.tasks import TaskConfig
from arith.text.formats import FormatConfig, build_format
from arith.training.trainconf import DEFAULT_MAX_STEPS

if TYPE_CHECKING:
    from arith.config import RunConfig
    from arith.model.gpt import ModelConfig

LENGTH_SAMPLE = 8192
"""Problems drawn to measure a format's mean sequence length (``mean_seq_len``): on multi_op
with its traces two samples differ by about 0.5 %."""
LENGTH_SAMPLE_SEED = 0x5EC1E7
"""Seeds that sample: the same for every run, so two runs of one task and format count alike."""


def n_params(cfg: ModelConfig, vocab_size: int, max_seq_len: int) -> dict[str, int]:
    """Parameter counts without building the model: total and non-embedding (Kaplan et al.).

    ``max_seq_len`` is the length training reaches (``Dataset.train_seq_len``): a learned table
    also holds positions for longer evaluation sets, but those are never trained, so they are
    not counted and two runs that differ only in what they evaluate count the same.
    """
    d, h, b = cfg.d_model, cfg.hidden, int(cfg.bias)
    attn = d * 3 * d + 3 * d * b + d * d + d * b
    if cfg.position == "abacus_bias":
        attn += cfg.n_head * cfg.n_index_differences
        if cfg.abacus_bias_values:  # a value vector per head and difference
            attn += cfg.n_head * cfg.n_index_differences * cfg.head_dim
    mlp = d * h + h * b + h * d + d * b
    norms = 2 * (d + d * b)
    per_layer = attn + mlp + norms
    non_embedding = cfg.n_layer * per_layer + (d + d * b)  # blocks + final LayerNorm
    embedding = vocab_size * d
    if cfg.position == "learned":
        embedding += max_seq_len * d
    elif cfg.position == "abacus":
        embedding += (cfg.abacus_max_k + 1) * d
    head = 0 if cfg.tie_embeddings else vocab_size * d
    return {"total": non_embedding + embedding + head, "non_embedding": non_embedding}


def training_bytes(cfg: ModelConfig, vocab_size: int, seq_len: int, batch_size: int) -> int:
    """Estimated fp32 memory one model takes to train (for packing as many as fit).

    Parameters, gradients and AdamW's two moments at 4 bytes each; the activations kept for
    the backward pass, 34·d + 5·heads·T bytes per token and layer at 16 bits (Korthikanti et
    al. 2022), doubled for fp32; and the logits with their softmax and gradient.
    """
    params = n_params(cfg, vocab_size, seq_len)["total"]
    tokens = batch_size * seq_len
    activations = 2 * tokens * cfg.n_layer * (34 * cfg.d_model + 5 * cfg.n_head * seq_len)
    return 16 * params + activations + 3 * 4 * tokens * vocab_size


def flops_per_token(cfg: ModelConfig, vocab_size: int, seq_len: float) -> float:
    """Training FLOPs per token, 6N + 12·L·d·T (PaLM appendix B), N the matmul parameters, T
    the sequence length (a mean length gives a fractional count).

    N counts every weight that takes part in a matmul: the blocks and the output projection.
    """
    d, h = cfg.d_model, cfg.hidden
    matmul_params = cfg.n_layer * (4 * d * d + 2 * d * h) + d * vocab_size
    return 6 * matmul_params + 12 * cfg.n_layer * d * seq_len


@functools.lru_cache(maxsize=64)
def mean_seq_len(task: TaskConfig, fmt: FormatConfig) -> float:
    """Mean tokens of a training row, prompt, answer and EOS without padding, measured on
    ``LENGTH_SAMPLE`` problems drawn as training draws them (``tasks.sample``: operand lengths
    and operation weights as configured).

    The longest sequence overstates what a step trains where lengths vary: seed 004's rows
    with a division trace hold up to 301 tokens and about 43 on average with equal operation
    weights (52 with its own), so counting every row at 301 counted 7 times the tokens."""
    rng = np.random.default_rng(LENGTH_SAMPLE_SEED)
    encoded = build_format(fmt, task).encode(tasks.sample(task, LENGTH_SAMPLE, rng))
    return float((encoded.prompt_len + encoded.answer_len).mean())


def step_cost(config: RunConfig) -> dict[str, int]:
    """What one optimisation step costs, as the budgets and the summary count it.

    ``tokens``: batch_size x the mean length of a training row (``mean_seq_len``; padding is
    not counted, so compute-matched ladders across formats match the tokens each trains).
    ``flops``: tokens x ``flops_per_token`` at that mean length (6N + 12·L·d·T, the forward and
    backward matmuls, PaLM appendix B; embedding lookups, norms and the optimiser are not
    counted).
    """
    fmt = build_format(config.format, config.task)
    seq_len = mean_seq_len(config.task, config.format)
    per_token = round(flops_per_token(config.model, len(fmt.vocab), seq_len))
    tokens = round(config.train.batch_size * seq_len)
    return {"tokens": tokens, "flops": tokens * per_token, "flops_per_token": per_token}


def planned_steps(config: RunConfig) -> int:
    """Steps the run trains unless stopped early: ceil(budget / cost per step) with a budget,
    else ``max_steps`` (DEFAULT_MAX_STEPS when null). With ``epochs`` the count needs the
    training set, which ``train`` builds; here it is ``max_steps``'s."""
    tc = config.train
    budget = tc.flops_budget if tc.flops_budget is not None else tc.tokens_budget
    if budget is None:
        return tc.max_steps if tc.max_steps is not None else DEFAULT_MAX_STEPS
    per_step = step_cost(config)["flops" if tc.flops_budget is not None else "tokens"]
    return max(1, math.ceil(budget / per_step))


def describe(config: RunConfig) -> dict[str, Any]:
    """Sizes and costs of a run without building its model or data (for dry runs): parameter
    counts, the cost of a step (``step_cost``), the planned steps and their tokens and FLOPs."""
    fmt = build_format(config.format, config.task)
    seq_len = fmt.max_seq_len()
    if config.data.longer_n_digits:
        seq_len = max(seq_len, fmt.max_seq_len(config.data.longer_n_digits[1]))
    if config.data.ood_spacing:
        spaced = build_format(FormatConfig(name="spaced"), config.task)
        seq_len = max(seq_len, spaced.max_seq_len())
    counts = n_params(config.model, len(fmt.vocab), fmt.max_seq_len())
    cost = step_cost(config)
    steps = planned_steps(config)
    return {
        "n_params": counts["total"],
        "n_params_non_embedding": counts["non_embedding"],
        "flops_per_token": cost["flops_per_token"],
        "seq_len": seq_len,
        "vocab_size": len(fmt.vocab),
        "steps": steps,
        "tokens_per_step": cost["tokens"],
        "flops_per_step": cost["flops"],
        "tokens": cost["tokens"] * steps,
        "flops": cost["flops"] * steps,
        "total_flops": float(cost["flops"] * steps),
        "train_bytes": training_bytes(
            config.model, len(fmt.vocab), seq_len, config.train.batch_size
        ),
    }

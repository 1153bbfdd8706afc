"""How the model knows where a token is: the position schemes of ``model.position``.

- ``learned``: a table of absolute positions (GPT-2); the table lives on ``GPT`` as ``wpe``.
- ``rope``: rotary embeddings on queries and keys (Su et al. 2021), base ``rope_theta``.
- ``abacus``: each digit gets the embedding of its index within its number, counted from the
  number's first token; training adds a random offset so indices up to ``abacus_max_k`` are
  seen (McLeish et al. 2024, "Transformers Can Do Arithmetic with the Right Embeddings"). The
  table lives on ``GPT`` as ``abacus``.
- ``abacus_bias``: the same digit index, read by attention instead of added to the input: each
  head adds a learned bias for the difference between the query's and the key's index (T5's
  relative bias, Raffel et al. 2020, over digit indices rather than token positions), clipped
  at ``abacus_bias_reach`` so longer numbers meet no difference training did not
  (:class:`AbacusBias`). With ``abacus_bias_values`` each head also reads a learned vector per
  difference (Shaw et al. 2018's relative values).
- ``none``: no position signal besides the causal mask (NoPE).

What was tried on the way to these, with measurements: docs/notes/abacus_length.md.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from arith.model.kv_cache import Cache


def digit_run_index(is_digit: Tensor, prev_run: Tensor) -> Tensor:
    """1-based index of each digit within its run of digits, 0 elsewhere; (B, T) -> (B, T).

    ``prev_run`` (B,) is the index of the token just before this chunk, so decoding one token at
    a time continues a number's count. ``"12+345="`` -> ``[1, 2, 0, 1, 2, 3, 0]``.
    """
    d = is_digit.long()
    count = d.cumsum(1)
    at_last_break = torch.where(d == 0, count, torch.zeros_like(count)).cummax(1).values
    run = (count - at_last_break) * d
    before_first_break = (1 - d).cumsum(1) == 0
    return run + before_first_break * d * prev_run[:, None]


def continue_digit_runs(
    is_digit: Tensor, cache: Cache, keep_all: bool = False
) -> tuple[Tensor, Tensor | None]:
    """:func:`digit_run_index` of the tokens (B, T) that follow those in ``cache``, and with
    ``keep_all`` every cached token's index as well, (B, S) (``abacus_bias`` compares each query
    with every key). The cache keeps the last token's index, for the next chunk."""
    prev_run = cache.digit_run
    if prev_run is None:
        prev_run = torch.zeros(len(is_digit), dtype=torch.long, device=is_digit.device)
    run = digit_run_index(is_digit, prev_run)
    return run, cache.keep_digit_runs(run, keep_all)


def abacus_index(run: Tensor, offset: Tensor | None) -> Tensor:
    """Entry of the Abacus table for each token: its digit index (``digit_run_index``) shifted
    by the problem's training offset (B,); evaluation passes ``None``.

    Non-digit tokens (index 0) shift too. The token that predicts an answer digit then sits
    one entry below the operand digits that digit needs, at every offset, and that holds for
    the ``=`` before the ones digit as well. Left at entry 0, ``=`` could not find the ones
    digits by their index, only by counting tokens, which breaks on operands longer than
    trained.
    """
    return run if offset is None else run + offset[:, None]


def training_offsets(rows: int, max_k: int, longest_run: int, generator: torch.Generator) -> Tensor:
    """Abacus training offsets (rows,), uniform in 0..max_k - longest_run (McLeish et al. 2024).

    ``longest_run`` is the longest digit run training writes (``formats.longest_digit_run``):
    its digits, indices 1..longest_run, shifted by the largest offset reach entry ``max_k``,
    the last one the evaluation sets may index (``formats.check_abacus_table``), so no entry
    they read is left untrained. A run as long as the table takes offset 0 only."""
    high = max(0, max_k - longest_run) + 1  # randint's bound is exclusive
    return torch.randint(0, high, (rows,), generator=generator)


def clipped_differences(queries: Tensor, keys: Tensor, reach: int, window: bool) -> Tensor:
    """Which ``abacus_bias`` entry each query and key pair reads: (B, T) and (B, S) digit
    indices -> (B, T, S) in 0..2*reach, the index difference clipped at ``reach``; with
    ``window``, -1 (not seen) for pairs farther apart than ``reach``.

    Clipped, a problem longer than trained meets only differences training did; unclipped
    (rotary angles of the same indices), sums longer than trained bring differences never seen.
    Clipped alone, every far key still takes a share of attention, and longer operands bring
    more of them; the window keeps the keys a query sees as few as in training.
    """
    difference = queries[:, :, None] - keys[:, None, :]
    clipped = difference.clamp(-reach, reach) + reach
    return clipped.masked_fill(difference.abs() > reach, -1) if window else clipped


def window_keys(
    differences: Tensor, k: Tensor, v: Tensor, t_past: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Each query's own keys within the window, and only those, each query folded into a row:
    ``differences`` (B, T, S) from ``clipped_differences`` with ``window`` (-1: not seen), keys
    and values (B, nh, S, hs), the first ``t_past`` keys cached -> differences (B*T, 1, K), keys
    and values (B*T, nh, K, hs): row ``b*T + t`` holds query ``t`` of row ``b`` and the K keys it
    sees, causally, padded with unseen ones (difference -1, masked again by the bias).

    A query of a windowed model sees a handful of keys (its own digit place and the one either
    side in each number, the signs) however long the sequence, so attention over these alone
    costs what 8 digits cost at 400: the length probe's dense attention was most of a trial's
    time (docs/notes/abacus_length.md). Attention does not depend on the keys' order, so they
    are picked by ``topk``, not sorted.
    """
    B, T, S = differences.shape
    nh, hs = k.shape[1], k.shape[3]
    causal = torch.ones(T, S, dtype=torch.bool, device=differences.device).tril(t_past)
    seen = (differences >= 0) & causal
    K = int(seen.sum(-1).max())  # one read on the host a layer: evaluation's dynamic cache only
    picked = seen.to(torch.uint8).topk(K, dim=-1, sorted=False).indices  # (B, T, K)
    picked_differences = differences.gather(2, picked).masked_fill(~seen.gather(2, picked), -1)
    index = picked.view(B, 1, T * K, 1).expand(B, nh, T * K, hs)

    def fold(x: Tensor) -> Tensor:  # (B, nh, S, hs) -> each query's keys, (B*T, nh, K, hs)
        return x.gather(2, index).view(B, nh, T, K, hs).transpose(1, 2).reshape(B * T, nh, K, hs)

    return picked_differences.view(B * T, 1, K), fold(k), fold(v)


class AbacusBias(nn.Module):
    """``abacus_bias``: per member and head, a learned attention bias for each clipped digit
    index difference (``clipped_differences``), -reach..reach.

    It learns at a multiple of the learning rate (``optim.abacus_bias_lr_mult``,
    arith.training.optim):
    at the rate of the weights it takes thousands of steps to become sharp."""

    def __init__(
        self, members: int, n_head: int, n_differences: int, window: bool, head_dim: int = 0
    ) -> None:
        super().__init__()
        self.n_head, self.n_differences, self.head_dim = n_head, n_differences, head_dim
        self.window = window  # differences may hold -1 (not seen): ``clipped_differences``
        # (M, heads x differences): 2-D like other biases, so weight decay leaves it alone
        self.table = nn.Parameter(torch.zeros(members, n_head * n_differences))
        # with a head_dim, a value vector per head and difference (``read_values``), 2-D alike
        shape = (members, n_head * n_differences * head_dim)
        self.values = nn.Parameter(torch.zeros(shape)) if head_dim else None

    def forward(self, differences: Tensor) -> Tensor:
        """Attention bias (B, heads, T, keys) for ``differences`` (B, T, keys): each member's
        bias for the pair's clipped difference, -inf for pairs outside the window (-1)."""
        B, T, S = differences.shape
        M = self.table.shape[0]
        table = self.table.view(M, self.n_head, -1)
        table = table.repeat_interleave(B // M, dim=0)  # (B, heads, differences)
        entries = differences.clamp(min=0) if self.window else differences
        index = entries.view(B, 1, T * S).expand(B, self.n_head, T * S)
        bias = table.gather(2, index).view(B, self.n_head, T, S)
        if not self.window:  # the clipped bias, no masking: nothing to pay for on its hot path
            return bias
        return bias.masked_fill(differences[:, None] < 0, float("-inf"))

    def read_values(self, weights: Tensor, differences: Tensor) -> Tensor:
        """(B, heads, T, head_dim): per query, the attention weight (B, heads, T, keys) spent on
        keys of each difference times that difference's value vector.

        Weights spread evenly over alike digits read the same value whether the operand ends
        at the next index or goes on; the weight on difference -1 then says which it is."""
        B, H, T, S = weights.shape
        M = self.values.shape[0]
        # keys outside the window (-1) have weight 0, so any entry serves them. A scatter-add
        # over the keys, summed in fp32 (bf16 weights under autocast): a quarter of the time of
        # a one-hot einsum, forward and backward (docs/notes/abacus_length.md)
        entries = differences.clamp(min=0)[:, None].expand(B, H, T, S)
        spent = weights.new_zeros((B, H, T, self.n_differences), dtype=torch.float32)
        spent = spent.scatter_add_(3, entries, weights.float()).to(weights.dtype)
        table = self.values.view(M, H, self.n_differences, self.head_dim)
        return spent @ table.repeat_interleave(B // M, dim=0).to(weights.dtype)


def rope_tables(positions: Tensor, head_dim: int, theta: float, dtype) -> Tensor:
    """Each position's rotation (T, head_dim, head_dim), for ``apply_rope``: the pair of
    channels j and j + head_dim/2 turned by the position's angle at frequency j."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=positions.device) / head_dim)
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)  # (T, head_dim)
    # x @ swap = cat([-x2, x1]): the halves swapped, and the half moved to the front negated
    half = torch.arange(head_dim // 2, device=positions.device)
    swap = torch.zeros(head_dim, head_dim, device=positions.device)
    swap[half + head_dim // 2, half], swap[half, half + head_dim // 2] = -1.0, 1.0
    # x @ R[t] = x * cos + cat([-x2, x1]) * sin, as a matrix: the columns of swap scaled by sin
    rotations = torch.diag_embed(angles.cos()) + swap * angles.sin()[:, None, :]
    return rotations.to(dtype)


def apply_rope(x: Tensor, rotations: Tensor) -> Tensor:
    """Rotate each pair of halves of ``x`` (B, nh, T, hs) by its position's angle, in the
    rotations' precision whatever autocast does (bf16 queries meet fp32 tables in fp32).

    One small matmul per position rather than the elementwise ``x * cos + rotate_half(x) * sin``:
    the same result to fp32's rounding, and on CPU the elementwise form's six passes over
    memory cost 1.2-1.5x the matmul, forward and backward (docs/notes/kernels.md)."""
    with torch.autocast(x.device.type, enabled=False):
        return torch.einsum("bnth,thg->bntg", x.to(rotations.dtype), rotations)

"""The one shared model: a GPT-style decoder (pre-LayerNorm, causal attention, MLP).

Packed trials: one module holds several same-shape models ("members"), every parameter with a
leading member dimension, linear layers as batched matmuls and attention with the members folded
into the batch (HFTA, Wang et al. 2021). A single model is the pack of one member. No state is
kept on the module between calls (the KV cache is passed in and returned).

Position encodings:
- ``learned``: a table of absolute positions (GPT-2).
- ``rope``: rotary embeddings on queries and keys (Su et al. 2021), base ``rope_theta``.
- ``abacus``: each digit gets the embedding of its index within its number, counted from the
  number's first token; training adds a random offset so indices up to ``abacus_max_k`` are
  seen (McLeish et al. 2024, "Transformers Can Do Arithmetic with the Right Embeddings").
- ``abacus_bias``: the same digit index, read by attention instead of added to the input: each
  head adds a learned bias for the difference between the query's and the key's index (T5's
  relative bias, Raffel et al. 2020, over digit indices rather than token positions), clipped
  at ``abacus_bias_reach`` so longer numbers meet no difference training did not.
- ``none``: no position signal besides the causal mask (NoPE).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from arith.errors import require


@dataclass
class KVCache:
    """Keys and values of the tokens so far: per layer a (B, n_head, capacity, head_dim) buffer.

    The first ``length`` positions are filled. Decoding writes each new token in place rather
    than copying the whole prefix every step; a full buffer doubles. Create one with
    ``model(prompts, reserve=n)`` to leave room for ``n`` new tokens.
    """

    reserve: int = 0
    length: int = 0
    keys: list[Tensor | None] = field(default_factory=list)
    values: list[Tensor | None] = field(default_factory=list)
    digit_run: Tensor | None = None
    """Index of the last token within its run of digits (B,), for Abacus positions."""
    rows: Tensor | None = None
    """Digit index of every token so far (B, length), for ``abacus_bias``."""

    def write(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store the new tokens' keys and values; the filled part of the buffers, new included."""
        if len(self.keys) <= layer:
            self.keys.append(None)
            self.values.append(None)
        start, end = self.length, self.length + k.shape[2]
        if self.keys[layer] is None and self.reserve == 0:  # a plain forward pass: no copy
            self.keys[layer], self.values[layer] = k, v
            return k, v
        buffer = self.keys[layer]
        if buffer is None or buffer.shape[2] < end:
            capacity = max(end + self.reserve, 2 * (0 if buffer is None else buffer.shape[2]))
            self.keys[layer] = _grow(self.keys[layer], k, capacity, start)
            self.values[layer] = _grow(self.values[layer], v, capacity, start)
        self.keys[layer][:, :, start:end] = k
        self.values[layer][:, :, start:end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]


def _grow(buffer: Tensor | None, like: Tensor, capacity: int, filled: int) -> Tensor:
    shape = (*like.shape[:2], capacity, like.shape[3])
    bigger = like.new_empty(shape)
    if buffer is not None:
        bigger[:, :, :filled] = buffer[:, :, :filled]
    return bigger


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the decoder. Vocabulary and context length come from the task and format."""

    n_layer: int = 2
    """Number of transformer blocks."""
    d_model: int = 128
    """Width of the residual stream."""
    n_head: int = 4
    """Attention heads; must divide ``d_model``."""
    d_ff: int | None = None
    """Hidden width of the MLP; ``None`` means ``4 * d_model``."""
    dropout: float = 0.0
    """Dropout on attention weights, residual branches and embeddings."""
    tie_embeddings: bool = True
    """Share the token embedding with the output projection (GPT-2)."""
    bias: bool = True
    """Biases in linear layers and LayerNorms."""
    position: Literal["learned", "rope", "abacus", "abacus_bias", "none"] = "learned"
    """How the model knows where a token is."""
    rope_theta: float = 10000.0
    """RoPE base; seed 002 uses 100 for its short sequences."""
    abacus_max_k: int = 100
    """Largest digit index the Abacus table holds; training offsets indices up to it."""
    abacus_bias_reach: int = 4
    """``abacus_bias``: index differences beyond this many share the bias of the farthest."""
    log_length_attention: bool = False
    """Scale each query's attention logits by log(number of keys it sees) (Chiang & Cholak
    2022; Nakanishi 2025, "Scalable-Softmax"), so attention to one key does not fade as the
    sequence grows: without it a model dilutes on longer inputs than trained."""
    input_injection: bool = False
    """Add the embedded input (tokens and positions) to every block's input, not only the
    first's (McLeish et al. 2024 report fewer length-generalisation errors with Abacus
    positions; measured here in search_spaces/abacus_length.yaml's header)."""
    init_std: float = 0.02
    """Standard deviation of the normal initialisation (GPT-2)."""

    def __post_init__(self) -> None:
        require(self.n_layer >= 1, "model.n_layer", f"must be >= 1, but got {self.n_layer}")
        require(self.d_model >= 1, "model.d_model", f"must be >= 1, but got {self.d_model}")
        require(self.n_head >= 1, "model.n_head", f"must be >= 1, but got {self.n_head}")
        require(
            self.d_model % self.n_head == 0,
            "model.n_head",
            f"must divide model.d_model={self.d_model}, but got {self.n_head}",
        )
        require(
            self.position != "rope" or self.head_dim % 2 == 0,
            "model.n_head",
            f"rope needs an even head dimension, but d_model/n_head = {self.head_dim}",
        )
        require(self.d_ff is None or self.d_ff >= 1, "model.d_ff", f"must be >= 1, got {self.d_ff}")
        require(
            0.0 <= self.dropout < 1.0, "model.dropout", f"must be in [0, 1), got {self.dropout}"
        )
        require(self.rope_theta > 0, "model.rope_theta", f"must be > 0, got {self.rope_theta}")
        require(
            self.abacus_max_k >= 1, "model.abacus_max_k", f"must be >= 1, got {self.abacus_max_k}"
        )
        require(
            self.abacus_bias_reach >= 1,
            "model.abacus_bias_reach",
            f"must be >= 1, got {self.abacus_bias_reach}",
        )

    @property
    def hidden(self) -> int:
        return self.d_ff if self.d_ff is not None else 4 * self.d_model

    @property
    def abacus_bias_buckets(self) -> int:
        """Biases per head for ``abacus_bias``: one per clipped difference, -reach..reach."""
        return 2 * self.abacus_bias_reach + 1

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head


def n_params(cfg: ModelConfig, vocab_size: int, max_seq_len: int) -> dict[str, int]:
    """Parameter counts without building the model: total and non-embedding (Kaplan et al.).

    ``max_seq_len`` is the length training reaches (``Dataset.train_seq_len``): a learned table
    also holds rows for longer evaluation sets, but those are never trained, so they are not
    counted and two runs that differ only in what they evaluate count the same.
    """
    d, h, b = cfg.d_model, cfg.hidden, int(cfg.bias)
    attn = d * 3 * d + 3 * d * b + d * d + d * b
    if cfg.position == "abacus_bias":
        attn += cfg.n_head * cfg.abacus_bias_buckets
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


def flops_per_token(cfg: ModelConfig, vocab_size: int, seq_len: int) -> int:
    """Training FLOPs per token, 6N + 12·L·d·T (PaLM appendix B), N the matmul parameters.

    N counts every weight that takes part in a matmul: the blocks and the output projection.
    """
    d, h = cfg.d_model, cfg.hidden
    matmul_params = cfg.n_layer * (4 * d * d + 2 * d * h) + d * vocab_size
    return 6 * matmul_params + 12 * cfg.n_layer * d * seq_len


class MemberLinear(nn.Module):
    """``members`` independent linear layers as one batched matmul: (M, N, in) -> (M, N, out).

    HFTA (Wang et al., MLSys 2021): same-shape models trained together share one kernel per
    layer instead of one per model. One member is the ordinary linear layer.
    """

    def __init__(self, members: int, d_in: int, d_out: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(members, d_out, d_in))
        self.bias = nn.Parameter(torch.zeros(members, d_out)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        if self.bias is None:
            return torch.bmm(x, self.weight.transpose(1, 2))
        return torch.baddbmm(self.bias[:, None, :], x, self.weight.transpose(1, 2))


class MemberEmbedding(nn.Module):
    """``members`` lookup tables (M, rows, d); ``idx`` (M, ...) -> (M, ..., d)."""

    def __init__(self, members: int, rows: int, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(members, rows, d))

    def forward(self, idx: Tensor) -> Tensor:
        members, rows, d = self.weight.shape
        if members == 1:
            return F.embedding(idx, self.weight[0])
        # one lookup in the members' tables laid end to end
        shift = torch.arange(members, device=idx.device) * rows
        shifted = idx + shift.view(members, *([1] * (idx.dim() - 1)))
        return F.embedding(shifted, self.weight.view(members * rows, d))


class MemberLayerNorm(nn.Module):
    """LayerNorm with a weight and bias per member; x (M, N, d)."""

    def __init__(self, members: int, d: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(members, d))
        self.bias = nn.Parameter(torch.zeros(members, d)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        d = x.shape[-1]
        if self.weight.shape[0] == 1:  # the fused kernel with its affine part
            bias = None if self.bias is None else self.bias[0]
            return F.layer_norm(x, (d,), self.weight[0], bias)
        y = F.layer_norm(x, (d,)) * self.weight[:, None, :]
        return y if self.bias is None else y + self.bias[:, None, :]


EVAL_ROWS_SEED = 0x5EEDE7A10FED
"""Mixed into the run's seed for the learned position rows only evaluation reaches."""

ROW_BIAS_GAIN = 10.0
"""``abacus_bias`` multiplies its stored bias by this. AdamW moves a parameter by about lr per
step, so at lr 5e-4 a bias stored as is needs thousands of steps to reach the few units a
sharp preference takes: with gain 1 the 4000-step abacus_length sweep measured 82 % and 97 %
on longer operands, with 10 both seeds reached 100 % by step 2000
(search_spaces/abacus_length.yaml)."""


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, members: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.qkv = MemberLinear(members, cfg.d_model, 3 * cfg.d_model, cfg.bias)
        self.proj = MemberLinear(members, cfg.d_model, cfg.d_model, cfg.bias)
        if cfg.position == "abacus_bias":  # a bias per head and clipped index difference, (M,
            # heads x differences): 2-D like other biases, so weight decay leaves it alone
            n_biases = cfg.n_head * cfg.abacus_bias_buckets
            self.row_bias = nn.Parameter(torch.zeros(members, n_biases))

    def forward(
        self,
        x: Tensor,
        rope: tuple[Tensor, Tensor] | None,
        cache: KVCache,
        layer: int,
        T: int,
        dropout: tuple[float, ...],
        buckets: Tensor | None = None,
    ) -> Tensor:
        M, N, C = x.shape  # members, rows x tokens, channels
        B = M * N // T  # members folded into the batch: attention never mixes rows
        nh, hs = self.cfg.n_head, self.cfg.head_dim
        q, k, v = self.qkv(x).view(B, T, 3 * C).split(C, dim=2)
        q = q.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, nh, hs).transpose(1, 2)
        v = v.view(B, T, nh, hs).transpose(1, 2)
        if rope is not None:
            q, k = _apply_rope(q, *rope), _apply_rope(k, *rope)
        t_past = cache.length
        if self.cfg.log_length_attention:  # the query at position t sees t + 1 keys
            n_keys = torch.arange(t_past + 1, t_past + T + 1, device=x.device, dtype=q.dtype)
            q = q * n_keys.log()[:, None]
        k, v = cache.write(layer, k, v)
        rates = dropout if self.training else (0.0,)
        bias = None if buckets is None else self._row_bias(buckets, t_past, q.dtype)
        if len(set(rates)) > 1:  # members with different rates: SDPA takes one rate
            y = _attention_by_hand(q, k, v, t_past, rates, bias)
        elif bias is not None:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=rates[0])
        elif t_past == 0:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=rates[0], is_causal=True)
        elif T == 1:  # one new token attends to everything before it
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=rates[0])
        else:  # several new tokens after a cached prefix: causal mask shifted by the prefix
            mask = _causal_mask(T, t_past, x.device)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=rates[0])
        y = y.transpose(1, 2).contiguous().view(M, N, C)
        return member_dropout(self.proj(y), dropout, self.training)

    def _row_bias(self, buckets: Tensor, t_past: int, dtype: torch.dtype) -> Tensor:
        """Additive attention mask (B, heads, T, keys): each member's bias for the clipped
        index difference of query and key, -inf where the causal mask forbids."""
        B, T, S = buckets.shape
        M = self.row_bias.shape[0]
        table = ROW_BIAS_GAIN * self.row_bias.view(M, self.cfg.n_head, -1)
        table = table.repeat_interleave(B // M, dim=0)
        index = buckets.view(B, 1, T * S).expand(B, table.shape[1], T * S)
        bias = table.gather(2, index).view(B, -1, T, S)
        causal = _causal_mask(T, t_past, buckets.device)
        return bias.masked_fill(~causal, float("-inf")).to(dtype)


def _attention_by_hand(
    q: Tensor, k: Tensor, v: Tensor, t_past: int, rates: tuple[float, ...], bias: Tensor | None
) -> Tensor:
    """Causal attention after a cached prefix, with each member's dropout rate on its weights;
    ``bias`` (B, heads, T, keys), if given, already holds the causal mask."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if bias is None:
        mask = _causal_mask(q.shape[2], t_past, q.device)
        weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    else:
        weights = (scores + bias).softmax(dim=-1)
    return member_dropout(weights, rates, training=True) @ v


def _causal_mask(T: int, t_past: int, device: torch.device) -> Tensor:
    """(T, t_past + T) True where a new token may attend: every cached key and itself."""
    return torch.ones(T, t_past + T, dtype=torch.bool, device=device).tril(t_past)


def member_dropout(x: Tensor, rates: tuple[float, ...], training: bool) -> Tensor:
    """Dropout with rate ``rates[i]`` on member ``i``'s block of ``x`` (members lead dim 0)."""
    if not training or max(rates) == 0.0:
        return x
    if len(set(rates)) == 1:
        return F.dropout(x, rates[0], True)
    M = len(rates)
    keep = 1.0 - torch.tensor(rates, device=x.device, dtype=x.dtype)
    keep = keep.repeat_interleave(x.shape[0] // M).view(-1, *[1] * (x.dim() - 1))
    return x * torch.bernoulli(keep.expand_as(x)) / keep


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig, members: int) -> None:
        super().__init__()
        self.fc = MemberLinear(members, cfg.d_model, cfg.hidden, cfg.bias)
        self.proj = MemberLinear(members, cfg.hidden, cfg.d_model, cfg.bias)

    def forward(self, x: Tensor, dropout: tuple[float, ...]) -> Tensor:
        return member_dropout(self.proj(F.gelu(self.fc(x))), dropout, self.training)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, members: int) -> None:
        super().__init__()
        self.ln_1 = MemberLayerNorm(members, cfg.d_model, cfg.bias)
        self.attn = CausalSelfAttention(cfg, members)
        self.ln_2 = MemberLayerNorm(members, cfg.d_model, cfg.bias)
        self.mlp = MLP(cfg, members)

    def forward(self, x, rope, cache: KVCache, layer: int, T: int, dropout, buckets=None):
        x = x + self.attn(self.ln_1(x), rope, cache, layer, T, dropout, buckets)
        return x + self.mlp(self.ln_2(x), dropout)


class GPT(nn.Module):
    """Decoder over a fixed vocabulary; ``digit_ids`` marks the tokens Abacus positions count.

    ``members`` same-shape models live in one module (packed trials): every parameter has a
    leading member dimension, and the batch holds ``members`` equal blocks of rows, member 0's
    first. One member is the ordinary model; there is no other.
    """

    def __init__(
        self,
        cfg: ModelConfig,
        vocab_size: int,
        max_seq_len: int,
        digit_ids: tuple[int, ...] = (),
        members: int = 1,
        train_seq_len: int | None = None,
    ) -> None:
        super().__init__()
        self.cfg, self.vocab_size, self.max_seq_len = cfg, vocab_size, max_seq_len
        # learned positions past train_seq_len exist only for longer evaluation sets
        self.train_seq_len = min(train_seq_len or max_seq_len, max_seq_len)
        self.members = members
        # a tuple, not cfg.dropout: members of a pack may each have their own rate
        self.dropout_rates = (cfg.dropout,) * members
        M, d = members, cfg.d_model
        self.wte = MemberEmbedding(M, vocab_size, d)
        if cfg.position == "learned":
            self.wpe = MemberEmbedding(M, max_seq_len, d)
        elif cfg.position == "abacus":
            # index 0 is "not a digit"; digits use 1..abacus_max_k
            self.abacus = MemberEmbedding(M, cfg.abacus_max_k + 1, d)
        is_digit = torch.zeros(vocab_size, dtype=torch.bool)
        is_digit[list(digit_ids)] = True
        self.register_buffer("is_digit", is_digit, persistent=False)
        self.blocks = nn.ModuleList(Block(cfg, M) for _ in range(cfg.n_layer))
        self.ln_f = MemberLayerNorm(M, d, cfg.bias)
        # tied: the output projection reads wte's table (GPT-2)
        self.lm_head = None if cfg.tie_embeddings else MemberLinear(M, d, vocab_size, bias=False)
        self.apply(self._init_weights)
        # GPT-2: scale residual projections by 1/sqrt(2 * n_layer)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, cfg.init_std / math.sqrt(2 * cfg.n_layer))
        self._init_evaluation_positions()

    def _init_weights(self, module: nn.Module) -> None:
        if module is getattr(self, "wpe", None) and self.train_seq_len < self.max_seq_len:
            # only the rows training reaches, from the same stream as every other parameter
            nn.init.normal_(module.weight[:, : self.train_seq_len], 0.0, self.cfg.init_std)
        elif isinstance(module, MemberLinear | MemberEmbedding):
            nn.init.normal_(module.weight, 0.0, self.cfg.init_std)
        if isinstance(module, MemberLinear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def _init_evaluation_positions(self) -> None:
        """Draw the learned position rows only longer evaluation sets reach from a generator of
        their own, last: a model's initial weights then do not depend on what it is evaluated
        on, and the global stream (later: dropout) is left where training alone leaves it."""
        if self.cfg.position != "learned" or self.train_seq_len == self.max_seq_len:
            return
        extra = self.wpe.weight[:, self.train_seq_len :]
        if extra.is_meta:
            return
        # the run's seed, scrambled: seeded as is, these rows would repeat wte's first draws
        generator = torch.Generator().manual_seed(torch.initial_seed() ^ EVAL_ROWS_SEED)
        with torch.no_grad():
            drawn = torch.randn(extra.shape, generator=generator) * self.cfg.init_std
            extra.copy_(drawn)

    @classmethod
    def stack(cls, models: list[GPT]) -> GPT:
        """One packed module holding ``models`` (each of one member) as its members, in order.

        Each member keeps the initialisation its own seed gave it; one model is returned as is.
        """
        if len(models) == 1:
            return models[0]
        first = models[0]
        with torch.random.fork_rng(devices=[]):  # building must not move the members' RNG
            packed = cls(first.cfg, first.vocab_size, first.max_seq_len, members=len(models))
        packed.is_digit = first.is_digit.clone()
        packed.dropout_rates = tuple(m.cfg.dropout for m in models)
        with torch.no_grad():
            for name, p in packed.named_parameters():
                p.copy_(torch.cat([m.get_parameter(name) for m in models]))
        return packed.to(first.is_digit.device)

    def member(self, i: int) -> GPT:
        """Member ``i`` as a one-member model whose parameters are views of this one's."""
        if self.members == 1:
            return self
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            own = replace(self.cfg, dropout=self.dropout_rates[i])
            view = GPT(own, self.vocab_size, self.max_seq_len)
        view.is_digit = self.is_digit
        for name, p in self.named_parameters():
            owner, _, leaf = name.rpartition(".")
            setattr(view.get_submodule(owner), leaf, nn.Parameter(p.detach()[i : i + 1]))
        return view.train(self.training)

    def forward(
        self,
        idx: Tensor,
        cache: KVCache | None = None,
        abacus_offset: Tensor | None = None,
        reserve: int = 0,
    ) -> tuple[Tensor, KVCache]:
        """Logits (B, T, vocab) for tokens ``idx`` (B, T) following the cached prefix, if any.

        With several members, rows ``i*B/M .. (i+1)*B/M`` belong to member ``i``.
        ``abacus_offset`` (B,) shifts digit indices during training; evaluation passes ``None``.
        ``reserve`` preallocates cache room for that many tokens after ``idx`` (decoding).
        """
        B, T = idx.shape
        M, C = self.members, self.cfg.d_model
        cache = cache if cache is not None else KVCache(reserve=reserve)
        t_past = cache.length
        prev_run = cache.digit_run if cache.digit_run is not None else idx.new_zeros(B)
        x = self.wte(idx.view(M, B // M, T))  # (M, B/M, T, C)
        positions = torch.arange(t_past, t_past + T, device=idx.device)
        rope = None
        run = _digit_run_index(self.is_digit[idx], prev_run)
        if self.cfg.position == "learned":
            x = x + self.wpe(positions.expand(M, T))[:, None]
        elif self.cfg.position == "rope":
            rope = _rope_tables(positions, self.cfg.head_dim, self.cfg.rope_theta, x.dtype)
        elif self.cfg.position == "abacus":
            index = abacus_rows(run, abacus_offset)
            x = x + self.abacus(index.clamp(max=self.cfg.abacus_max_k).view(M, B // M, T))
        buckets = None
        if self.cfg.position == "abacus_bias":
            cache.rows = run if cache.rows is None else torch.cat([cache.rows, run], dim=1)
            buckets = index_buckets(run, cache.rows, self.cfg.abacus_bias_reach)
        x = member_dropout(x, self.dropout_rates, self.training).view(M, B // M * T, C)
        embedded = x
        for layer, block in enumerate(self.blocks):
            if layer > 0 and self.cfg.input_injection:
                x = x + embedded
            x = block(x, rope, cache, layer, T, self.dropout_rates, buckets)
        cache.length += T
        cache.digit_run = run[:, -1]
        x = self.ln_f(x)
        head = self.wte.weight if self.lm_head is None else self.lm_head.weight
        return torch.bmm(x, head.transpose(1, 2)).view(B, T, self.vocab_size), cache


def abacus_rows(run: Tensor, offset: Tensor | None) -> Tensor:
    """Row of the Abacus table for each token: its digit index (``_digit_run_index``) shifted
    by the problem's training offset (B,); evaluation passes ``None``.

    Non-digit tokens (index 0) shift too. The token that predicts an answer digit then sits
    one row below the operand digits that digit needs, at every offset, and that holds for
    the ``=`` before the ones digit as well. Left at row 0, ``=`` could not find the ones
    digits by row, only by counting tokens, which breaks on operands longer than trained: the
    ones digit of 10-digit sums was right 34 % of the time while places 4-9 were 100 %
    (search_spaces/abacus_length.yaml).
    """
    return run if offset is None else run + offset[:, None]


def index_buckets(queries: Tensor, keys: Tensor, reach: int) -> Tensor:
    """Bias bucket of each query and key for ``abacus_bias``: (B, T) and (B, S) digit indices
    -> (B, T, S) in 0..2*reach, the index difference clipped at ``reach``.

    Clipped, a problem longer than trained meets only differences training did: the rotary
    angles of the same indices (a probe, not kept) fit 8-digit sums but scored 34 % and 6 % on
    9-12 digits, failing from the ones digit on, where this scores 100 % on both seeds
    (search_spaces/abacus_length.yaml).
    """
    return (queries[:, :, None] - keys[:, None, :]).clamp(-reach, reach) + reach


def _digit_run_index(is_digit: Tensor, prev_run: Tensor) -> Tensor:
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


def _rope_tables(positions: Tensor, head_dim: int, theta: float, dtype) -> tuple[Tensor, Tensor]:
    """cos and sin of shape (T, head_dim), frequencies repeated for both halves."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=positions.device) / head_dim)
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin

"""The one shared model: a GPT-style decoder (pre-LayerNorm, causal attention, MLP).

Read it as nanoGPT's model with two additions:

- Packed trials: one module holds several same-shape models ("members", ``M``), every layer
  from arith.model.members: each parameter and activation leads with the member dimension, and
  attention folds the members into the batch (HFTA, Wang et al. 2021). A single model is the
  pack of one member; with ``M = 1`` every shape below is the plain transformer's with a
  leading 1.
- Position schemes (``model.position``): learned, rotary, Abacus and the Abacus bias, in
  arith.model.positions.

The attention itself (the fused kernel or explicit matmuls, the causal mask) is one function,
arith.model.attention.attention. No state is kept on the module between calls: the KV cache
(arith.model.kv_cache) is passed in and returned. Parameter counts and FLOPs are in
arith.training.cost.

Shapes: M members, b rows per member, B = M * b rows in all, T tokens, C = d_model channels,
nh heads of hs = C / nh channels.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import replace
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from arith.model import legacy, positions
from arith.model.attention import attention
from arith.model.kv_cache import Cache, KVCache
from arith.model.members import MemberEmbedding, MemberLayerNorm, MemberLinear, member_dropout
from arith.model.modelconf import ModelConfig

EVAL_POSITIONS_SEED = 0x5EEDE7A10FED
"""Mixed into the run's seed for the learned positions only evaluation reaches."""


WINDOW_MIN_KEYS = 256
"""Keys from which a windowed model's evaluation attends over each query's seen keys alone:
below it the dense path is cheaper (the gathers cost more than the masked keys save; measured
on one CPU thread, a decoding step of 256 rows at 140 keys took 11 ms gathered and 8 ms dense),
past it the gathered path's cost stays flat (a 200-digit prompt read 3.5x faster)."""


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, members: int) -> None:
        super().__init__()
        self.cfg = cfg
        if cfg.position == "abacus_bias":  # first: the parameter order checkpoints hold
            self.abacus_bias = positions.AbacusBias(
                members,
                cfg.n_head,
                cfg.n_index_differences,
                cfg.abacus_bias_window,
                cfg.head_dim if cfg.abacus_bias_values else 0,
            )
            self.register_load_state_dict_pre_hook(legacy.rename_old_abacus_bias)
        self.qkv = MemberLinear(members, cfg.d_model, 3 * cfg.d_model, cfg.bias)
        self.proj = MemberLinear(members, cfg.d_model, cfg.d_model, cfg.bias)

    def forward(
        self,
        x: Tensor,
        rope: Tensor | None,
        cache: Cache,
        layer: int,
        dropout: tuple[float, ...],
        differences: Tensor | None = None,
    ) -> Tensor:
        """x (M, b, T, C) -> (M, b, T, C); ``differences`` (B, T, S) for ``abacus_bias``."""
        *lead, T, C = x.shape  # lead: (M, b); a single model has M = 1
        nh, hs = self.cfg.n_head, self.cfg.head_dim
        # the members fold into the batch, B = M * b rows: attention never mixes rows
        q, k, v = self.qkv(x).view(-1, T, 3 * C).split(C, dim=2)
        q = q.view(-1, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(-1, T, nh, hs).transpose(1, 2)
        v = v.view(-1, T, nh, hs).transpose(1, 2)
        if rope is not None:
            q, k = positions.apply_rope(q, rope), positions.apply_rope(k, rope)
        if self.cfg.log_length_attention:  # the query at position t sees t + 1 keys
            # in fp32 whatever autocast does: bf16 holds integers exactly only to 256 (257
            # keys read as 256) and its log to 3 significant digits
            n_keys = cache.positions(T, x.device).float() + 1
            q = (q.float() * n_keys.log()[:, None]).to(q.dtype)
        k, v = cache.write(layer, k, v)  # (B, nh, S, hs): the cached keys, new included
        visible = cache.visible(T)  # None: the causal mask (a static cache's: its filled keys)
        if differences is not None and self._reads_window_only(visible, k.shape[2]):
            y = self._window_attention(q, k, v, differences)  # (B, nh, T, hs)
        else:
            bias, relative_values = self._abacus_reads(differences)
            rates = dropout if self.training else (0.0,)
            y = attention(q, k, v, rates, bias, relative_values, visible)
        y = y.transpose(1, 2).reshape(*lead, T, C)  # heads side by side again
        return member_dropout(self.proj(y), dropout, self.training)

    def _abacus_reads(self, differences: Tensor | None) -> tuple[Tensor | None, Callable | None]:
        """What attention adds for ``abacus_bias`` at ``differences`` (B, T, S): the bias (B, nh,
        T, S) and, with ``abacus_bias_values``, the relative values' reader; (None, None) for
        other positions."""
        if differences is None:
            return None, None
        values = self.abacus_bias.values is not None
        read = partial(self.abacus_bias.read_values, differences=differences) if values else None
        return self.abacus_bias(differences), read

    def _reads_window_only(self, visible: Tensor | None, S: int) -> bool:
        """Whether attention runs over each query's windowed keys alone (``_window_attention``):
        evaluation of a windowed ``abacus_bias`` model through the dynamic cache (``visible``
        None), from ``WINDOW_MIN_KEYS`` keys on. Training keeps the dense path (short
        sequences, and its gradients); a static cache's fixed shapes (a CUDA graph) do too."""
        if not self.cfg.abacus_bias_window or self.training or visible is not None:
            return False
        return S >= WINDOW_MIN_KEYS

    def _window_attention(self, q: Tensor, k: Tensor, v: Tensor, differences: Tensor) -> Tensor:
        """Attention (B, nh, T, hs) of each query over the keys its window sees
        (``positions.window_keys``): the dense path's result, at a cost that does not grow with
        the sequence."""
        B, nh, T, hs = q.shape
        differences, k, v = positions.window_keys(differences, k, v, k.shape[2] - T)
        q = q.transpose(1, 2).reshape(B * T, nh, 1, hs)  # each query its own row
        y = attention(q, k, v, (0.0,), *self._abacus_reads(differences))
        return y.view(B, T, nh, hs).transpose(1, 2)


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

    def forward(self, x, rope, cache: Cache, layer: int, dropout, differences=None) -> Tensor:
        """x (M, b, T, C) -> (M, b, T, C), as CausalSelfAttention.forward takes its arguments."""
        x = x + self.attn(self.ln_1(x), rope, cache, layer, dropout, differences)
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
            # only the positions training reaches, from the same stream as every other parameter
            nn.init.normal_(module.weight[:, : self.train_seq_len], 0.0, self.cfg.init_std)
        elif isinstance(module, MemberLinear | MemberEmbedding):
            nn.init.normal_(module.weight, 0.0, self.cfg.init_std)
        if isinstance(module, MemberLinear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def _init_evaluation_positions(self) -> None:
        """Draw the learned positions only longer evaluation sets reach from a generator of
        their own, last: a model's initial weights then do not depend on what it is evaluated
        on, and the global stream (later: dropout) is left where training alone leaves it."""
        if self.cfg.position != "learned" or self.train_seq_len == self.max_seq_len:
            return
        extra = self.wpe.weight[:, self.train_seq_len :]
        if extra.is_meta:
            return
        # the run's seed, scrambled: seeded as is, these positions would repeat wte's first draws
        generator = torch.Generator().manual_seed(torch.initial_seed() ^ EVAL_POSITIONS_SEED)
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

    def member_views(self) -> list[GPT]:
        """Every member as a one-member model whose parameters are views of this one's: one
        shell built on the meta device (cheaper than initialising), copied per member."""
        if self.members == 1:
            return [self]
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            shell = GPT(self.cfg, self.vocab_size, self.max_seq_len)
        views = []
        for i, rate in enumerate(self.dropout_rates):
            view = copy.deepcopy(shell)
            view.cfg, view.dropout_rates = replace(self.cfg, dropout=rate), (rate,)
            view.is_digit = self.is_digit
            for name, p in self.named_parameters():
                owner, _, leaf = name.rpartition(".")
                setattr(view.get_submodule(owner), leaf, nn.Parameter(p.detach()[i : i + 1]))
            views.append(view.train(self.training))
        return views

    def forward(
        self,
        idx: Tensor,
        cache: Cache | None = None,
        abacus_offset: Tensor | None = None,
        reserve: int = 0,
    ) -> tuple[Tensor, Cache]:
        """Logits (B, T, vocab) for tokens ``idx`` (B, T) following the cached prefix, if any.

        With several members, rows ``i*B/M .. (i+1)*B/M`` belong to member ``i``.
        ``abacus_offset`` (B,) shifts digit indices during training; evaluation passes ``None``.
        ``reserve`` preallocates cache room for that many tokens after ``idx`` (decoding).
        """
        B, T = idx.shape
        x, cache = self._last_hidden(idx, cache, abacus_offset, reserve)
        return self._head(x).view(B, T, self.vocab_size), cache

    def picked_logits(
        self, idx: Tensor, picks: Tensor, abacus_offset: Tensor | None = None
    ) -> Tensor:
        """Training's logits at the tokens its loss keeps (the answer's): ``picks`` (M, n)
        indexes each member's b * T tokens of ``idx`` (B, T) -> (M, n, vocab). The head's
        matmul, the largest of a small model, runs for those tokens only."""
        x, _ = self._last_hidden(idx, None, abacus_offset, 0)
        return self._head(x.gather(1, picks[..., None].expand(-1, -1, x.shape[-1])))

    def _last_hidden(
        self,
        idx: Tensor,
        cache: Cache | None,
        abacus_offset: Tensor | None,
        reserve: int,
    ) -> tuple[Tensor, Cache]:
        """The last block's output, (M, b * T, C), and the cache it extended."""
        B, T = idx.shape
        M = self.members
        cache = cache if cache is not None else KVCache(reserve=reserve)
        x = self.wte(idx.view(M, B // M, T))  # (M, b, T, C)
        x, rope, differences = self._positions(x, idx, cache, abacus_offset)
        x = member_dropout(x, self.dropout_rates, self.training)
        embedded = x
        for layer, block in enumerate(self.blocks):
            if layer > 0 and self.cfg.input_injection:
                x = x + embedded
            x = block(x, rope, cache, layer, self.dropout_rates, differences)
        cache.advance(T)
        return x.flatten(1, 2), cache

    def _head(self, x: Tensor) -> Tensor:
        """(M, n, C) -> logits (M, n, vocab): the final LayerNorm and the output projection."""
        x = self.ln_f(x)
        head = self.wte.weight if self.lm_head is None else self.lm_head.weight  # (M, vocab, C)
        return torch.bmm(x, head.transpose(1, 2))

    def _positions(self, x: Tensor, idx: Tensor, cache: Cache, abacus_offset: Tensor | None):
        """The position signal of ``model.position`` (arith.model.positions), worked out only for
        that scheme: ``x`` (M, b, T, C) with position embeddings added, the rotary tables, the
        ``abacus_bias`` differences."""
        cfg, M, T = self.cfg, self.members, idx.shape[1]
        rope = differences = None
        if cfg.position in ("learned", "rope"):
            token_positions = cache.positions(T, idx.device)
        if cfg.position == "learned":
            x = x + self.wpe(token_positions.expand(M, T))[:, None]  # (M, 1, T, C)
        elif cfg.position == "rope":
            rope = positions.rope_tables(token_positions, cfg.head_dim, cfg.rope_theta, x.dtype)
        elif cfg.position == "abacus":
            run, _ = positions.continue_digit_runs(self.is_digit[idx], cache)  # (B, T)
            index = positions.abacus_index(run, abacus_offset).clamp(max=cfg.abacus_max_k)
            x = x + self.abacus(index.view(M, -1, T))  # (M, b, T, C)
        elif cfg.position == "abacus_bias":
            run, every = positions.continue_digit_runs(self.is_digit[idx], cache, keep_all=True)
            differences = positions.clipped_differences(
                run, every, cfg.abacus_bias_reach, cfg.abacus_bias_window
            )  # (B, T, S)
        return x, rope, differences

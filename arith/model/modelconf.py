"""``model:``, the decoder's shape (``ModelConfig``), apart from the torch modules that build it
(arith.model.gpt) so that reading and checking a config imports no torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from arith.errors import require


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
    abacus_bias_window: bool = False
    """``abacus_bias``: keys whose index differs by more than the reach are not seen at all, so
    no query meets more keys on longer operands than in training (docs/notes/abacus_length.md)."""
    abacus_bias_values: bool = False
    """``abacus_bias``: each head also adds a learned vector per index difference to what it
    reads (Shaw et al. 2018's relative values), so a query can tell which differences it met
    even where the digits it reads are all alike (4444 + 1: does the operand end here?)."""
    log_length_attention: bool = False
    """Scale each query's attention logits by log(number of keys it sees) (Chiang & Cholak
    2022; Nakanishi 2025, "Scalable-Softmax"), so attention to one key does not fade as the
    sequence grows: without it a model dilutes on longer inputs than trained."""
    input_injection: bool = False
    """Add the embedded input (tokens and positions) to every block's input, not only the
    first's (McLeish et al. 2024 report fewer length-generalisation errors with Abacus
    positions; see docs/notes/abacus_length.md)."""
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
        require(
            not self.abacus_bias_values or self.position == "abacus_bias",
            "model.abacus_bias_values",
            f"needs model.position 'abacus_bias', but the position is {self.position!r}",
        )

    @property
    def hidden(self) -> int:
        return self.d_ff if self.d_ff is not None else 4 * self.d_model

    @property
    def n_index_differences(self) -> int:
        """``abacus_bias`` entries per head: one per clipped digit index difference,
        -reach..reach."""
        return 2 * self.abacus_bias_reach + 1

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

"""The model: the decoder (``gpt``), its position schemes, KV cache and packed-member layers.

torch only; imports no other stage. ``from arith.model import GPT, ModelConfig`` reads as it
always has.
"""

from arith.model.gpt import GPT, CausalSelfAttention, ModelConfig

__all__ = ["GPT", "CausalSelfAttention", "ModelConfig"]

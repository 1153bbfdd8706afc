"""The model: the decoder (``gpt``), its position schemes, KV cache and packed-member layers.

torch only; imports no other stage. ``from arith.model import GPT, ModelConfig`` reads as it
always has, and loads the torch modules only then: a config's ``model:`` block
(``modelconf``) is read without torch.
"""

from __future__ import annotations

import importlib

__all__ = ["GPT", "CausalSelfAttention", "ModelConfig"]


def __getattr__(name: str):
    if name == "ModelConfig":
        return importlib.import_module("arith.model.modelconf").ModelConfig
    if name in __all__:
        return getattr(importlib.import_module("arith.model.gpt"), name)
    raise AttributeError(f"module 'arith.model' has no attribute {name!r}")

"""Checkpoints written by older versions of arith, read as today's: every compatibility path
of the model lives here, so the modules that define it read as they are now.

- 0.1.0 before the Abacus bias became a module (``AbacusBias``): the table was the attention
  layer's ``row_bias``, stored divided by a fixed gain.
"""

from __future__ import annotations

OLD_ROW_BIAS_GAIN = 10.0
"""What checkpoints that name the table ``row_bias`` multiplied it by in the forward pass (a
hidden learning-rate multiplier, now ``optim.abacus_bias_lr_mult``)."""


def rename_old_abacus_bias(module, state_dict, prefix, *_) -> None:
    """A load hook of the attention layer: checkpoints saved before ``AbacusBias`` was a module
    of its own name its table ``<attn>.row_bias`` and stored it divided by
    ``OLD_ROW_BIAS_GAIN``; load them as the bias itself under the current name."""
    old = prefix + "row_bias"
    if old in state_dict:
        state_dict[prefix + "abacus_bias.table"] = OLD_ROW_BIAS_GAIN * state_dict.pop(old)

"""Rotary embeddings: the rotation matrices of ``rope_tables`` against the textbook formula."""

from __future__ import annotations

import pytest
import torch

from arith.model.positions import apply_rope, rope_tables


def _rope_by_halves(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """The textbook rotary embedding (Su et al. 2021, halves layout), elementwise, in fp32."""
    hs = x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, hs, 2) / hs)
    angles = positions.float()[:, None] * inv_freq[None, :]
    both_halves = torch.cat([angles, angles], -1)
    cos, sin = both_halves.cos(), both_halves.sin()
    x1, x2 = x.float().chunk(2, dim=-1)
    return x.float() * cos + torch.cat([-x2, x1], dim=-1) * sin


@pytest.mark.parametrize("hs", [8, 32])
def test_rope_as_rotation_matrices_is_the_elementwise_rotation(hs):
    torch.manual_seed(0)
    positions = torch.arange(5, 14)  # after a cached prefix, as decoding meets them
    x = torch.randn(3, 4, len(positions), hs)
    rotations = rope_tables(positions, hs, 100.0, torch.float32)
    expected = _rope_by_halves(x, positions, 100.0)
    torch.testing.assert_close(apply_rope(x, rotations), expected, rtol=0, atol=1e-5)
    # under bf16 autocast the rotation stays in fp32: what the elementwise form promoted to
    with torch.autocast("cpu", dtype=torch.bfloat16):
        rotated = apply_rope(x.bfloat16(), rotations)
    assert rotated.dtype == torch.float32
    torch.testing.assert_close(
        rotated, _rope_by_halves(x.bfloat16(), positions, 100.0), atol=1e-5, rtol=0
    )
    # what makes it rotary: a query and a key meet by their distance, not their positions
    q, k = torch.randn(hs), torch.randn(hs)
    every = rotations.shape[0]

    def at(v: torch.Tensor, p: int) -> torch.Tensor:
        return apply_rope(v.view(1, 1, 1, hs).expand(1, 1, every, hs), rotations)[0, 0, p]

    torch.testing.assert_close(at(q, 4) @ at(k, 1), at(q, 7) @ at(k, 4), atol=1e-4, rtol=0)

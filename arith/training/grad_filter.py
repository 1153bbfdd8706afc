"""Grokfast's EMA gradient filter (Lee et al. 2024, "Grokfast: Accelerated Grokking by
Amplifying Slow Gradients"): each gradient gets ``lamb`` times its exponential moving average
added, which amplifies the slow component of the gradients that generalisation follows.

Per parameter element, after backward and before clipping and the optimiser step (the order of
the paper's code)::

    ema = alpha * ema + (1 - alpha) * grad
    grad = grad + lamb * ema

As in the paper's code the average starts at the first gradient (after one step ema == grad,
so the first step's gradient is (1 + lamb) * grad).
"""

from __future__ import annotations

import torch

from arith.training.transfers import host_to_device


class EmaGradFilter:
    """The filter over a packed model's parameters, stacked along the member dimension: each
    member its own ``alpha`` and ``lamb`` (``optim.grad_filter_alpha`` / ``_lamb``); a member
    whose ``optim.grad_filter`` is ``"none"`` keeps its gradients as they are. The averages
    live on the parameters' device, and a step reads nothing back from it."""

    def __init__(self, params: list[torch.Tensor], alphas: list[float], lambs: list[float | None]):
        """``lambs[i]`` is ``None`` for a member that does not filter."""
        self.params, self.alphas, self.lambs = params, alphas, lambs
        self.ema = [torch.zeros_like(p) for p in params]
        self.n_members = len(alphas)
        self.filtering = [lamb is not None for lamb in lambs]
        # a pack's lamb per member, put on the device once (0: its gradients unchanged)
        lamb_vector = torch.tensor([lamb or 0.0 for lamb in lambs])
        self.lamb_vector = host_to_device(lamb_vector, params[0].device)

    def weights(self, members: list[int], step_counts: list[int]) -> list[float]:
        """Each member's weight of the new gradient in its average: 1 - alpha, 1 on its first
        step (``step_counts[i]`` 0: the average starts at the gradient), 0 where it does not
        filter or is not among ``members`` (its average kept)."""
        weights = [0.0] * self.n_members
        for i in members:
            if self.filtering[i]:
                weights[i] = 1.0 - self.alphas[i] if step_counts[i] else 1.0
        return weights

    @torch.no_grad()
    def apply(self, members: list[int], step_counts: list[int]) -> None:
        """Filter the listed members' gradients in place; ``step_counts``: each member's
        optimiser steps so far (0: its first step, where the average starts at the gradient)."""
        weights = self.weights(members, step_counts)
        if self.n_members == 1:
            if weights[0]:
                self._apply_one(weights[0], self.lambs[0])
            return
        self.apply_weights(host_to_device(torch.tensor(weights), self.params[0].device))

    @torch.no_grad()
    def apply_weights(self, weight: torch.Tensor) -> None:
        """Filter every member's gradients with ``weight`` (M,) on the device (``weights``):
        the tensors' arithmetic alone, nothing read on the host."""
        for p, ema in zip(self.params, self.ema, strict=True):
            if p.grad is None:
                continue
            shape = (self.n_members, *([1] * (p.dim() - 1)))
            w = weight.view(shape)
            ema.copy_(torch.where(w > 0, ema.lerp(p.grad, w), ema))
            p.grad.add_(ema * self.lamb_vector.view(shape))

    def _apply_one(self, weight: float, lamb: float) -> None:
        """One model: the settings are Python numbers, applied in place per parameter (torch's
        public ops: its fused ``_foreach`` kernels are private names)."""
        for p, ema in zip(self.params, self.ema, strict=True):
            if p.grad is not None:
                ema.lerp_(p.grad, weight)
                p.grad.add_(ema, alpha=lamb)

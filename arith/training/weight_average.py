"""An exponential moving average of the weights (``optim.weight_ema``), which evaluation, early
stopping and the saved model read in place of the weights themselves.

Polyak-Ruppert averaging in its exponential form (the ``ModelEmaV2`` of timm, the EMA of many
reference trainers): after every optimiser step ::

    average = decay * average + (1 - decay) * weights

The average starts at zero and is read divided by ``1 - decay ** steps``, Adam's bias
correction, so that early evaluations are not pulled towards zero or towards the
initialisation. A high learning rate keeps the weights moving across a valley's floor; their
average sits nearer its middle, so it reaches the exact match that a decaying rate buys
hundreds of steps sooner (docs/notes/recipe_addition.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from arith.training.transfers import host_to_device


class WeightAverage:
    """The average over a packed model's parameters, stacked along the member dimension: each
    member its own decay (``None``: a decay of 0, its average the weights themselves). The
    averages live on the parameters' device; a step reads nothing back from it."""

    def __init__(self, params: list[torch.Tensor], decays: list[float | None]):
        self.params = params
        self.decays = [0.0 if d is None else d for d in decays]
        self.average = [torch.zeros_like(p) for p in params]

    def weights(self, members: list[int]) -> list[float]:
        """Each member's weight of its new weights in its average: 1 - decay for the listed
        members, 0 (the average kept) for the others."""
        chosen = set(members)
        return [1.0 - d if i in chosen else 0.0 for i, d in enumerate(self.decays)]

    @torch.no_grad()
    def update(self, members: list[int]) -> None:
        """Fold the listed members' weights after their step into their averages."""
        if len(self.decays) == 1:
            if members:
                for average, p in zip(self.average, self.params, strict=True):
                    average.lerp_(p, 1.0 - self.decays[0])
            return
        # copied without a wait, as Grokfast's filter copies its weights (EmaGradFilter.apply)
        self.update_with(host_to_device(torch.tensor(self.weights(members)), self.params[0].device))

    @torch.no_grad()
    def update_with(self, weight: torch.Tensor) -> None:
        """``update`` with each member's weight a vector on the device (a CUDA graph replays
        it with new values)."""
        for average, p in zip(self.average, self.params, strict=True):
            average.lerp_(p, weight.view(-1, *([1] * (p.dim() - 1))).to(p.dtype))

    @contextlib.contextmanager
    def swapped_in(self, step_counts: list[int]) -> Iterator[None]:
        """The averaged weights in the parameters' place (bias-corrected at each member's
        ``step_counts``), and the weights back afterwards, whatever the block changed; a member
        that has not stepped yet keeps its weights."""
        with torch.no_grad():
            kept = [p.detach().clone() for p in self.params]
            # 0 marks a member that has not stepped (optim.weight_ema is < 1: no division by 0)
            scale = [
                1.0 / (1.0 - d**n) if n > 0 else 0.0
                for d, n in zip(self.decays, step_counts, strict=True)
            ]
            scale_vector = torch.tensor(scale, device=self.params[0].device)
            stepped = scale_vector > 0
            for average, p in zip(self.average, self.params, strict=True):
                shape = (-1, *([1] * (p.dim() - 1)))
                corrected = average * scale_vector.view(shape).to(p.dtype)
                p.copy_(torch.where(stepped.view(shape), corrected, p))
        try:
            yield
        finally:
            with torch.no_grad():
                for p, weights in zip(self.params, kept, strict=True):
                    p.copy_(weights)

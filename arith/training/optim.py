"""AdamW over packed members, with the learning-rate schedule of arith.training.optimconf (linear
warmup, then cosine, linear or constant); optionally Grokfast's gradient filter before it
(arith.training.grad_filter) and a moving average of the weights after it
(arith.training.weight_average)."""

from __future__ import annotations

import contextlib
import math

import torch
from torch import nn
from torch.optim.adamw import adamw

from arith.training.grad_filter import EmaGradFilter
from arith.training.optimconf import OptimConfig, lr_factor
from arith.training.transfers import host_to_device
from arith.training.weight_average import WeightAverage

ABACUS_BIAS = "abacus_bias.table"
"""Name ending of the ``abacus_bias`` parameters (arith.model.positions.AbacusBias)."""

# The rows of a step's settings (``PackedAdamW.step_settings``), one column per member: the
# AdamW coefficients at the learning rate and at abacus_bias_lr_mult times it, 1 where the
# member updates, the weight of the gradient in Grokfast's average (0: the average kept), the
# weight of the new weights in their moving average (0: the average kept).
PLAIN, FASTER, ACTIVE, FILTER_WEIGHT, AVERAGE_WEIGHT = slice(0, 6), slice(6, 12), 12, 13, 14
SETTINGS_ROWS = 15


class PackedAdamW:
    """AdamW over a packed model: each member its own lr, schedule, betas, eps, weight decay,
    gradient clipping and step count, over parameters stacked along dimension 0.

    torch's AdamW takes one learning rate per parameter group, so a member cannot have its own
    on a stacked tensor. One model steps through torch's fused AdamW kernel, exactly
    ``torch.optim.AdamW(fused=True)`` with a ``LambdaLR`` of ``lr_factor``; a pack does the
    kernel's arithmetic on whole stacked tensors, each member's settings a vector along the
    member dimension (equal to its run alone up to rounding). Weight decay
    (Loshchilov & Hutter 2019) applies to matrices (embeddings included: grokking, Power et al.
    2022, depends on it), not to biases or norms. A member marked inactive does not update.
    The ``abacus_bias`` table steps at ``abacus_bias_lr_mult`` times the learning rate.
    ``filter_grads`` applies Grokfast's gradient filter (``grad_filter``), whose averages are
    part of the state that a checkpoint keeps.
    """

    def __init__(self, model: nn.Module, configs: list[OptimConfig], total_steps: list[int]):
        self.configs, self.total_steps = list(configs), list(total_steps)
        named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        # a matrix is (members, rows, cols); biases and norms are (members, d)
        self.decay = [p for _, p in named if p.dim() >= 3]
        self.no_decay = [p for _, p in named if p.dim() < 3]
        self.params = self.decay + self.no_decay
        # which of params step at abacus_bias_lr_mult times the learning rate
        faster = {id(p) for name, p in named if name.endswith(ABACUS_BIAS)}
        self.faster = [id(p) in faster for p in self.params]
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]
        device = self.params[0].device
        # fused kernels read the step count from a float tensor on the parameters' device; the
        # schedule reads a Python copy, so no step waits on the device (.item() syncs a GPU)
        self.steps = [torch.zeros((), device=device) for _ in self.configs]
        self.step_counts = [0 for _ in self.configs]
        self.fused = device.type in ("cpu", "cuda")
        # each member's clip limit, put on the device once: a copy at every step would wait
        limits = [math.inf if c.grad_clip is None else c.grad_clip for c in self.configs]
        self.clip_limits = host_to_device(torch.tensor(limits), device)
        self.grad_filter = None  # Grokfast's filter, where any member has one
        if any(c.grad_filter == "ema" for c in self.configs):
            alphas = [c.grad_filter_alpha for c in self.configs]
            lambs = [c.grad_filter_lamb if c.grad_filter == "ema" else None for c in self.configs]
            self.grad_filter = EmaGradFilter(self.params, alphas, lambs)
        self.weight_average = None  # the weights' moving average, where any member keeps one
        if any(c.weight_ema is not None for c in self.configs):
            decays = [c.weight_ema for c in self.configs]
            self.weight_average = WeightAverage(self.params, decays)

    def lr(self, member: int) -> float:
        """Learning rate of ``member``'s next step (its schedule at its own step count)."""
        cfg = self.configs[member]
        return cfg.lr * lr_factor(cfg, self.step_counts[member], self.total_steps[member])

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def filter_grads(self, members: list[int]) -> None:
        """The members' gradients through their ``grad_filter`` (before clipping, as Grokfast's
        code orders it); unchanged where none."""
        if self.grad_filter is not None:
            self.grad_filter.apply(members, self.step_counts)

    @torch.no_grad()
    def clip_grad_norms(self, members: list[int]) -> None:
        """Scale each member's gradients to its ``grad_clip`` global norm, as
        ``torch.nn.utils.clip_grad_norm_`` does for one model."""
        if all(self.configs[i].grad_clip is None for i in members):
            return
        grads = [p.grad for p in self.params if p.grad is not None]
        per_tensor = torch.stack([g.flatten(1).norm(dim=1) for g in grads])  # (tensors, M)
        total = per_tensor.norm(dim=0)  # (M,)
        coef = (self.clip_limits / (total + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.view(-1, *([1] * (g.dim() - 1))))

    @torch.no_grad()
    def step(self, members: list[int]) -> None:
        """One AdamW step for the listed members; the others keep their parameters and state."""
        if len(self.configs) > 1:
            self._step_stacked(members)
            return
        n_decay = len(self.decay)
        for i in members:
            cfg = self.configs[i]
            lr = self.lr(i)
            self.steps[i] += 1
            self.step_counts[i] += 1
            for lo, hi, decay in ((0, n_decay, cfg.weight_decay), (n_decay, None, 0.0)):
                chosen = [
                    j for j in range(lo, hi or len(self.params)) if self.params[j].grad is not None
                ]
                plain = [j for j in chosen if not self.faster[j]]
                faster = [j for j in chosen if self.faster[j]]
                if plain:
                    self._update(i, plain, lr, decay, cfg.eps)
                if faster:
                    # the step of a table stored divided by mult and multiplied back in the
                    # forward pass, which learns mult times faster: decay (decoupled, scaled by
                    # lr) and eps (which meets gradients mult times larger there) divided by mult
                    mult = cfg.abacus_bias_lr_mult
                    self._update(i, faster, lr * mult, decay / mult, cfg.eps / mult)
        if self.weight_average is not None:
            self.weight_average.update(members)

    def averaged(self) -> contextlib.AbstractContextManager:
        """The members' averaged weights in place of their weights for the block
        (``optim.weight_ema``), the weights back after it; nothing changes without one."""
        if self.weight_average is None:
            return contextlib.nullcontext()
        return self.weight_average.swapped_in(self.step_counts)

    def _step_stacked(self, members: list[int]) -> None:
        """All members at once (``step_with``), the settings built on the host and copied
        without a wait (``host_to_device``)."""
        self.step_with(host_to_device(self.step_settings(members), self.params[0].device))

    def step_settings(self, members: list[int]) -> torch.Tensor:
        """(SETTINGS_ROWS, M) on the host: what the next step of the listed members multiplies
        by (``_member_coefficients`` at their learning rate and at the scaled one of
        ``abacus_bias_lr_mult``), which members update, the weight of Grokfast's average and
        that of the weights' average; counts the step. Only Python numbers go in: nothing is
        read from the device."""
        n, chosen = len(self.configs), set(members)
        weights = [0.0] * n
        if self.grad_filter is not None:  # from the counts before this step (its first: 1)
            weights = self.grad_filter.weights(members, self.step_counts)
        lrs = [self.lr(i) if i in chosen else 0.0 for i in range(n)]
        for i in members:
            self.step_counts[i] += 1
        plain = _member_coefficients(self.configs, lrs, self.step_counts, 1.0)
        mults = [c.abacus_bias_lr_mult for c in self.configs]
        faster = _member_coefficients(self.configs, lrs, self.step_counts, mults)
        averaged = [0.0] * n
        if self.weight_average is not None:
            averaged = self.weight_average.weights(members)
        active = [float(i in chosen) for i in range(n)]
        return torch.tensor([*plain, *faster, active, weights, averaged])

    @torch.no_grad()
    def step_with(self, settings: torch.Tensor) -> None:
        """One step of every member ``settings`` (``step_settings``, on the device) marks
        active, one pass over each stacked parameter: the fused kernel's arithmetic with each
        member's settings a vector along the member dimension, so a step's tensor work does not
        grow with the number of members, and nothing of it is read on the host (a CUDA graph
        replays it with new settings)."""
        n = len(self.configs)
        active = settings[ACTIVE] > 0
        for j, p in enumerate(self.params):
            if p.grad is None:
                continue
            c = settings[FASTER if self.faster[j] else PLAIN]
            c = c.view(6, n, *([1] * (p.dim() - 1)))
            decay = c[0] if j < len(self.decay) else 1.0
            avg = self.exp_avg[j].lerp(p.grad, c[1])  # 1 - beta1
            avg_sq = self.exp_avg_sq[j] * c[2] + p.grad * p.grad * (1 - c[2])  # beta2
            denom = avg_sq.sqrt() / c[3] + c[4]  # sqrt of beta2's bias correction, eps
            new = p * decay - c[5] * avg / denom  # lr over beta1's bias correction
            keep = active.view(n, *([1] * (p.dim() - 1)))
            p.copy_(torch.where(keep, new, p))
            self.exp_avg[j].copy_(torch.where(keep, avg, self.exp_avg[j]))
            self.exp_avg_sq[j].copy_(torch.where(keep, avg_sq, self.exp_avg_sq[j]))
        if self.weight_average is not None:
            self.weight_average.update_with(settings[AVERAGE_WEIGHT])

    def filter_grads_with(self, settings: torch.Tensor) -> None:
        """``filter_grads`` with the weights of ``settings`` (on the device)."""
        if self.grad_filter is not None:
            self.grad_filter.apply_weights(settings[FILTER_WEIGHT])

    def _update(
        self, i: int, chosen: list[int], lr: float, weight_decay: float, eps: float
    ) -> None:
        cfg = self.configs[i]
        p = [self.params[j][i] for j in chosen]
        g = [self.params[j].grad[i] for j in chosen]
        m = [self.exp_avg[j][i] for j in chosen]
        v = [self.exp_avg_sq[j][i] for j in chosen]
        if self.fused:
            # torch's public functional AdamW on its fused kernel; it adds one to each step
            # tensor before updating, so each parameter gets its own copy of the last step
            steps = [self.steps[i] - 1 for _ in p]
            adamw(
                p, g, m, v, [], steps, fused=True,
                lr=lr, beta1=cfg.betas[0], beta2=cfg.betas[1], weight_decay=weight_decay,
                eps=eps, amsgrad=False, maximize=False,
            )  # fmt: skip
            return
        step = float(self.step_counts[i])  # the reference AdamW, for devices without a kernel
        beta1, beta2 = cfg.betas
        for param, grad, avg, avg_sq in zip(p, g, m, v, strict=True):
            param.mul_(1 - lr * weight_decay)
            avg.lerp_(grad, 1 - beta1)
            avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (avg_sq.sqrt() / math.sqrt(1 - beta2**step)).add_(eps)
            param.addcdiv_(avg, denom, value=-lr / (1 - beta1**step))

    def state_dict(self) -> dict:
        for step, count in zip(self.steps, self.step_counts, strict=True):
            step.fill_(count)  # the stacked step counts in Python only
        state = {"exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq, "steps": self.steps}
        if self.grad_filter is not None:
            state["grad_ema"] = self.grad_filter.ema
        if self.weight_average is not None:
            state["weight_average"] = self.weight_average.average
        return state

    def load_state_dict(self, state: dict) -> None:
        mine = self.exp_avg + self.exp_avg_sq + self.steps
        saved = state["exp_avg"] + state["exp_avg_sq"] + state["steps"]
        if self.grad_filter is not None:
            mine, saved = mine + self.grad_filter.ema, saved + state["grad_ema"]
        if self.weight_average is not None:
            mine, saved = mine + self.weight_average.average, saved + state["weight_average"]
        for tensor, value in zip(mine, saved, strict=True):
            tensor.copy_(value)
        self.step_counts = [int(step.item()) for step in self.steps]


def _member_coefficients(configs, lrs, steps, mults) -> list[list[float]]:
    """Per member, what one AdamW step multiplies by: the decoupled decay factor, 1 - beta1,
    beta2, the square root of beta2's bias correction, eps, and lr over beta1's bias
    correction; ``mults`` scale the learning rate as ``abacus_bias_lr_mult`` does (decay and
    eps divided by it, as in ``PackedAdamW.step``). Rows of (6, M)."""
    rows = []
    for i, cfg in enumerate(configs):
        mult = mults if isinstance(mults, float) else mults[i]
        lr, (beta1, beta2), step = lrs[i] * mult, cfg.betas, max(steps[i], 1)
        rows.append([
            1 - lr * cfg.weight_decay / mult, 1 - beta1, beta2,
            math.sqrt(1 - beta2**step), cfg.eps / mult, lr / (1 - beta1**step),
        ])  # fmt: skip
    return [list(column) for column in zip(*rows, strict=True)]

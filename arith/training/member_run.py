"""One member's run inside a pack: its data and batches, its evaluations on its own schedule,
its stopping rules, its final measurement and its summary. The loop that trains the pack is
arith.training.trainer's; this is what it keeps per member."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from arith.data import length_grid
from arith.data.batches import BatchSource
from arith.data.dataset import STREAM_TRAIN_SAMPLE, Dataset, sample_split
from arith.evaluation import length_probe
from arith.evaluation.evaluate import evaluate_members, evaluate_set, exact_rows
from arith.training import checkpoint as ckpt
from arith.training.diagnostics import RunDiagnostics, overlap_metrics
from arith.training.stopping import LoopState
from arith.training.throughput import Throughput
from arith.training.trainconf import TrainConfig

if TYPE_CHECKING:
    from arith.config import RunConfig


@dataclass
class MemberRun:
    """One run of a pack: its data, batches, schedule length and stopping bookkeeping."""

    config: RunConfig
    dataset: Dataset
    max_steps: int
    batches: BatchSource
    generator: torch.Generator  # Abacus offsets, kept apart from dropout's RNG
    train_sample: Any
    meter: Throughput
    cost: dict[str, int]
    """What one step costs (``step_cost``), for the summary's tokens and FLOPs."""
    diagnostics: RunDiagnostics
    """Its data's overlaps and histograms, and its embeddings at each evaluation."""
    state: LoopState = field(default_factory=LoopState)
    stop: str = "max_steps"
    loss_sum: torch.Tensor | None = None
    """Its training losses summed since its last evaluation, on the device: a view of the
    pack's sums, which the loop adds each step's to; an evaluation reads it (one wait)."""
    running_count: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        """Still training: not yet measured and saved at its end."""
        return self.state.stopped_reason is None

    def at_end(self, step: int) -> bool:
        """Whether ``step`` ends this member's run: its last step, or a stopping rule fired."""
        return step >= self.max_steps or self.stop != "max_steps"

    def due(self, step: int) -> bool:
        """Whether this member evaluates at ``step``: every ``eval_every`` steps and at its end."""
        every = self.config.train.eval_every
        return (step % every == 0 and step > self.state.last_report_step) or self.at_end(step)

    def record_step(self, seconds: float, rows: int, tokens: int, pack_tokens: int) -> None:
        """Count one training step and its throughput (its loss is in ``loss_sum``)."""
        self.meter.add(seconds, rows, tokens, pack_tokens)
        self.running_count += 1

    def take_loss(self) -> float | None:
        """The mean training loss since the last evaluation (None without a step), read from
        the device, and start summing again; a non-finite one stops the run as diverged.

        A step that diverged is found here, at the next evaluation, not at the step itself: a
        check there would make every step wait for the device."""
        if not self.running_count:
            return None
        loss = self.loss_sum.item() / self.running_count
        self.loss_sum.zero_()
        self.running_count = 0
        if not math.isfinite(loss):
            self.stop = "diverged"
        return loss


def evaluate_member(
    m: MemberRun,
    model,
    step: int,
    lr: float,
    elapsed: Callable[[], float],
    device,
    model_dir: Path | None,
    measured: dict[str, float] | None = None,
) -> bool:
    """Evaluate one member, update its stopping state and keep the metrics to report; True
    where this evaluation ends its run (``finish_members`` measures and saves it then).
    ``measured``: what ``measure_together`` measured of it already."""
    tc = m.config.train
    loss = m.take_loss()  # first: a divergence found here makes this the member's end
    last = m.at_end(step)
    m.diagnostics.record(step, model, model_dir)  # before the checkpoint that goes with it
    metrics: dict[str, Any] = {"step": step, "epoch": _epoch(step, tc, m.dataset), "lr": lr}
    if loss is not None:
        metrics["train/loss"] = loss
    metrics.update(m.meter.pop())
    metrics.update(step_metrics(model, m.dataset, device, m.train_sample, measured or {}))
    metrics["time/elapsed_s"] = elapsed()
    state = m.state
    if m.stop == "max_steps":
        m.stop = state.update(metrics, step, tc) or m.stop
        if tc.patience is not None and state.best_at == step:  # a new best, however small
            state.best_weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
            state.best_step = step
    if tc.time_budget_s and metrics["time/elapsed_s"] > tc.time_budget_s and m.stop == "max_steps":
        m.stop = "time_budget"
    state.step, state.last_report_step = step, step
    m.metrics = metrics
    return last or m.stop != "max_steps"


def finish_members(
    packed,
    views: list,
    members: list[MemberRun],
    ending: list[int],
    step: int,
    device,
    folders: list[Path | None],
    elapsed: Callable[[], float],
) -> None:
    """End the runs of the ``ending`` members: measure the final sets on each one's chosen
    weights (the monitor's best with early stopping, else the last) into its metrics, save
    that model to its folder, and put the last weights back for the checkpoint.

    Every ending member's chosen weights are loaded before any is measured, so that members
    sharing a dataset are measured in one batch through the pack (``final_sets_together``).
    Where the chosen weights are not the last, ``train/`` and ``val/`` are measured again on
    them, so that everything the run reports at its end, and a sweep ranks it on, comes from
    the one model it keeps."""
    if not ending:
        return
    last_weights = {i: _load_chosen(members[i], views[i], step, device) for i in ending}
    together = final_sets_together(packed, members, ending, device)
    for i in ending:
        m, model = members[i], views[i]
        state = m.state
        weights_step = state.best_step if state.best_weights is not None else step
        m.metrics.update(together.get(i) or _final_sets(model, m.dataset, device))
        m.metrics.update(_probe(m, model, device))
        m.metrics.update(m.dataset.data_metrics())  # sizes and training overlap of each set
        m.metrics.update(overlap_metrics(m.diagnostics.data))  # and the splits' with each other
        m.metrics.update(final_weights_step=weights_step, done=1)
        if folders[i] is not None:
            ckpt.save_model(folders[i], m.config, model, state.final_weights, weights_step)
        if last_weights[i] is not None:  # the checkpoint stays the loop's true state
            model.load_state_dict(last_weights[i])
        state.best_weights = None  # a stopped member's copy is no longer needed
        state.stopped_reason = m.stop
        state.final_metrics = m.metrics
        state.wall_time_s = elapsed()


def _load_chosen(m: MemberRun, model, step: int, device) -> dict | None:
    """Load the member's chosen weights into ``model`` and, where they are not the last,
    measure ``train/`` and ``val/`` again on them; the last weights to put back, or None."""
    state = m.state
    state.final_weights = "best" if state.best_weights is not None else "last"
    if state.best_weights is None or state.best_step == step:
        return None
    last_weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.load_state_dict(state.best_weights)  # test what the monitor chose
    m.metrics.update(step_metrics(model, m.dataset, device, m.train_sample, {}))
    return last_weights


def _probe(m: MemberRun, model, device) -> dict[str, float]:
    """The length probe's metrics (arith.evaluation.length_probe), where the run asks for it."""
    data = m.config.data
    if not data.length_probe_max:
        return {}
    seed = data.resolved_seed(m.config.train.seed)
    return length_probe.probe(
        model,
        m.dataset.format,
        m.dataset.task,
        data.length_probe_max,
        data.length_probe_size,
        seed,
        device,
    )


def summarise(m: MemberRun, counts: dict[str, int]) -> dict[str, Any]:
    tc = m.config.train
    summary = {k: v for k, v in m.metrics.items() if k not in ("checkpoint", "done")}
    summary.update(
        n_params=counts["total"],
        n_params_non_embedding=counts["non_embedding"],
        flops_per_token=m.cost["flops_per_token"],
        steps=m.state.step,
        tokens=m.state.step * m.cost["tokens"],
        flops=m.state.step * m.cost["flops"],
        wall_time_s=m.state.wall_time_s,
        stopped_reason=m.stop,
        final_weights=m.state.final_weights,  # "best" (the monitor's choice) or "last"
    )
    summary["best/" + tc.monitor] = m.state.best
    summary["train/steps_to_100pct"] = m.state.steps_to_100pct
    summary["val/steps_to_threshold"] = m.state.steps_to_threshold
    return summary


def _epoch(step: int, tc: TrainConfig, dataset: Dataset) -> float:
    if dataset.train_pool is None:
        return 0.0
    return step * tc.batch_size / len(dataset.train_pool)


def step_metrics(model, dataset: Dataset, device, train_sample, measured: dict) -> dict[str, float]:
    """The training sample's two numbers and the validation set's metrics; ``measured``: what
    ``measure_together`` measured of them already (``{"train": ..., "val": ...}``).

    Both without decoding (``evaluate_set(decode=False)``): greedy decoding's exact match read
    from one teacher-forced pass. An evaluation that training repeats every few steps then costs
    one forward pass, not one per answer token; the final sets (``_final_sets``) are decoded."""
    # the training sample reports two numbers: no breakdowns, no text metrics
    train = measured.get("train") or evaluate_set(
        model, dataset.format, train_sample, device, breakdowns=False, decode=False
    )
    val = measured.get("val") or evaluate_set(
        model, dataset.format, dataset.eval_sets["val"], device, decode=False
    )
    out = {
        "train/exact_match": train["exact_match"],
        "train/token_accuracy": train["token_accuracy"],
    }
    out.update({f"val/{key}": value for key, value in val.items()})
    return out


def measure_together(packed, members: list[MemberRun], due: list[int], device) -> dict[int, dict]:
    """What ``step_metrics`` measures of a pack's due members, through the packed model, every
    member's teacher-forced pass in one batch (``evaluate_members``): the validation set of the
    members that share it (one dataset), and their training sample where they share it too (one
    data seed and ``train_eval_size``). Only where at least half the pack shares it, as every member
    is measured. ``{member: {"val": metrics, "train": metrics}}``, either part left out where
    the member is measured alone."""
    shared = _sharing_dataset(packed, members, due)
    if not shared:
        return {}
    first = members[shared[0]]
    fmt = first.dataset.format
    val = evaluate_members(packed, fmt, first.dataset.eval_sets["val"], device, decode=False)
    out = {i: {"val": val[i]} for i in shared}
    # training samples: drawn per data seed; the largest group sharing one is measured together
    keys = [_sample_key(members[i]) for i in shared]
    common = max(set(keys), key=keys.count)
    same_sample = [i for i, key in zip(shared, keys, strict=True) if key == common]
    if len(same_sample) >= 2 and 2 * len(same_sample) >= packed.members:
        sample = members[same_sample[0]].train_sample
        train = evaluate_members(packed, fmt, sample, device, breakdowns=False, decode=False)
        for i in same_sample:
            out[i]["train"] = train[i]
    return out


def final_sets_together(packed, members: list[MemberRun], ending: list[int], device) -> dict:
    """``_final_sets`` of the ending members that share a dataset, through the packed model
    with every member decoded in one batch, on the same rule as ``measure_together``; a
    length grid is measured member by member (``exact_rows`` decodes one model).
    ``{member: metrics}``, a member left out where it is measured alone."""
    shared = _sharing_dataset(packed, members, ending)
    if not shared or members[shared[0]].dataset.length_grid is not None:
        return {}
    every = _final_sets_members(packed, members[shared[0]].dataset, device)
    return {i: every[i] for i in shared}


def _sharing_dataset(packed, members: list[MemberRun], chosen: list[int]) -> list[int]:
    """The chosen members that share the first one's dataset, where measuring them together
    pays: at least two, and at least half the pack (every member of the pack is measured)."""
    shared = [i for i in chosen if members[i].dataset is members[chosen[0]].dataset]
    if packed.members == 1 or len(shared) < 2 or 2 * len(shared) < packed.members:
        return []
    return shared


def train_eval_sample(dataset: Dataset, config: RunConfig):
    """Training problems measured at each evaluation; from the data seed: one per split."""
    tc = config.train
    rng = np.random.default_rng([config.data.resolved_seed(tc.seed), STREAM_TRAIN_SAMPLE])
    pool = dataset.train_pool
    if pool is None:
        return sample_split(
            dataset.task, config.data, dataset.split_salt, 0, tc.train_eval_size, rng
        )
    return pool.take(rng.permutation(len(pool))[: tc.train_eval_size])


def _sample_key(m: MemberRun) -> tuple[int, int]:
    """What draws a member's training sample from its dataset (``train_eval_sample``)."""
    return m.config.data.resolved_seed(m.config.train.seed), m.config.train.train_eval_size


def _final_sets(model, dataset: Dataset, device) -> dict[str, float]:
    """Test and the extra sets, measured once at the end, of one model."""
    (out,) = _final_sets_members(model, dataset, device)
    if dataset.length_grid is not None:
        out.update(_length_grid(model, dataset, device))
    return out


def _final_sets_members(model, dataset: Dataset, device) -> list[dict[str, float]]:
    """Test and the extra sets of each member of ``model`` (one model: a list of one)."""
    out: list[dict[str, float]] = [{} for _ in range(model.members)]
    for name, problems in dataset.eval_sets.items():
        if name == "val":
            continue
        fmt = dataset.format_of(name)
        reference = dataset.format if fmt is not dataset.format else None
        measured = evaluate_members(model, fmt, problems, device, reference)
        for metrics, member in zip(measured, out, strict=True):
            member.update({f"{name}/{key}": value for key, value in metrics.items()})
    for member in out:
        member.update(length_grid.success_metrics(member))
    return out


def _length_grid(model, dataset: Dataset, device) -> dict[str, float]:
    """The length grid's cells and extrapolation ratio (arith.data.length_grid), greedy decoding."""
    exact = exact_rows(model, dataset.format, dataset.length_grid, device)
    return length_grid.cell_metrics(dataset.length_grid, exact, dataset.task.n_digits)

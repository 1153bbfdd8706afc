"""``train(config, report) -> summary``: one run, from problems to a measured model.

The loop follows nanoGPT's order: learning rate, evaluate / checkpoint / report, forward and
backward, clip, step, stop. ``report`` receives a flat dict of namespaced metrics at every
evaluation; tests pass ``list.append``, a sweep passes a Ray Tune reporter. ``progress`` (for a
progress bar) is called after every step with the training loss since the last evaluation (as
last read back, without waiting for the device), and at every evaluation with all its metrics.

No training step makes the host wait for the device, so the host queues the next step while
the device runs this one: the batches are shaped (``step_batch.py``) ahead on a thread of their
own (``prefetch.py``), the losses stay on the device until an evaluation reads them, and the
per-member settings a step needs go to the device without a wait (``optim.py``).
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from arith.data.batches import BatchSource
from arith.data.dataset import Dataset, dataset_key
from arith.data.recent import recent_dataset
from arith.errors import ConfigError
from arith.evaluation.static_decode import StaticDecoding
from arith.model import gpt as model_lib
from arith.training import checkpoint as ckpt
from arith.training import step_batch
from arith.training.cost import n_params, planned_steps, step_cost
from arith.training.device import autocast_for, hardware_record, pick_device
from arith.training.diagnostics import RunDiagnostics
from arith.training.graph_step import GraphedStep, step_mode, step_name
from arith.training.loss import backward_part
from arith.training.member_run import (
    MemberRun,
    evaluate_member,
    finish_members,
    measure_together,
    summarise,
    train_eval_sample,
)
from arith.training.optim import PackedAdamW
from arith.training.packing import check_packable
from arith.training.prefetch import BatchProducer
from arith.training.throughput import Throughput, device_peak
from arith.training.transfers import LossReadout, synchronize

if TYPE_CHECKING:
    from arith.config import RunConfig

Report = Callable[[dict[str, Any]], None]
PackReport = Callable[[int, dict[str, Any]], None]
"""``report(member, metrics)``: a pack's reports, each naming the member (0-based) it is about."""

ABACUS_OFFSET_SEED = 7
"""Added to ``train.seed`` for the generator of Abacus training offsets: a stream of their own,
apart from the global one that initialises the weights and draws dropout masks (seeded with
``train.seed`` itself). Part of what a seed means: changing it changes every Abacus run."""


def compile_mode(device: torch.device, length_buckets: int) -> str | None:
    """``torch.compile``'s mode for the training forward pass: CUDA graphs on CUDA (a small
    model's step is kernel launches), but not with length buckets, whose backward passes each
    add into ``.grad`` between two replays of a graph: upstream reports that as a crash
    (pytorch #169545) or as the last micro-batch's gradients only (pytorch #96693)."""
    return "reduce-overhead" if device.type == "cuda" and length_buckets == 1 else None


def _compiled(model: model_lib.GPT, device: torch.device, length_buckets: int):
    """The training forward pass compiled (``compile_mode``). Evaluation and checkpoints use
    ``model`` itself: nothing saved changes."""
    return torch.compile(model, mode=compile_mode(device, length_buckets))


def build_model(config: RunConfig, dataset: Dataset) -> model_lib.GPT:
    """The run's model, sized for its vocabulary and the longest sequence of any set."""
    fmt = dataset.format
    return model_lib.GPT(
        config.model,
        len(fmt.vocab),
        dataset.max_seq_len(),
        fmt.digit_ids,
        train_seq_len=dataset.train_seq_len(),
    )


def train(
    config: RunConfig,
    report: Report | None = None,
    *,
    checkpoint_dir: str | Path | None = None,
    resume_from: str | Path | None = None,
    progress: Callable[[int, int, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Train one model and return its summary: a pack of one member."""
    pack_report = None if report is None else (lambda _member, metrics: report(metrics))
    (summary,) = train_pack(
        [config],
        pack_report,
        checkpoint_dir=checkpoint_dir,
        resume_from=resume_from,
        progress=progress,
    )
    return summary


def train_pack(
    configs: list[RunConfig],
    report: PackReport | None = None,
    *,
    checkpoint_dir: str | Path | None = None,
    resume_from: str | Path | None = None,
    progress: Callable[[int, int, dict[str, Any]], None] | None = None,
    report_step: Callable[[dict[int, dict[str, Any]]], None] | None = None,
) -> list[dict[str, Any]]:
    """Train same-shape runs together as one packed model; one summary per member, in order.

    ``report(member, metrics)`` gets each member's evaluations as ``train`` would report them
    alone. Each member stops on its own (max steps, target, patience, divergence, time budget):
    it stops updating and reporting, and the pack ends when all have stopped.
    ``report_step({member: metrics})`` gets the evaluations of one step together, after the
    checkpoint that holds them: a sweep reports them with that checkpoint in one message, so a
    restored pack neither loses nor repeats a member's evaluation.
    """
    check_packable(configs)
    first = configs[0].train
    start_time = time.perf_counter()
    device = pick_device(first.device)
    members, model = build_pack(configs, device)
    views = model.member_views()  # each member as a model of its own, for its evaluations
    optimizer = PackedAdamW(model, [c.optim for c in configs], [m.max_steps for m in members])
    mode = step_mode(device, first.compile, first.length_buckets)
    autocast = autocast_for(device, first.precision, configs[0].model.d_model, mode != "graph")
    peak = first.peak_flops or device_peak(device, autocast)
    for member in members:
        member.meter.peak_flops = peak
    forward = _compiled(model, device, first.length_buckets) if mode is True else model
    if resume_from is not None:
        _resume(resume_from, model, optimizer, members)
    elapsed_before = members[0].state.elapsed_before
    elapsed = lambda: elapsed_before + time.perf_counter() - start_time  # noqa: E731
    step = max(m.state.step for m in members)
    # (M,) each member's losses summed since its evaluation, on the device; members hold views
    running = torch.zeros(len(members), device=device)
    for i, m in enumerate(members):
        m.loss_sum = running[i]
    readout, stepped = LossReadout(device), []
    model.train()
    graphed = GraphedStep(model, optimizer, running, autocast, device) if mode == "graph" else None
    # compiled: every token's logits, each batch padded to one length (one shape for CUDA graphs)
    pick = mode is False
    fixed_length = None if pick or first.length_buckets > 1 else step_batch.step_length(members)
    build = functools.partial(
        step_batch.build_batch, members, first.length_buckets, device.type == "cuda", pick,
        fixed_length,
    )  # fmt: skip
    n = len(members)
    folders = [checkpoint_dir and ckpt.member_dir(checkpoint_dir, i, n) for i in range(n)]
    # with the graphed step, evaluation decodes at fixed shapes too, its step a graph on CUDA
    decoding = StaticDecoding() if mode == "graph" else contextlib.nullcontext()
    with decoding, BatchProducer(build, step_batch.position(members), device) as batches:
        while True:
            # evaluate, checkpoint and report: each member on its own schedule
            due = [i for i, m in enumerate(members) if m.active and m.due(step)]
            if due and stepped:  # the steps end when the device has run them, not when queued
                _wait_for_steps(device, [members[i] for i in stepped])
                stepped = []
            # measured on the weights' average where optim.weight_ema keeps one, and in fp32
            # whatever trains in bf16: bf16 decoding lost exact match (docs/changelog.md)
            with optimizer.averaged() if due else contextlib.nullcontext():
                measured = measure_together(model, members, due, device)
                ending = []  # the members this evaluation ends, finished together below
                for i in due:
                    m, lr, done = members[i], optimizer.lr(i), measured.get(i)
                    if evaluate_member(m, views[i], step, lr, elapsed, device, folders[i], done):
                        ending.append(i)
                finish_members(model, views, members, ending, step, device, folders, elapsed)
            if checkpoint_dir is not None and due:
                position = batches.position()
                _save(checkpoint_dir, configs, model, optimizer, members, position, step, elapsed())
            _report(members, due, step, checkpoint_dir, report, progress, report_step)
            active = [i for i, m in enumerate(members) if m.active]
            if not active:
                break

            # forward and backward: the members' batches stacked, member 0's rows first
            t0 = time.perf_counter()
            batch = batches.next()
            if graphed is not None:
                graphed(batch, active)
            else:
                _eager_step(model, forward, optimizer, autocast, batch, running, active)
            step += 1
            seconds, stepped = time.perf_counter() - t0, active
            for i in active:
                tokens = batch.pack_tokens // len(members)
                members[i].record_step(seconds, batch.rows, tokens, batch.pack_tokens)
            if progress is not None:  # every step: the loss since the last evaluation
                a = active[0]
                losses = readout.poll(running, [m.running_count for m in members])
                shown = {} if losses is None else {"train/loss": losses[a]}
                progress(step, members[a].max_steps, shown)

    dataset = members[0].dataset
    counts = n_params(configs[0].model, len(dataset.format.vocab), dataset.train_seq_len())
    hardware = hardware_record(device, first.precision, configs[0].model.d_model, step_name(mode))
    return [{**summarise(m, counts), **hardware} for m in members]


def _eager_step(model, forward, optimizer: PackedAdamW, autocast, batch, running, active) -> None:
    """One training step, eager: forward and backward of each length bucket (the members'
    batches stacked, member 0's rows first), then filter, clip and step the members in
    ``active``; each member's mean loss per token added to ``running`` on the device."""
    optimizer.zero_grad()
    loss_sums = torch.zeros_like(running)
    for part in batch.parts:
        loss_sums = loss_sums + backward_part(model, forward, autocast, part, batch.token_counts)
    # (M,) mean per token, added up on the device: read at the members' evaluations
    running.add_(loss_sums / batch.token_counts)
    # filter, clip, step: only the members still training
    optimizer.filter_grads(active)
    optimizer.clip_grad_norms(active)
    optimizer.step(active)


def _wait_for_steps(device, stepped: list[MemberRun]) -> None:
    """Wait for the device to run the queued steps, the wait counted as their time (a step's
    clock stops when the host has queued it)."""
    t0 = time.perf_counter()
    synchronize(device)
    waited = time.perf_counter() - t0
    for m in stepped:
        m.meter.add(waited, 0, 0, 0)


def build_pack(configs: list[RunConfig], device) -> tuple[list[MemberRun], model_lib.GPT]:
    """Each member's run and model, built as if it trained alone, and the models stacked."""
    # members of one data seed share its dataset (and, with a training pool, its diagnostics)
    shared: dict[tuple, Any] = {}
    built = [_build_member(config, device, shared) for config in configs]
    return [member for member, _ in built], model_lib.GPT.stack([model for _, model in built])


def _build_member(
    config: RunConfig, device: torch.device, shared: dict[tuple, Any]
) -> tuple[MemberRun, model_lib.GPT]:
    """A member's data and its model, initialised from its own seed as if it trained alone."""
    tc = config.train
    key = dataset_key(config.task, config.format, config.data, tc.seed)
    if key not in shared:
        shared[key] = recent_dataset(config.task, config.format, config.data, tc.seed)
    dataset = shared[key]
    torch.manual_seed(tc.seed)
    model = build_model(config, dataset).to(device)
    cost = step_cost(config)
    # the sample is the data seed's: members that share the dataset and its size share it
    if ("train_sample", key, tc.train_eval_size) not in shared:
        shared["train_sample", key, tc.train_eval_size] = train_eval_sample(dataset, config)
    train_sample = shared["train_sample", key, tc.train_eval_size]
    train = dataset.train_pool if dataset.train_pool is not None else train_sample
    member = MemberRun(
        config=config,
        dataset=dataset,
        max_steps=_total_steps(config, dataset),
        batches=BatchSource(dataset, config.data, tc.batch_size, tc.seed),
        generator=torch.Generator().manual_seed(tc.seed + ABACUS_OFFSET_SEED),
        train_sample=train_sample,
        meter=Throughput(cost["flops_per_token"], None),
        cost=cost,
        diagnostics=_diagnostics(dataset, train, shared, key),
    )
    return member, model


def _diagnostics(dataset: Dataset, train, shared: dict[tuple, Any], key: tuple) -> RunDiagnostics:
    """A member's diagnostics, their data part built once per shared training pool or sample
    (its histograms are the same for every member that shares it). Embedding snapshots are
    always the member's."""
    if ("diagnostics", key, id(train)) not in shared:
        shared["diagnostics", key, id(train)] = RunDiagnostics.build(dataset, train)
    built = shared["diagnostics", key, id(train)]
    return RunDiagnostics(data=built.data, tokens=built.tokens, used=built.used)


def _resume(path, model, optimizer: PackedAdamW, members: list[MemberRun]) -> None:
    """Restore a checkpoint into the pack: weights, optimiser, batches, RNGs, loop states."""
    states = ckpt.load(
        path, model, optimizer, [m.batches for m in members], [m.generator for m in members]
    )
    for i, (member, state) in enumerate(zip(members, states, strict=True)):
        member.state, member.stop = state, state.stopped_reason or "max_steps"
        member.metrics = dict(state.final_metrics or {})  # a stopped member keeps its report
        member.diagnostics.restore(ckpt.member_dir(path, i, len(members)))


def _save(
    directory, configs, model, optimizer, members: list[MemberRun], position, step, elapsed
) -> None:
    """Checkpoint the pack after an evaluation, its batch sources at ``position`` (a
    ``step_batch.Position``: where the loop's last batch left them); a member stopped before
    ``step`` keeps its own last step."""
    for m in members:
        if m.active or m.state.step == step:
            m.state.step = step
        m.state.elapsed_at_save = elapsed
    ckpt.save(
        directory,
        [c.to_dict() for c in configs],
        model,
        optimizer,
        *position,
        [m.state for m in members],
    )


def _report(members, due, step, checkpoint_dir, report, progress, report_step) -> None:
    """Hand the evaluations of ``step`` to the callbacks, each member's as it would alone."""
    for i in due:
        metrics = members[i].metrics
        if checkpoint_dir is not None:
            metrics["checkpoint"] = str(checkpoint_dir)
        if report is not None:
            report(i, metrics)
        if progress is not None:
            progress(step, members[i].max_steps, metrics)
    if report_step is not None and due:
        report_step({i: members[i].metrics for i in due})


def _total_steps(config: RunConfig, dataset: Dataset) -> int:
    """Steps the member trains unless stopped early; ``train.epochs`` counts its training set."""
    tc = config.train
    if tc.epochs is None:
        return planned_steps(config)
    if dataset.train_pool is None:
        raise ConfigError(
            "train.epochs", "needs a finite training set; set data.train_size or use max_steps"
        )
    return max(1, math.ceil(tc.epochs * len(dataset.train_pool) / tc.batch_size))

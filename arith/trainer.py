"""``train(config, report) -> summary``: one run, from problems to a measured model.

The loop follows nanoGPT's order: learning rate, evaluate / checkpoint / report, forward and
backward, clip, step, stop. ``report`` receives a flat dict of namespaced metrics at every
evaluation; tests pass ``list.append``, a sweep passes a Ray Tune reporter. ``progress`` (for a
progress bar) is called after every step with the training loss since the last evaluation, and at
every evaluation with all its metrics.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from arith import checkpoint as ckpt
from arith import model as model_lib
from arith import tasks
from arith.batches import BatchSource
from arith.cost import n_params, planned_steps, step_cost
from arith.data import Dataset, build_dataset, sample_split
from arith.errors import ConfigError, require
from arith.evaluate import OP_NAMES, carry_metric_names, evaluate_set
from arith.formats import longest_digit_run
from arith.optim import PackedAdamW
from arith.stopping import LoopState
from arith.trainconf import TrainConfig

if TYPE_CHECKING:
    from arith.config import RunConfig

Report = Callable[[dict[str, Any]], None]
PackReport = Callable[[int, dict[str, Any]], None]
"""``report(member, metrics)``: a pack's reports, each naming the member (0-based) it is about."""

# What ``train`` returns besides the final metrics: sizes, costs and thresholds reached.
SUMMARY_KEYS = (
    "n_params",
    "n_params_non_embedding",
    "flops_per_token",
    "steps",
    "tokens",
    "flops",
    "wall_time_s",
    "best/val/exact_match",
    "train/steps_to_100pct",
    "val/steps_to_threshold",
    "final_weights_step",
)


def pick_device(name: str) -> torch.device:
    if name != "auto":
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def build_model(config: RunConfig, dataset: Dataset) -> model_lib.GPT:
    fmt = dataset.format
    return model_lib.GPT(
        config.model,
        len(fmt.vocab),
        dataset.max_seq_len(),
        fmt.digit_ids,
        train_seq_len=dataset.train_seq_len(),
    )


def reported_metrics(config: RunConfig) -> set[str]:
    """Names of the metrics ``train`` reports or returns for this config (to validate sweeps)."""
    names = {"step", "epoch", "lr", "train/loss", "train/exact_match", "train/token_accuracy"}
    names.add("time/elapsed_s")
    names |= {"perf/examples_per_s", "perf/tokens_per_s", "perf/mfu"}
    names |= {"perf/pack_tokens_per_s", "perf/pack_mfu"}
    names |= {"n_params", "n_params_non_embedding", "flops_per_token", "steps", "wall_time_s"}
    names.add("final_weights_step")
    names |= {"tokens", "flops"}
    names |= {"best/" + config.train.monitor, "train/steps_to_100pct", "val/steps_to_threshold"}
    sets = ["val", "test"]
    longer = {"longer": config.data.longer_n_digits, "longer_val": config.data.longer_val_n_digits}
    sets += [name for name, lo_hi in longer.items() if lo_hi]
    if config.data.edge_cases and tasks.edge_cases(config.task) is not None:
        sets.append("edge")
    if config.data.carry_size:
        sets.append("carry")
    for name in sets:
        names |= {f"{name}/exact_match", f"{name}/loss", f"{name}/token_accuracy"}
        names.add(f"{name}/short_answers")
        if config.format.name == "spaced":
            names.add(f"{name}/normalised_match")
    if config.data.ood_spacing:
        names |= {"ood/exact_match", "ood/normalised_match", "ood/short_answers"}
    for name in [*sets, *(["ood"] if config.data.ood_spacing else [])]:  # Dataset.data_metrics
        names |= {f"data/{name}/{key}" for key in ("size", "dropped", "train_overlap")}
    if config.task.name in ("multi_op", "modular"):
        for symbol in tasks.op_symbols(config.task):
            names |= {f"{s}/exact_match/{OP_NAMES[symbol]}" for s in sets}
    longest = config.data.longest_operand(config.task)
    for s in sets:  # by longest carry / borrow chain (arith.carries)
        names |= {f"{s}/{key}" for key in carry_metric_names(config.task, longest)}
    if config.task.name in ("addition", "multiplication", "sorting"):
        # per longest-operand length, reported where a set has several lengths
        trained = range(1, config.task.n_digits + 1)
        lengths = {(s, n) for s in sets if s not in longer for n in trained}
        for s, lo_hi in longer.items():
            lengths |= {(s, n) for n in range(lo_hi[0], lo_hi[1] + 1)} if lo_hi else set()
        names |= {f"{s}/exact_match/len_{n}" for s, n in lengths}
    return names


class _Throughput:
    """Examples and tokens per second of a member's training steps since its last evaluation
    (evaluation time excluded).

    In a pack every step trains all members at once, so a member's ``perf/tokens_per_s`` and
    ``perf/mfu`` are its share: its own tokens over the pack's step time (the active members'
    figures add up to the pack's). ``perf/pack_tokens_per_s`` and ``perf/pack_mfu`` are the
    whole pack's: every row the step computed, stopped members' included. A pack of one
    reports the same figure under both names.
    """

    def __init__(self, flops_per_token: int, peak_flops: float | None) -> None:
        self.flops_per_token, self.peak_flops = flops_per_token, peak_flops
        self.seconds, self.examples, self.tokens, self.pack_tokens = 0.0, 0, 0, 0

    def add(self, seconds: float, examples: int, tokens: int, pack_tokens: int) -> None:
        self.seconds += seconds
        self.examples += examples
        self.tokens += tokens
        self.pack_tokens += pack_tokens

    def pop(self) -> dict[str, float]:
        if self.seconds == 0:
            return {}
        out = {
            "perf/examples_per_s": self.examples / self.seconds,
            "perf/tokens_per_s": self.tokens / self.seconds,
            "perf/pack_tokens_per_s": self.pack_tokens / self.seconds,
        }
        if self.peak_flops:
            for kind in ("", "pack_"):
                flops = out[f"perf/{kind}tokens_per_s"] * self.flops_per_token
                out[f"perf/{kind}mfu"] = flops / self.peak_flops
        self.seconds, self.examples, self.tokens, self.pack_tokens = 0.0, 0, 0, 0
        return out


# What may differ between the members of a pack: everything else fixes the shapes of the
# stacked parameters and batches (model shape, task, format, data sizes, batch size) or is one
# setting of the shared process (device, precision, compile). Dropout rates may differ, but
# the members draw their masks from one RNG, so with dropout a member matches its run alone
# in distribution, not bit for bit.
PACK_FREE = (
    "optim.",
    "model.init_std",
    "model.dropout",
    "data.seed",
    "train.seed",
    "train.max_steps",
    "train.epochs",
    "train.flops_budget",
    "train.tokens_budget",
    "train.eval_every",
    "train.train_eval_size",
    "train.monitor",
    "train.patience",
    "train.min_delta",
    "train.target",
    "train.min_steps",
    "train.threshold",
    "train.time_budget_s",
)


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def pack_key(config: RunConfig) -> tuple:
    """What configs must share to train in one pack: every setting outside ``PACK_FREE``."""
    flat = _flat(config.to_dict())
    shared = {k: v for k, v in flat.items() if not k.startswith(PACK_FREE)}
    return tuple(sorted((k, repr(v)) for k, v in shared.items()))


def check_packable(configs: list[RunConfig]) -> None:
    """ConfigError naming the first setting that two members of a pack do not share."""
    require(len(configs) >= 1, "pack", "needs at least one run config")
    first = dict(pack_key(configs[0]))
    for index, config in enumerate(configs[1:], start=1):
        for key, value in pack_key(config):
            require(
                first[key] == value,
                key,
                f"must be the same for every member of a pack, but member 0 has {first[key]} "
                f"and member {index} has {value}",
            )


@dataclass
class _Member:
    """One run of a pack: its data, batches, schedule length and stopping bookkeeping."""

    config: RunConfig
    dataset: Dataset
    max_steps: int
    batches: BatchSource
    generator: torch.Generator  # Abacus offsets, kept apart from dropout's RNG
    train_sample: Any
    meter: _Throughput
    cost: dict[str, int]
    """What one step costs (``step_cost``), for the summary's tokens and FLOPs."""
    state: LoopState = field(default_factory=LoopState)
    stop: str = "max_steps"
    running_loss: float = 0.0
    running_count: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)


def _build_member(config: RunConfig, device: torch.device) -> tuple[_Member, model_lib.GPT]:
    """A member's data and its model, initialised from its own seed as if it trained alone."""
    tc = config.train
    torch.manual_seed(tc.seed)
    dataset = build_dataset(config.task, config.format, config.data, tc.seed)
    model = build_model(config, dataset).to(device)
    cost = step_cost(config)
    member = _Member(
        config=config,
        dataset=dataset,
        max_steps=_total_steps(config, dataset),
        batches=BatchSource(dataset, config.data, tc.batch_size, tc.seed),
        generator=torch.Generator().manual_seed(tc.seed + 7),
        train_sample=_train_eval_sample(dataset, config, tc),
        meter=_Throughput(cost["flops_per_token"], None),
        cost=cost,
    )
    return member, model


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
    built = [_build_member(config, device) for config in configs]
    members = [member for member, _ in built]
    model = model_lib.GPT.stack([m for _, m in built])
    del built
    optimizer = PackedAdamW(model, [c.optim for c in configs], [m.max_steps for m in members])
    dataset, n_members = members[0].dataset, len(members)
    counts = n_params(configs[0].model, len(dataset.format.vocab), dataset.train_seq_len())
    autocast = _autocast(device, first.precision)
    peak = first.peak_flops or _device_peak(device, autocast)
    for member in members:
        member.meter.peak_flops = peak
    forward = torch.compile(model) if first.compile else model
    abacus = configs[0].model.position == "abacus"
    # the longest digit run the format writes, at least k + 1 as before (arith.formats)
    max_run = max(
        configs[0].task.n_digits + 1, longest_digit_run(configs[0].format, configs[0].task)
    )
    pad_id = dataset.format.pad_id

    if resume_from is not None:
        states = ckpt.load(
            resume_from,
            model,
            optimizer,
            [m.batches for m in members],
            [m.generator for m in members],
        )
        for member, state in zip(members, states, strict=True):
            member.state, member.stop = state, state.stopped_reason or "max_steps"
            member.metrics = dict(state.final_metrics or {})  # a stopped member keeps its report
    elapsed_before = members[0].state.elapsed_before
    step = max(m.state.step for m in members)
    model.train()
    while True:
        # evaluate, checkpoint and report: each member on its own schedule
        due: list[int] = []
        for i, m in enumerate(members):
            if m.state.stopped_reason is not None:
                continue
            last = step >= m.max_steps or m.stop != "max_steps"
            if (step % m.config.train.eval_every == 0 and step > m.state.last_report_step) or last:
                elapsed = lambda: elapsed_before + time.perf_counter() - start_time  # noqa: E731
                member_dir = None
                if checkpoint_dir is not None:
                    member_dir = ckpt.member_dir(checkpoint_dir, i, n_members)
                _evaluate_member(
                    m, model.member(i), step, optimizer.lr(i), elapsed, device, member_dir
                )
                due.append(i)
        if checkpoint_dir is not None and due:
            at_save = elapsed_before + time.perf_counter() - start_time
            for m in members:
                if m.state.stopped_reason is None or m.state.step == step:
                    m.state.step = step
                m.state.elapsed_at_save = at_save
            ckpt.save(
                checkpoint_dir,
                [c.to_dict() for c in configs],
                model,
                optimizer,
                [m.batches for m in members],
                [m.generator for m in members],
                [m.state for m in members],
            )
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
        active = [i for i, m in enumerate(members) if m.state.stopped_reason is None]
        if not active:
            break

        # forward and backward: the members' batches stacked, member 0's rows first
        t0 = time.perf_counter()
        inputs, targets, mask, offsets = [], [], [], []
        for m in members:
            x, y, keep = m.batches.next_batch(device)
            inputs.append(x), targets.append(y), mask.append(keep)
            if abacus:  # McLeish et al. 2024: random shift so long numbers meet trained indices
                high = max(1, m.config.model.abacus_max_k - max_run)
                offsets.append(torch.randint(0, high, (x.shape[0],), generator=m.generator))
        inputs, targets = _stack_rows(inputs, pad_id), _stack_rows(targets, pad_id)
        mask = _stack_rows(mask, False)
        offset = torch.cat(offsets).to(device) if abacus else None
        with autocast:
            logits, _ = forward(inputs, abacus_offset=offset)
        # (B*T, vocab) rows: the (B, vocab, T) layout takes a slower kernel and two copies
        losses = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none")
        per_row = mask.view(n_members, -1)
        loss = (losses.view(n_members, -1) * per_row).sum(1) / per_row.sum(1).clamp(min=1)
        optimizer.zero_grad()
        loss.sum().backward()  # the members share no parameter: each gets its own gradient

        # clip, step: only the members still training
        optimizer.clip_grad_norms(active)
        optimizer.step(active)
        step += 1
        loss_values = loss.tolist()
        seconds = time.perf_counter() - t0
        rows = inputs.shape[0] // n_members
        for i in active:
            m = members[i]
            m.meter.add(seconds, rows, rows * inputs.shape[1], inputs.numel())
            if not math.isfinite(loss_values[i]):
                m.stop = "diverged"
            m.running_loss += loss_values[i]
            m.running_count += 1
        if progress is not None:  # every step: the bar shows the loss since the last evaluation
            m = members[active[0]]
            progress(step, m.max_steps, {"train/loss": m.running_loss / m.running_count})

    return [_summary(m, counts) for m in members]


def _stack_rows(parts: list[torch.Tensor], fill) -> torch.Tensor:
    """Members' (b, T_i) batches as one (M*b, max T) batch; padding is masked out of the loss."""
    if len(parts) == 1:
        return parts[0]
    width = max(p.shape[1] for p in parts)
    return torch.cat([F.pad(p, (0, width - p.shape[1]), value=fill) for p in parts])


def _evaluate_member(
    m: _Member,
    model,
    step: int,
    lr: float,
    elapsed: Callable[[], float],
    device,
    model_dir: Path | None,
) -> None:
    """Evaluate one member, update its stopping state and keep the metrics to report; at its
    end, measure the final sets on its chosen weights and save them to ``model_dir``."""
    tc = m.config.train
    last = step >= m.max_steps or m.stop != "max_steps"
    metrics: dict[str, Any] = {"step": step, "epoch": _epoch(step, tc, m.dataset), "lr": lr}
    if m.running_count:
        metrics["train/loss"] = m.running_loss / m.running_count
    m.running_loss, m.running_count = 0.0, 0
    metrics.update(m.meter.pop())
    metrics.update(_evaluate(model, m.dataset, device, m.train_sample, final=last))
    metrics["time/elapsed_s"] = elapsed()
    state = m.state
    if m.stop == "max_steps":
        m.stop = state.update(metrics, step, tc) or m.stop
        if tc.patience is not None and state.evals_without_improvement == 0:
            state.best_weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
            state.best_step = step
    if tc.time_budget_s and metrics["time/elapsed_s"] > tc.time_budget_s and m.stop == "max_steps":
        m.stop = "time_budget"
    if last or m.stop != "max_steps":
        _finish_member(m, model, step, device, model_dir)
        metrics.update(m.metrics)
        state.final_metrics = metrics
        state.wall_time_s = elapsed()
    state.step, state.last_report_step = step, step
    m.metrics = metrics


def _finish_member(m: _Member, model, step: int, device, model_dir: Path | None) -> None:
    """Measure the final sets on the member's chosen weights (the monitor's best with early
    stopping, else the last) into ``m.metrics``, and save that model to ``model_dir``."""
    state = m.state
    last_weights = None
    if state.best_weights is not None and state.best_step != step:
        last_weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        model.load_state_dict(state.best_weights)  # test what the monitor chose
    state.final_weights = "best" if state.best_weights is not None else "last"
    weights_step = state.best_step if state.best_weights is not None else step
    m.metrics = _final_sets(model, m.dataset, device)
    m.metrics.update(m.dataset.data_metrics())  # sizes and training overlap of each set
    m.metrics.update(final_weights_step=weights_step, done=1)
    if model_dir is not None:
        ckpt.save_model(model_dir, m.config, model, state.final_weights, weights_step)
    if last_weights is not None:  # the checkpoint stays the loop's true state
        model.load_state_dict(last_weights)
    state.best_weights = None  # a stopped member's copy is no longer needed
    state.stopped_reason = m.stop


def _summary(m: _Member, counts: dict[str, int]) -> dict[str, Any]:
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


def _total_steps(config: RunConfig, dataset: Dataset) -> int:
    tc = config.train
    if tc.epochs is None:
        return planned_steps(config)
    if dataset.train_pool is None:
        raise ConfigError(
            "train.epochs", "needs a finite training set; set data.train_size or use max_steps"
        )
    return max(1, math.ceil(tc.epochs * len(dataset.train_pool) / tc.batch_size))


def _epoch(step: int, tc: TrainConfig, dataset: Dataset) -> float:
    if dataset.train_pool is None:
        return 0.0
    return step * tc.batch_size / len(dataset.train_pool)


def _train_eval_sample(dataset: Dataset, config: RunConfig, tc: TrainConfig):
    """A fixed sample of training problems, decoded at each evaluation for train exact match."""
    rng = np.random.default_rng([tc.seed, 4])
    pool = dataset.train_pool
    if pool is None:
        return sample_split(
            dataset.task, config.data, dataset.split_salt, 0, tc.train_eval_size, rng
        )
    return pool.take(rng.permutation(len(pool))[: tc.train_eval_size])


def _evaluate(model, dataset: Dataset, device, train_sample, final: bool) -> dict[str, float]:
    out: dict[str, float] = {}
    train_metrics = evaluate_set(model, dataset.format, train_sample, device)
    out["train/exact_match"] = train_metrics["exact_match"]
    out["train/token_accuracy"] = train_metrics["token_accuracy"]
    for key, value in evaluate_set(model, dataset.format, dataset.eval_sets["val"], device).items():
        out[f"val/{key}"] = value
    return out


def _final_sets(model, dataset: Dataset, device) -> dict[str, float]:
    """Test and the extra sets, measured once at the end."""
    out: dict[str, float] = {}
    for name, problems in dataset.eval_sets.items():
        if name == "val":
            continue
        fmt = dataset.format_of(name)
        reference = dataset.format if fmt is not dataset.format else None
        for key, value in evaluate_set(model, fmt, problems, device, reference).items():
            out[f"{name}/{key}"] = value
    return out


def _autocast(device: torch.device, precision: str):
    use_bf16 = precision == "bf16" or (
        precision == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported()
    )
    if use_bf16:
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return torch.autocast(device_type=device.type, enabled=False)


# Dense bf16 tensor-core peaks (FLOP/s) from the vendors' datasheets, keyed by the exact name
# ``torch.cuda.get_device_name`` reports: one family's parts differ (the H100 PCIe card peaks at
# 756 TFLOP/s, the SXM one at 989), so a substring would pick the wrong one ("L4" is in "L40S").
GPU_PEAK_FLOPS = {
    "NVIDIA H100 80GB HBM3": 989e12,
    "NVIDIA H100 PCIe": 756e12,
    "NVIDIA H100 NVL": 835e12,
    "NVIDIA H200": 989e12,
    "NVIDIA A100-SXM4-40GB": 312e12,
    "NVIDIA A100-SXM4-80GB": 312e12,
    "NVIDIA A100-PCIE-40GB": 312e12,
    "NVIDIA A100 80GB PCIe": 312e12,
    "NVIDIA L40S": 362e12,
    "NVIDIA L4": 121e12,
    "NVIDIA A10": 125e12,
}


def gpu_peak_flops(device_name: str) -> float | None:
    """The bf16 peak of a GPU named exactly as torch names it; ``None`` for any other name
    (set ``train.peak_flops`` for MFU there)."""
    return GPU_PEAK_FLOPS.get(device_name.strip())


def _device_peak(device: torch.device, autocast) -> float | None:
    if device.type != "cuda" or autocast.fast_dtype != torch.bfloat16:
        return None
    return gpu_peak_flops(torch.cuda.get_device_name(device))

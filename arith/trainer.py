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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
import torch.nn.functional as F

from arith import checkpoint as ckpt
from arith import model as model_lib
from arith import tasks
from arith.data import BatchSource, Dataset, build_dataset, sample_split
from arith.errors import ConfigError, require
from arith.evaluate import OP_NAMES, carry_metric_names, evaluate_set
from arith.formats import FormatConfig, build_format
from arith.optim import build_optimizer

if TYPE_CHECKING:
    from arith.config import RunConfig

Report = Callable[[dict[str, Any]], None]

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


# Optimisation steps of a run that sets none of max_steps, epochs and the budgets.
DEFAULT_MAX_STEPS = 2000
# The keys that set a run's length; a budget excludes the others.
LENGTH_KEYS = ("max_steps", "epochs", "flops_budget", "tokens_budget")


@dataclass(frozen=True)
class TrainConfig:
    """How long and how one run trains, and when it stops."""

    seed: int = 0
    """Seeds the model's initialisation, batches, dropout and (unless data.seed) the split."""
    batch_size: int = 256
    """Problems per optimisation step."""
    max_steps: int | None = None
    """Optimisation steps; ``None``: DEFAULT_MAX_STEPS, unless ``epochs`` or a budget sets the
    length (``max_steps`` is ignored when ``epochs`` is set)."""
    epochs: float | None = None
    """Passes over a fixed training set instead of ``max_steps``."""
    flops_budget: float | None = None
    """Training FLOPs to spend instead of ``max_steps``: steps = ceil(budget / FLOPs per step),
    so a ladder of sizes can be compute-matched (isoFLOP, Hoffmann et al. 2022); see
    ``step_cost`` for what is counted."""
    tokens_budget: float | None = None
    """Training tokens to see instead of ``max_steps``: steps = ceil(budget / tokens per step)."""
    eval_every: int = 250
    """Steps between evaluations (and reports and checkpoints)."""
    train_eval_size: int = 512
    """Training problems decoded at each evaluation for ``train/exact_match``."""
    monitor: str = "val/exact_match"
    """Metric for early stopping, ``target`` and the best checkpoint; higher is better unless it
    is a loss."""
    patience: int | None = None
    """Stop after this many evaluations without improvement of ``monitor``; ``None``: never."""
    min_delta: float = 0.0
    """Smallest change of ``monitor`` that counts as an improvement."""
    target: float | None = None
    """Stop once ``monitor`` reaches this (seed 004 stops at 0.99 exact match)."""
    min_steps: int = 0
    """No early stop (patience or target) before this step."""
    threshold: float = 0.95
    """Validation exact match ``val/steps_to_threshold`` waits for (seed 003 groks at 95 %)."""
    device: str = "auto"
    """``auto`` (CUDA, then MPS, then CPU), or a torch device string."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """``auto``: bf16 autocast on CUDA devices that support it, fp32 elsewhere."""
    compile: bool = False
    """``torch.compile`` the training forward pass."""
    time_budget_s: float | None = None
    """Stop training after this many seconds (then evaluate and return)."""
    peak_flops: float | None = None
    """Device peak FLOP/s for ``perf/mfu``; ``None``: a known GPU's peak, else no MFU."""

    def __post_init__(self) -> None:
        require(self.batch_size >= 1, "train.batch_size", f"must be >= 1, got {self.batch_size}")
        require(
            self.max_steps is None or self.max_steps >= 1,
            "train.max_steps",
            f"must be >= 1 or null, got {self.max_steps}",
        )
        require(
            self.epochs is None or self.epochs > 0,
            "train.epochs",
            f"must be > 0, got {self.epochs}",
        )
        require(self.eval_every >= 1, "train.eval_every", f"must be >= 1, got {self.eval_every}")
        require(
            self.train_eval_size >= 1,
            "train.train_eval_size",
            f"must be >= 1, got {self.train_eval_size}",
        )
        require(
            self.patience is None or self.patience >= 1,
            "train.patience",
            f"must be >= 1 or null, got {self.patience}",
        )
        require(self.min_steps >= 0, "train.min_steps", f"must be >= 0, got {self.min_steps}")
        for key in ("flops_budget", "tokens_budget"):
            value = getattr(self, key)
            require(
                value is None or 0 < value < math.inf,
                f"train.{key}",
                f"must be > 0 or null, got {value}",
            )
        lengths = [k for k in LENGTH_KEYS if getattr(self, k) is not None]
        budgets = [k for k in lengths if k.endswith("_budget")]
        if budgets and len(lengths) > 1:
            other = next(k for k in lengths if k != budgets[-1])
            raise ConfigError(
                f"train.{budgets[-1]}",
                f"cannot be combined with train.{other}; a run's length comes from one of "
                "max_steps, epochs, flops_budget, tokens_budget (set the others to null)",
            )
        require(
            self.device == "auto" or self.device.split(":")[0] in ("cpu", "cuda", "mps"),
            "train.device",
            f"expected auto, cpu, cuda, cuda:N or mps, but got {self.device!r}",
        )
        require(
            self.time_budget_s is None or self.time_budget_s > 0,
            "train.time_budget_s",
            f"must be > 0 or null, got {self.time_budget_s}",
        )

    @property
    def higher_is_better(self) -> bool:
        return "loss" not in self.monitor


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
    return model_lib.GPT(config.model, len(fmt.vocab), dataset.max_seq_len(), fmt.digit_ids)


def step_cost(config: RunConfig) -> dict[str, int]:
    """What one optimisation step costs, as the budgets and the summary count it.

    ``tokens``: batch_size x the format's longest sequence (every position of a full-length
    batch; an upper bound where problems are shorter). ``flops``: tokens x ``flops_per_token``
    (arith.model: 6N + 12·L·d·T, the forward and backward matmuls, PaLM appendix B; embedding
    lookups, norms and the optimiser are not counted).
    """
    fmt = build_format(config.format, config.task)
    seq_len = fmt.max_seq_len()
    per_token = model_lib.flops_per_token(config.model, len(fmt.vocab), seq_len)
    tokens = config.train.batch_size * seq_len
    return {"tokens": tokens, "flops": tokens * per_token, "flops_per_token": per_token}


def planned_steps(config: RunConfig) -> int:
    """Steps the run trains unless stopped early: ceil(budget / cost per step) with a budget,
    else ``max_steps`` (DEFAULT_MAX_STEPS when null). With ``epochs`` the count needs the
    training set, which ``train`` builds; here it is ``max_steps``'s."""
    tc = config.train
    budget = tc.flops_budget if tc.flops_budget is not None else tc.tokens_budget
    if budget is None:
        return tc.max_steps if tc.max_steps is not None else DEFAULT_MAX_STEPS
    per_step = step_cost(config)["flops" if tc.flops_budget is not None else "tokens"]
    return max(1, math.ceil(budget / per_step))


def describe(config: RunConfig) -> dict[str, Any]:
    """Sizes and costs of a run without building its model or data (for dry runs): parameter
    counts, the cost of a step (``step_cost``), the planned steps and their tokens and FLOPs."""
    fmt = build_format(config.format, config.task)
    seq_len = fmt.max_seq_len()
    if config.data.longer_n_digits:
        seq_len = max(seq_len, fmt.max_seq_len(config.data.longer_n_digits[1]))
    if config.data.ood_spacing:
        spaced = build_format(FormatConfig(name="spaced"), config.task)
        seq_len = max(seq_len, spaced.max_seq_len())
    counts = model_lib.n_params(config.model, len(fmt.vocab), seq_len)
    cost = step_cost(config)
    steps = planned_steps(config)
    return {
        "n_params": counts["total"],
        "n_params_non_embedding": counts["non_embedding"],
        "flops_per_token": cost["flops_per_token"],
        "seq_len": seq_len,
        "vocab_size": len(fmt.vocab),
        "steps": steps,
        "tokens_per_step": cost["tokens"],
        "flops_per_step": cost["flops"],
        "tokens": cost["tokens"] * steps,
        "flops": cost["flops"] * steps,
        "total_flops": float(cost["flops"] * steps),
    }


def reported_metrics(config: RunConfig) -> set[str]:
    """Names of the metrics ``train`` reports or returns for this config (to validate sweeps)."""
    names = {"step", "epoch", "lr", "train/loss", "train/exact_match", "train/token_accuracy"}
    names.add("time/elapsed_s")
    names |= {"perf/examples_per_s", "perf/tokens_per_s", "perf/mfu"}
    names |= {"n_params", "n_params_non_embedding", "flops_per_token", "steps", "wall_time_s"}
    names.add("final_weights_step")
    names |= {"tokens", "flops"}
    names |= {"best/" + config.train.monitor, "train/steps_to_100pct", "val/steps_to_threshold"}
    sets = ["val", "test"]
    if config.data.longer_n_digits:
        sets.append("longer")
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
    if config.task.name in ("multi_op", "modular"):
        for symbol in tasks.op_symbols(config.task):
            names |= {f"{s}/exact_match/{OP_NAMES[symbol]}" for s in sets}
    longest = max([config.task.n_digits, *(config.data.longer_n_digits or ())])
    for s in sets:  # by longest carry / borrow chain (arith.carries)
        names |= {f"{s}/{key}" for key in carry_metric_names(config.task, longest)}
    if config.task.name in ("addition", "multiplication", "sorting"):
        # per longest-operand length, reported where a set has several lengths
        trained = range(1, config.task.n_digits + 1)
        lengths = {(s, n) for s in sets if s != "longer" for n in trained}
        if config.data.longer_n_digits:
            lo, hi = config.data.longer_n_digits
            lengths |= {("longer", n) for n in range(lo, hi + 1)}
        names |= {f"{s}/exact_match/len_{n}" for s, n in lengths}
    return names


class _Throughput:
    """Examples and tokens per second of training steps only (evaluation time excluded)."""

    def __init__(self, flops_per_token: int, peak_flops: float | None) -> None:
        self.flops_per_token, self.peak_flops = flops_per_token, peak_flops
        self.seconds, self.examples, self.tokens = 0.0, 0, 0

    def add(self, seconds: float, examples: int, tokens: int) -> None:
        self.seconds += seconds
        self.examples += examples
        self.tokens += tokens

    def pop(self) -> dict[str, float]:
        if self.seconds == 0:
            return {}
        tokens_per_s = self.tokens / self.seconds
        out = {
            "perf/examples_per_s": self.examples / self.seconds,
            "perf/tokens_per_s": tokens_per_s,
        }
        if self.peak_flops:
            out["perf/mfu"] = tokens_per_s * self.flops_per_token / self.peak_flops
        self.seconds, self.examples, self.tokens = 0.0, 0, 0
        return out


def train(
    config: RunConfig,
    report: Report | None = None,
    *,
    checkpoint_dir: str | Path | None = None,
    resume_from: str | Path | None = None,
    progress: Callable[[int, int, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Train one model and return its summary; see the module docstring."""
    tc = config.train
    start_time = time.perf_counter()
    torch.manual_seed(tc.seed)
    device = pick_device(tc.device)
    dataset = build_dataset(config.task, config.format, config.data, tc.seed)
    max_steps = _total_steps(config, dataset)
    model = build_model(config, dataset).to(device)
    optimizer, scheduler = build_optimizer(config.optim, model, max_steps)  # fused on CPU/CUDA
    batches = BatchSource(dataset, config.data, tc.batch_size, tc.seed)
    train_sample = _train_eval_sample(dataset, config, tc)
    counts = model_lib.n_params(config.model, len(dataset.format.vocab), dataset.max_seq_len())
    cost = step_cost(config)
    per_token = cost["flops_per_token"]
    autocast = _autocast(device, tc.precision)
    forward = torch.compile(model) if tc.compile else model
    abacus = config.model.position == "abacus"
    max_digits = max(config.task.n_digits, 1)
    gen = torch.Generator().manual_seed(
        tc.seed + 7
    )  # Abacus offsets, kept apart from dropout's RNG

    state = ckpt.LoopState()
    if resume_from is not None:
        state = ckpt.load(resume_from, model, optimizer, scheduler, batches, gen)
    meter = _Throughput(per_token, tc.peak_flops or _known_peak(device, autocast))
    step = state.step
    stopped_reason = "max_steps"
    running_loss, running_count = 0.0, 0
    best_weights: dict[str, torch.Tensor] | None = None
    best_step = step
    model.train()
    while True:
        # evaluate, checkpoint and report
        last = step >= max_steps or stopped_reason != "max_steps"
        if (step % tc.eval_every == 0 and step > state.last_report_step) or last:
            metrics = {
                "step": step,
                "epoch": _epoch(step, tc, dataset),
                "lr": scheduler.get_last_lr()[0],
            }
            if running_count:
                metrics["train/loss"] = running_loss / running_count
            running_loss, running_count = 0.0, 0
            metrics.update(meter.pop())
            metrics.update(_evaluate(model, dataset, device, train_sample, final=last))
            metrics["time/elapsed_s"] = state.elapsed_before + time.perf_counter() - start_time
            if stopped_reason == "max_steps":
                stopped_reason = state.update(metrics, step, tc) or stopped_reason
                if tc.patience is not None and state.evals_without_improvement == 0:
                    # early stopping on: the monitor's best weights, kept in memory (small)
                    best_weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
                    best_step = step
            if tc.time_budget_s and metrics["time/elapsed_s"] > tc.time_budget_s:
                stopped_reason = "time_budget" if stopped_reason == "max_steps" else stopped_reason
            last = last or stopped_reason != "max_steps"
            if last:
                last_weights = None
                if best_weights is not None and best_step != step:
                    last_weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
                    model.load_state_dict(best_weights)  # test what the monitor chose
                final_weights = "best" if best_weights is not None else "last"
                weights_step = best_step if best_weights is not None else step
                metrics.update(_final_sets(model, dataset, device))
                metrics["final_weights_step"] = weights_step
                metrics["done"] = 1
                if checkpoint_dir is not None:
                    ckpt.save_model(checkpoint_dir, config, model, final_weights, weights_step)
                if last_weights is not None:  # the checkpoint stays the loop's true state
                    model.load_state_dict(last_weights)
            state.step, state.last_report_step = step, step
            if checkpoint_dir is not None:
                state.elapsed_at_save = metrics["time/elapsed_s"]
                ckpt.save(checkpoint_dir, config, model, optimizer, scheduler, batches, gen, state)
                metrics["checkpoint"] = str(checkpoint_dir)
            if report is not None:
                report(metrics)
            if progress is not None:
                progress(step, max_steps, metrics)
            if last:
                break

        # forward and backward
        t0 = time.perf_counter()
        inputs, targets, mask = batches.next_batch(device)
        offset = None
        if abacus:  # McLeish et al. 2024: random shift so long numbers meet trained indices
            high = max(1, config.model.abacus_max_k - max_digits - 1)
            offset = torch.randint(0, high, (inputs.shape[0],), generator=gen).to(device)
        with autocast:
            logits, _ = forward(inputs, abacus_offset=offset)
        # (B*T, vocab) rows: the (B, vocab, T) layout takes a slower kernel and two copies
        losses = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none")
        loss = (losses * mask.flatten()).sum() / mask.sum().clamp(min=1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()

        # clip, step
        if config.optim.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.optim.grad_clip)
        optimizer.step()
        scheduler.step()
        step += 1
        loss_value = loss.item()
        meter.add(time.perf_counter() - t0, inputs.shape[0], int(inputs.numel()))
        if not math.isfinite(loss_value):
            stopped_reason = "diverged"
        running_loss += loss_value
        running_count += 1
        if progress is not None:  # every step: the bar shows the loss since the last evaluation
            progress(step, max_steps, {"train/loss": running_loss / running_count})

    elapsed = state.elapsed_before + time.perf_counter() - start_time
    summary = {k: v for k, v in metrics.items() if k not in ("checkpoint", "done")}
    summary.update(
        n_params=counts["total"],
        n_params_non_embedding=counts["non_embedding"],
        flops_per_token=per_token,
        steps=step,
        tokens=step * cost["tokens"],
        flops=step * cost["flops"],
        wall_time_s=elapsed,
        stopped_reason=stopped_reason,
        final_weights=final_weights,  # "best" (monitor's choice, early stopping on) or "last"
    )
    summary["best/" + tc.monitor] = state.best
    summary["train/steps_to_100pct"] = state.steps_to_100pct
    summary["val/steps_to_threshold"] = state.steps_to_threshold
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


# Dense bf16 tensor-core peaks (FLOP/s) from the vendors' datasheets, for MFU on known GPUs.
_GPU_PEAKS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12, "A10": 125e12}


def _known_peak(device: torch.device, autocast) -> float | None:
    if device.type != "cuda" or autocast.fast_dtype != torch.bfloat16:
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in _GPU_PEAKS.items() if key in name), None)

"""``python -m arith.bench [--quick] [--device auto|cpu|cuda] [--json FILE]``: throughput here.

Prints one markdown table per part, measured on whatever device is present:

- **peak**: the best matmul FLOP/s of a few square ``torch.mm`` sizes in fp32 and in bf16, the
  denominators of every MFU below, measured in the same run so they reflect this machine (a CPU
  without bf16 instructions shows a low bf16 peak: the figure is what the hardware gives);
- **data**: examples/s of sampling and encoding training batches
  (``BatchSource.next_batch``), and one batch's time as a share of one training step of the
  ~1M-parameter model;
- **train**: steps/s, tokens/s and model FLOPs utilisation of ``train()`` itself for a few
  model sizes, in fp32 and under bf16 autocast (``train.precision``), each MFU against the peak
  of its own precision, every step after warm-up timed from the end of the last warm-up step
  to the end of the last step (tokens = batch x the format's longest sequence, as
  ``step_cost`` counts them; FLOPs per token from :func:`arith.training.cost.flops_per_token`);
- **eval**: examples/s of batched greedy decoding (``predict_answers``) against one
  ``greedy_decode`` call per example, same model and problems.

``--quick`` shrinks everything to a smoke test of a few seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arith import config as config_lib
from arith.bench_report import render
from arith.cli import HelpFormatter, run_main
from arith.data.batches import BatchSource
from arith.data.dataset import build_dataset
from arith.evaluation.evaluate import greedy_decode, predict_answers
from arith.training.cost import step_cost
from arith.training.device import pick_device
from arith.training.trainer import build_model, train
from arith.training.transfers import synchronize

# The ~1M-parameter reference: seed 000's 4 layers x 128 on 4-digit plain addition.
ADDITION_K4 = ["task.name=addition", "task.n_digits=4", "task.operand_lengths=fixed"]
REFERENCE_MODEL = ["model.n_layer=4", "model.d_model=128", "model.n_head=4"]

DATA_CASES = {
    "addition 3-digit plain": ["task.n_digits=3", "format.name=plain"],
    "addition 20-digit reversed bucketed": [
        "task.n_digits=20",
        "task.operand_lengths=bucketed",
        "format.name=reversed",
    ],
    "multi_op 3-digit carry_trace": ["task.name=multi_op", "format.name=carry_trace"],
}


@dataclass(frozen=True)
class ModelCase:
    label: str
    shape: tuple[int, int, int]
    """(n_layer, d_model, n_head)."""


MODELS = (
    ModelCase("~100K", (2, 64, 4)),
    ModelCase("~1M", (4, 128, 4)),
    ModelCase("~3M", (4, 256, 8)),
)
REFERENCE = "~1M"
CPU = torch.device("cpu")


@dataclass(frozen=True)
class Sizes:
    """How much work each part does: the full run or ``--quick``."""

    batch_size: int
    train_warmup: int
    train_steps: int
    data_batches: int
    eval_batched: int
    eval_single: int
    models: tuple[ModelCase, ...]
    peak_sizes: tuple[int, ...]


FULL = Sizes(512, 3, 12, 20, 4000, 300, MODELS, (512, 768, 1024))
QUICK = Sizes(
    64,
    1,
    2,
    3,
    256,
    16,
    tuple(ModelCase(m.label, (1, 32, 2)) for m in MODELS[:2]),
    (256, 512),
)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _best_seconds(fn: Callable[[], Any], device: torch.device, repeats: int = 3, n: int = 5):
    """Fastest of ``repeats`` timings of ``n`` calls, per call (after one warm-up call)."""
    fn()
    _sync(device)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        _sync(device)
        best = min(best, (time.perf_counter() - start) / n)
    return best


def peak_matmul_flops(device: torch.device, dtype: torch.dtype, sizes: tuple[int, ...]) -> float:
    """Best FLOP/s of square ``torch.mm`` over ``sizes`` (2 n^3 FLOPs each)."""
    best = 0.0
    for n in sizes:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        seconds = _best_seconds(lambda a=a, b=b: torch.mm(a, b), device)
        best = max(best, 2 * n**3 / seconds)
    return best


PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}


def bench_peak(device: torch.device, sizes: Sizes) -> list[dict[str, Any]]:
    """The fp32 and bf16 peaks that training in each precision is measured against."""
    # a GPU needs far larger matrices than a CPU to reach its peak
    square = (2048, 4096, 8192) if device.type == "cuda" else sizes.peak_sizes
    return [
        {"dtype": dtype, "peak_flops": peak_matmul_flops(device, torch_dtype, square)}
        for dtype, torch_dtype in PRECISIONS.items()
    ]


def bench_data(sizes: Sizes) -> list[dict[str, Any]]:
    """Examples/s of ``next_batch`` (sampling and encoding on the CPU, kept on the CPU)."""
    rows = []
    for label, overrides in DATA_CASES.items():
        config = config_lib.load(None, overrides)
        dataset = build_dataset(config.task, config.format, config.data, 0)
        source = BatchSource(dataset, config.data, sizes.batch_size, 0)
        seconds = _best_seconds(lambda s=source: s.next_batch(CPU), CPU, n=sizes.data_batches)
        rows.append(
            {
                "case": label,
                "batch_size": sizes.batch_size,
                "ms_per_batch": seconds * 1e3,
                "examples_per_s": sizes.batch_size / seconds,
            }
        )
    return rows


def train_config(
    case: ModelCase,
    sizes: Sizes,
    device: str,
    peak: float,
    compile: bool = False,
    precision: str = "fp32",
):
    """A short run of ``train()``: warm-up and timed steps, evaluated only at 0 and at the end."""
    n_layer, d_model, n_head = case.shape
    small_eval = ["data.val_size=32", "data.test_size=32", "data.edge_cases=false"]
    return config_lib.load(
        None,
        [
            *ADDITION_K4,
            "format.name=plain",
            *small_eval,
            f"model.n_layer={n_layer}",
            f"model.d_model={d_model}",
            f"model.n_head={n_head}",
            f"train.batch_size={sizes.batch_size}",
            f"train.max_steps={sizes.train_warmup + sizes.train_steps}",
            # no evaluation between the first step and the last: none falls in the timed steps
            f"train.eval_every={sizes.train_warmup + sizes.train_steps}",
            "train.train_eval_size=32",
            f"train.device={device}",
            f"train.peak_flops={peak}",
            f"train.compile={str(compile).lower()}",
            f"train.precision={precision}",
        ],
    )


class StepClock:
    """A ``progress`` callback that notes when each step ended (its first call for a step: the
    trainer calls it after every step, and again at an evaluation), at the steps in ``marks``
    (every step without). No training step waits for the device, so a call comes when the host
    has queued its step: at a mark the clock waits for ``device`` to run it first."""

    def __init__(self, device: torch.device | None = None, marks: set[int] | None = None):
        self.device, self.marks = device, marks
        self.ended_at: dict[int, float] = {}

    def __call__(self, step: int, _max_steps: int, _metrics: dict[str, Any]) -> None:
        if step in self.ended_at or (self.marks is not None and step not in self.marks):
            return
        if self.device is not None:
            synchronize(self.device)
        self.ended_at[step] = time.perf_counter()

    def seconds(self, first: int, last: int) -> float:
        """Wall time of steps ``first + 1 .. last``."""
        return self.ended_at[last] - self.ended_at[first]


def train_row(config, clock: StepClock, warmup: int, peak: float) -> dict[str, Any]:
    """Throughput of the steps after ``warmup``: what was counted, the time and the ratios."""
    total = config.train.max_steps
    cost = step_cost(config)
    steps, seconds = total - warmup, clock.seconds(warmup, total)
    tokens = steps * cost["tokens"]
    tokens_per_s = tokens / seconds
    model_flops = tokens_per_s * cost["flops_per_token"]
    return {
        "batch_size": config.train.batch_size,
        "steps_timed": steps,
        "seconds": seconds,
        "tokens": tokens,
        "tokens_per_step": cost["tokens"],
        "steps_per_s": steps / seconds,
        "tokens_per_s": tokens_per_s,
        "model_flops": model_flops,
        "mfu": model_flops / peak,
    }


def bench_train(
    sizes: Sizes, device: str, peaks: dict[str, float], compile: bool
) -> list[dict[str, Any]]:
    """Every model in each precision (``peaks``: the peak of each), then the reference model
    compiled if asked."""
    rows = []
    cases = [(case, False, precision) for precision in peaks for case in sizes.models]
    if compile:
        cases += [(case, True, "fp32") for case in sizes.models if case.label == REFERENCE]
    for case, compiled, precision in cases:
        peak = peaks[precision]
        config = train_config(case, sizes, device, peak, compiled, precision)
        clock = StepClock(pick_device(device), {sizes.train_warmup, config.train.max_steps})
        start = time.perf_counter()
        summary = train(config, progress=clock)
        row = {
            "model": case.label + (" compiled" if compiled else ""),
            "precision": precision,
            "shape": "{}x{}".format(*case.shape[:2]),
            "n_params": summary["n_params"],
        }
        row.update(train_row(config, clock, sizes.train_warmup, peak))
        row["wall_s"] = time.perf_counter() - start
        rows.append(row)
    return rows


def bench_eval(sizes: Sizes, device: torch.device) -> list[dict[str, Any]]:
    """Batched decoding against one ``greedy_decode`` per problem, same model and problems."""
    config = config_lib.load(
        None, [*ADDITION_K4, "format.name=plain", *REFERENCE_MODEL, "data.test_size=4000"]
    )
    torch.manual_seed(0)
    dataset = build_dataset(config.task, config.format, config.data, 0)
    model = build_model(config, dataset).to(device).eval()
    fmt, problems = dataset.format, dataset.eval_sets["test"]
    batched = problems.take(np.arange(min(sizes.eval_batched, len(problems))))
    single = problems.take(np.arange(sizes.eval_single))
    limit = int(fmt.encode(batched).answer_len.max()) + 1

    def one_at_a_time() -> list[str]:
        encoded = fmt.encode(single)
        answers = []
        for row in range(len(single)):
            prompt = torch.from_numpy(encoded.tokens[row : row + 1, : encoded.prompt_len[row]])
            ids = greedy_decode(model, prompt.to(device), limit, fmt.eos_id)
            answers.append(fmt.decode(ids[0].cpu().numpy()))
        return answers

    batched_s = _best_seconds(
        lambda: predict_answers(model, fmt, batched, device, max_new_tokens=limit), device, 2, 1
    )
    single_s = _best_seconds(one_at_a_time, device, 1, 1)
    batched_rate, single_rate = len(batched) / batched_s, len(single) / single_s
    return [
        {
            "case": "batched (predict_answers)",
            "problems": len(batched),
            "examples_per_s": batched_rate,
        },
        {
            "case": "one at a time (greedy_decode, batch 1)",
            "problems": len(single),
            "examples_per_s": single_rate,
        },
        {"case": "speed-up", "problems": None, "examples_per_s": batched_rate / single_rate},
    ]


def _scaled(rows: list[dict[str, Any]], key: str, factor: float, new_key: str) -> None:
    for row in rows:
        row[new_key] = row[key] * factor


def run(sizes: Sizes, device: torch.device, compile: bool = False) -> dict[str, Any]:
    """Every part's rows, keyed by part; each training MFU uses the peak of its precision."""
    peak_rows = bench_peak(device, sizes)
    peaks = {row["dtype"]: row["peak_flops"] for row in peak_rows}
    train_rows = bench_train(sizes, str(device), peaks, compile)
    # measure the peaks again after training and keep the best: a peak taken while something
    # else ran would flatter the MFU
    for row, again in zip(peak_rows, bench_peak(device, sizes), strict=True):
        row["peak_flops"] = max(row["peak_flops"], again["peak_flops"])
    peaks = {row["dtype"]: row["peak_flops"] for row in peak_rows}
    for row in train_rows:
        row["mfu"] = row["model_flops"] / peaks[row["precision"]]
    data_rows = bench_data(sizes)
    eval_rows = bench_eval(sizes, device)
    reference = next(
        row for row in train_rows if row["model"] == REFERENCE and row["precision"] == "fp32"
    )
    step_ms = 1e3 / reference["steps_per_s"]
    for row in data_rows:
        row["pct_of_step"] = 100 * row["ms_per_batch"] / step_ms
    _scaled(peak_rows, "peak_flops", 1e-9, "peak_gflops")
    _scaled(train_rows, "model_flops", 1e-9, "model_gflops")
    _scaled(train_rows, "mfu", 100, "mfu_pct")
    return {
        "device": str(device),
        "threads": torch.get_num_threads(),
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "peak": peak_rows,
        "data": data_rows,
        "train": train_rows,
        "eval": eval_rows,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter,
        prog="python -m arith.bench",
        description=__doc__.split("\n")[0],
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument(
        "--compile", action="store_true", help="also time the reference model under torch.compile"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = pick_device(args.device)
    results = run(QUICK if args.quick else FULL, device, args.compile)
    print(render(results, REFERENCE))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    run_main(main)

"""``python -m sweeps.bench --pack``: packed against unpacked trials, trials per hour; and
``run_orchestrated``, a sweep timed through the driver, which every sweep bench uses.

Two ways, both for each model size and pack size P, members sharing one data split and differing
in ``train.seed`` (and, in-process, the learning rate):

- in this process (default): the same P trials trained one after the other with
  ``arith.training.trainer.train`` (each building its own data and model, as a trial in its
  own process does) and together with ``arith.training.trainer.train_pack``; training only,
  without Ray and MLflow;
- ``--sweep``: the same N trials as a whole sweep through ``sweeps.run``'s driver (a local Ray,
  MLflow on SQLite, the tables), two at a time on one CPU each, with ``sweep.pack: 1`` and with
  ``sweep.pack: P``: what a researcher waits for, Ray's and MLflow's cost per trial included.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import tempfile
import time
from pathlib import Path

from arith.cli import fail


def run_orchestrated(
    spec, workdir: Path, reuse_actors: bool = True
) -> tuple[float, dict[str, float], list[float]]:
    """Seconds for ``run_sweep`` end to end (Ray start and stop, MLflow, outputs included),
    the seconds of its phases, and when each trial's MLflow run ended (epoch seconds)."""
    from sweeps.runtime.driver import run_sweep

    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    timings: dict[str, float] = {}
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code = run_sweep(
            spec, workdir / "out" / spec.name, uri, timings=timings, reuse_actors=reuse_actors
        )
    seconds = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"error: the orchestrated sweep failed with exit code {code}")
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(spec.name)
    runs = client.search_runs(
        [experiment.experiment_id], filter_string="tags.`sweep.role` = 'trial'"
    )
    ends = sorted(r.info.end_time / 1000 for r in runs)
    return seconds, timings, ends


# Model shapes (d_model, n_layer, n_head) on 3-digit addition, heads of at least 8 channels;
# ``describe`` gives their parameter counts: 1.4K, 4.3K, 30K, 100K, 1M and 9.5M
# (arith.training.cost.n_params); 10m is for a GPU (``python -m sweeps.bench --gpu``).
PACK_SIZES = {
    "1k": (8, 1, 1),
    "5k": (16, 1, 2),
    "30k": (48, 1, 4),
    "100k": (64, 2, 4),
    "1m": (128, 5, 4),
    "10m": (256, 12, 8),
}


def pack_configs(size: str, n_members: int, steps: int, device: str) -> list:
    """``n_members`` run configs of one shape and one data split (``data.seed``) that differ in
    learning rate and ``train.seed`` (initial weights, batch order): a grid over one split."""
    from arith import config as config_lib

    d_model, n_layer, n_head = PACK_SIZES[size]
    common = [
        "task.n_digits=3",
        f"model.d_model={d_model}",
        f"model.n_layer={n_layer}",
        f"model.n_head={n_head}",
        "data.val_size=64",
        "data.test_size=64",
        "data.edge_cases=false",
        "data.seed=0",
        "train.batch_size=64",
        f"train.max_steps={steps}",
        f"train.eval_every={steps}",  # evaluate at the start and the end only: time training
        "train.train_eval_size=32",
        f"train.device={device}",
    ]
    return [
        config_lib.load(None, [*common, f"optim.lr={1e-3 * (1 + i / n_members):.6g}",
                               f"train.seed={i}"])
        for i in range(n_members)
    ]  # fmt: skip


def run_pack_bench(
    sizes: list[str], packs: list[int], steps: int, device: str, unpacked_sample: int | None = None
) -> list[dict]:
    """Rows of (size, n_params, pack, unpacked and packed trials per hour, their ratio).

    ``unpacked_sample``: time the unpacked side on at most that many of the members. Unpacked
    trials run one after another and each costs the same, so trials per hour is one trial's
    rate: a sample measures it without paying for all 64 (on a GPU, 64 unpacked 10M trials
    alone outran the acceptance run's 10 minutes)."""
    import torch

    from arith.training.cost import describe
    from arith.training.trainer import train, train_pack

    if device == "cpu":
        torch.set_num_threads(1)  # one CPU per trial, as a Tune trial holds
    # Warm up first: a process's first run pays for imports and first-call setup, which would
    # otherwise land on whichever side the first row times first.
    warm = pack_configs(sizes[0], 2, 2, device)
    train(warm[0])
    train_pack(warm)
    rows = []
    for size in sizes:
        for n_members in packs:
            configs = pack_configs(size, n_members, steps, device)
            timed = configs[:unpacked_sample] if unpacked_sample else configs
            start = time.perf_counter()
            for config in timed:
                train(config)
            unpacked = (time.perf_counter() - start) * n_members / len(timed)
            start = time.perf_counter()
            train_pack(configs)
            packed = time.perf_counter() - start
            rows.append(
                {
                    "size": size,
                    "n_params": describe(configs[0])["n_params"],
                    "pack": n_members,
                    "unpacked_trials_per_h": 3600 * n_members / unpacked,
                    "packed_trials_per_h": 3600 * n_members / packed,
                    "ratio": unpacked / packed,
                }
            )
            print(_pack_row(rows[-1]), flush=True)
    return rows


def _pack_row(row: dict) -> str:
    return (
        f"{row['size']:>5} {row['n_params']:>9,} {row['pack']:>5} "
        f"{row['unpacked_trials_per_h']:>14,.0f} {row['packed_trials_per_h']:>14,.0f} "
        f"{row['ratio']:>6.2f}"
    )


def pack_sweep_spec(
    size: str, n_trials: int, pack: int, steps: int, on_gpu: bool = False, concurrent: int = 2
) -> dict:
    """A sweep of ``n_trials`` seeds of one tiny shape on one data split, packed ``pack`` at a
    time, ``concurrent`` trials (or packs) at once on one CPU each; ``on_gpu``: with
    ``gpu: auto`` and ``train.device: auto``, so that they share the machine's GPUs."""
    d_model, n_layer, n_head = PACK_SIZES[size]
    return {
        "sweep": {
            "name": f"packbench_{size}_{pack}",
            "metric": "val/exact_match",
            "search": "grid",
            "seeds": list(range(n_trials)),
            "max_concurrent": concurrent,
            "resources": {"cpu": 1, "gpu": "auto" if on_gpu else 0},
            "max_failures": 0,
            "pack": pack,
        },
        "base": {
            "task": {"name": "addition", "n_digits": 3},
            "data": {"val_size": 64, "test_size": 64, "edge_cases": False, "seed": 0},
            "model": {"n_layer": n_layer, "d_model": d_model, "n_head": n_head},
            "train": {
                "max_steps": steps,
                "eval_every": steps,
                "batch_size": 64,
                "train_eval_size": 32,
                "device": "auto" if on_gpu else "cpu",
            },
        },
        "table": {"rows": ["train.seed"], "values": ["val/exact_match"], "aggregate": "mean"},
    }


def run_pack_sweeps(
    sizes: list[str],
    packs: list[int],
    n_trials: int,
    steps: int,
    on_gpu: bool = False,
    concurrent: int = 2,
) -> list:
    """Rows of (size, n_params, pack, seconds, trials per hour, ratio to pack 1) for whole
    sweeps of ``n_trials`` trials through the driver (``pack_sweep_spec``'s)."""
    from arith.training.cost import describe
    from sweeps.spec.space import grid_points, resolve_run_config
    from sweeps.spec.sweep_spec import parse_spec

    rows = []
    for size in sizes:
        unpacked = None
        for pack in packs:
            spec = parse_spec(pack_sweep_spec(size, n_trials, pack, steps, on_gpu, concurrent))
            first = resolve_run_config(spec.base, grid_points(spec)[0], spec.derived)
            # the driver's progress line would interleave with the rows
            with (
                tempfile.TemporaryDirectory(prefix="sweeps-bench-") as tmp,
                contextlib.redirect_stderr(io.StringIO()),
            ):
                seconds, _, _ = run_orchestrated(spec, Path(tmp))
            unpacked = seconds if pack == 1 else unpacked
            row = {
                "size": size,
                "n_params": describe(first)["n_params"],
                "pack": pack,
                "seconds": seconds,
                "trials_per_h": 3600 * n_trials / seconds,
                "ratio": None if unpacked is None else unpacked / seconds,
            }
            rows.append(row)
            ratio = "" if row["ratio"] is None else f"{row['ratio']:6.2f}"
            print(
                f"{size:>5} {row['n_params']:>9,} {pack:>5} {seconds:>9.1f} "
                f"{row['trials_per_h']:>14,.0f} {ratio:>6}",
                flush=True,
            )
    return rows


def at_once_on_a_gpu(n_trials: int) -> int:
    """Trials a sweep on a GPU machine runs at once, each sharing the card (``gpu: auto``): one
    per CPU, ``n_trials`` at most."""
    return min(n_trials, os.cpu_count() or 1)


def run_sharing_bench(sizes: list[str], n_trials: int, steps: int, on_gpu: bool) -> list[dict]:
    """Rows of (size, n_params, trials, at once, fractional and packed trials per hour, ratio):
    one sweep of ``n_trials`` trials through the driver (Ray, MLflow), as many at once as the
    machine has CPUs, each at that fraction of the GPU (``gpu: auto``) where ``on_gpu``, against
    the same sweep as one pack: which way ``gpu: auto`` should share a card."""
    at_once = at_once_on_a_gpu(n_trials)
    rows = []
    for size in sizes:
        fractional, packed = run_pack_sweeps(
            [size], [1, n_trials], n_trials, steps, on_gpu=on_gpu, concurrent=at_once
        )
        ratio = packed["trials_per_h"] / fractional["trials_per_h"]
        rows.append(
            {
                "size": size,
                "n_params": fractional["n_params"],
                "trials": n_trials,
                "at_once": at_once,
                "fractional_trials_per_h": round(fractional["trials_per_h"]),
                "packed_trials_per_h": round(packed["trials_per_h"]),
                "ratio": round(ratio, 2),
            }
        )
        faster = "one pack" if ratio > 1 else "fractional GPUs"
        print(f"{size:>5}: {faster} faster ({rows[-1]['ratio']}x packed)", flush=True)
    return rows


def pack_main(args: argparse.Namespace) -> int:
    sizes = [s.strip().lower() for s in args.sizes.split(",")]
    bad = [s for s in sizes if s not in PACK_SIZES]
    if bad:
        fail(f"--sizes: {bad[0]!r} is not one of {', '.join(PACK_SIZES)}")
    try:
        packs = [int(p) for p in args.packs.split(",")]
    except ValueError:
        fail(f"--packs: expected integers like 1,4,16, got {args.packs!r}")
    if min(packs) < 1:
        fail(f"--packs: must be >= 1, but got {min(packs)}")
    if args.sweep:
        if 1 not in packs or args.trials % max(packs):
            fail(f"--packs: with --sweep, 1 and divisors of --trials {args.trials}, got {packs}")
        # on a GPU, as many at once as there are CPUs, sharing the card (gpu: auto)
        on_gpu = args.device.startswith("cuda")
        at_once = at_once_on_a_gpu(args.trials) if on_gpu else 2
        where = "sharing the GPU (gpu: auto)" if on_gpu else "on CPUs"
        print(f"whole sweeps of {args.trials} trials, {args.steps} steps each, {at_once} at a")
        print(f"  time {where}, one CPU each (Ray, MLflow on SQLite, the tables); pack 1 is the")
        print("  baseline")
        print(
            f"{'size':>5} {'n_params':>9} {'pack':>5} {'seconds':>9} {'trials/h':>14} {'ratio':>6}"
        )
        run_pack_sweeps(sizes, packs, args.trials, args.steps, on_gpu, at_once)
        return 0
    print(f"packed trials, {args.steps} steps each, device {args.device}; trials per hour:")
    print(
        "  members: one data split (data.seed 0), each its own optim.lr and train.seed\n"
        "  unpacked: train() per trial, back to back in this process, each building its own\n"
        "    data and model as a sweep's trial does; without Ray's and MLflow's cost per trial\n"
        "  packed: train_pack() of the same trials; both on one torch thread, timed in pairs"
    )
    print(f"{'size':>5} {'n_params':>9} {'pack':>5} {'unpacked':>14} {'packed':>14} {'ratio':>6}")
    run_pack_bench(sizes, packs, args.steps, args.device)
    packed = [p for p in packs if p > 1]
    if packed:
        print("\none evaluation of every member (validation set and training sample), seconds:")
        print("  alone: each member's own model in turn; together: one batch through the pack")
        print(f"{'size':>5} {'pack':>5} {'alone':>8} {'together':>9} {'ratio':>6}")
        run_pack_eval_bench(sizes, packed, args.device)
    return 0


def run_pack_eval_bench(sizes: list[str], packs: list[int], device: str, repeats: int = 3):
    """Median seconds of one evaluation of every member of a pack of ``pack_configs``, each
    member alone and all together (``member_run.measure_together``), in pairs."""
    import statistics

    import torch

    from arith.training import member_run
    from arith.training.trainer import build_pack

    torch.set_num_threads(1)
    where = torch.device(device)
    for size in sizes:
        for n in packs:
            members, model = build_pack(pack_configs(size, n, 1, device), where)
            views = model.member_views()
            alone, together = [], []
            for _ in range(repeats):
                t0 = time.perf_counter()
                for view, m in zip(views, members, strict=True):
                    member_run.step_metrics(view, m.dataset, where, m.train_sample, {})
                alone.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                measured = member_run.measure_together(model, members, list(range(n)), where)
                for i, (view, m) in enumerate(zip(views, members, strict=True)):
                    done = measured.get(i, {})
                    member_run.step_metrics(view, m.dataset, where, m.train_sample, done)
                together.append(time.perf_counter() - t0)
            a, b = statistics.median(alone), statistics.median(together)
            print(f"{size:>5} {n:>5} {a:>8.4f} {b:>9.4f} {a / b:>6.2f}", flush=True)

"""``python -m sweeps.bench [--trials N] [--steps S] [--concurrent C]``: orchestration overhead;
``python -m sweeps.bench --pack [--sweep] [--sizes 30k,100k,1m] [--packs 1,4,16]``: packing
(``sweeps.bench_pack``);
``python -m sweeps.bench --flagship [--spec SPEC] [--from FOLDER] [--set K=V]``: the FLOP bound.
``python -m sweeps.bench --gpu [--report DIR]``: the GPU acceptance run (``sweeps.bench_gpu``).

Runs the same N tiny trials twice: through the orchestrator (an embedded Ray, Tune with actor
reuse, MLflow on SQLite, checkpoints at every report, the tables and plots at the end) and back
to back in this process, calling ``arith.training.trainer.train`` directly. Prints both wall times,
their ratio and the overhead per trial. Both sides train with one torch thread per trial, and
the orchestrator runs one trial at a time unless ``--concurrent`` says otherwise, so the
difference is the orchestration, not parallelism.

With ``--flagship``: runs the main job (``--spec``, default ``search_spaces/width_vs_depth.yaml``)
alone, timed, or reads a finished one (``--from`` its output folder, with the wall time that
``python -m sweeps.findings SPACE --run`` recorded), measures one core's matmul peak in each
precision its trials trained in (fp32, bf16), and prints each trial's MFU and the sweep's
fraction of its FLOP bound (``sweeps.analysis.compute_bound``).

With ``--pack``: packed against unpacked trials (``sweeps.bench_pack``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from arith.cli import HelpFormatter
from sweeps.bench_pack import pack_main, run_orchestrated


def bench_spec(n_trials: int, steps: int, concurrent: int) -> dict[str, Any]:
    """A sweep of ``n_trials`` seeds of a ~2-second config (2-digit addition, 1 x 32)."""
    return {
        "sweep": {
            "name": "bench",
            "metric": "val/exact_match",
            "search": "grid",
            "seeds": list(range(n_trials)),
            "max_concurrent": concurrent,
            "resources": {"cpu": 1, "gpu": 0},
            "max_failures": 0,
        },
        "base": {
            "task": {"name": "addition", "n_digits": 2},
            "data": {"val_size": 200, "test_size": 200, "edge_cases": False},
            "model": {"n_layer": 1, "d_model": 32, "n_head": 2},
            "optim": {"warmup_steps": 10},
            "train": {
                "max_steps": steps,
                "eval_every": max(1, steps // 4),
                "batch_size": 64,
                "train_eval_size": 128,
                "device": "cpu",
            },
        },
        "table": {"rows": ["train.seed"], "values": ["val/exact_match"], "aggregate": "mean"},
    }


def run_plain(spec) -> list[float]:
    """Seconds of each trial, trained back to back in this process."""
    import torch

    from arith.training.trainer import train
    from sweeps.spec.space import grid_points, resolve_run_config

    torch.set_num_threads(1)  # as in a Tune trial holding one CPU (Ray sets OMP_NUM_THREADS=1)
    configs = [resolve_run_config(spec.base, p, spec.derived) for p in grid_points(spec)]
    seconds = []
    for config in configs:
        start = time.perf_counter()
        train(config)
        seconds.append(time.perf_counter() - start)
    return seconds


def steady_state(ends: list[float], plain: list[float]) -> float:
    """Orchestration cost of one trial once everything is up: the time between consecutive
    trial ends (one at a time) minus the plain loop's time per trial, both without the first
    trial (Ray's worker start, torch's first-call warm-up, the database's first writes)."""
    per_trial = (ends[-1] - ends[0]) / (len(ends) - 1)
    return per_trial - sum(plain[1:]) / len(plain[1:])


FLAGSHIP = Path(__file__).resolve().parents[1] / "search_spaces" / "width_vs_depth.yaml"


def timed_sweep(spec: Path, sets: list[str], workdir: Path) -> tuple[Path, float]:
    """Runs ``python -m sweeps.run`` on ``spec`` into ``workdir``: its output folder and wall."""
    import json
    import subprocess

    out, db = workdir / "out", workdir / "mlflow.db"
    command = [sys.executable, "-m", "sweeps.run", str(spec), "--out", str(out)]
    command += ["--tracking-uri", f"sqlite:///{db}", *(f"--set={s}" for s in sets)]
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    folder = next(p.parent for p in out.glob("*/sweep.json"))
    (folder / "findings_run.json").write_text(json.dumps({"wall_s": round(wall, 1)}))
    return folder, wall


def flagship_main(args: argparse.Namespace) -> int:
    import json

    import pandas as pd

    from arith.bench import FULL
    from arith.cli import fail
    from sweeps.analysis.compute_bound import render_bound, sweep_bound, trial_mfu, trial_precision
    from sweeps.runtime.wall_estimate import core_peaks

    with tempfile.TemporaryDirectory(prefix="sweeps-bench-") as tmp:
        if args.from_folder:
            folder = Path(args.from_folder)
            record = folder / "findings_run.json"
            if not (folder / "trials.csv").is_file() or not record.is_file():
                fail(
                    f"--from: {folder}: needs trials.csv and findings_run.json "
                    "(a sweep run by python -m sweeps.findings SPACE --run, or --flagship)"
                )
            wall = json.loads(record.read_text())["wall_s"]
        else:
            print(f"running {args.spec} alone, timed ...", flush=True)
            folder, wall = timed_sweep(Path(args.spec), args.set or [], Path(tmp))
        trials = pd.read_csv(folder / "trials.csv")
        # one core (a trial holds one CPU), only the precisions the trials trained in
        peaks = core_peaks(sorted(set(trial_precision(trials))), 1, FULL.peak_sizes)
    n_cores = os.cpu_count() or 1
    print(render_bound(trial_mfu(trials, peaks), sweep_bound(trials, peaks, n_cores, wall), peaks))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter,
        prog="python -m sweeps.bench",
        description=__doc__.split("\n\n")[1],
    )
    parser.add_argument("--trials", type=int, default=8, help="trials (default 8)")
    parser.add_argument("--steps", type=int, default=100, help="steps per trial (default 100)")
    parser.add_argument("--concurrent", type=int, default=1, help="trials at once (default 1)")
    parser.add_argument(
        "--reuse-actors",
        choices=["on", "off"],
        help="Tune's reuse_actors for the orchestrated side (default: the sweeps' own setting)",
    )
    parser.add_argument("--pack", action="store_true", help="packed against unpacked trials")
    parser.add_argument("--sizes", default="30k,100k,1m", help="--pack: model sizes")
    parser.add_argument("--packs", default="1,4,16", help="--pack: pack sizes")
    parser.add_argument("--device", default="cpu", help="--pack: cpu, cuda, ... (default cpu)")
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="--pack: whole sweeps of --trials trials through the driver (Ray and MLflow included)",
    )
    parser.add_argument(
        "--flagship", action="store_true", help="the main job against its FLOP bound"
    )
    parser.add_argument("--spec", default=str(FLAGSHIP), help="--flagship: the search space")
    parser.add_argument(
        "--from", dest="from_folder", metavar="FOLDER", help="--flagship: a finished sweep"
    )
    parser.add_argument("--set", action="append", metavar="K=V", help="--flagship: overrides")
    parser.add_argument(
        "--gpu", action="store_true", help="the GPU acceptance run (one line without CUDA)"
    )
    parser.add_argument(
        "--report", metavar="DIR", help="--gpu: write report.md and figures.json into DIR"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.gpu:
        from sweeps.bench_gpu import gpu_main

        return gpu_main(None if args.report is None else Path(args.report))
    if args.flagship:
        return flagship_main(args)
    if args.pack:
        return pack_main(args)
    from sweeps.spec.sweep_spec import parse_spec

    spec = parse_spec(bench_spec(args.trials, args.steps, args.concurrent))
    if args.trials < 2:
        parser.error("--trials: at least 2 (the steady state leaves the first trial out)")
    from sweeps.runtime.tuning import REUSE_ACTORS

    reuse = REUSE_ACTORS if args.reuse_actors is None else args.reuse_actors == "on"
    with tempfile.TemporaryDirectory(prefix="sweeps-bench-") as tmp:
        per_trial = run_plain(spec)
        plain = sum(per_trial)
        print(f"plain loop:    {plain:7.2f} s  ({plain / args.trials:.2f} s per trial)", flush=True)
        orchestrated, phases, ends = run_orchestrated(spec, Path(tmp), reuse)
    n = args.trials
    how = f"Ray Tune + MLflow SQLite, {args.concurrent} at once, reuse_actors={reuse}"
    print(f"orchestrated:  {orchestrated:7.2f} s  ({how})")
    print("  phases:      " + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()))
    print(f"ratio:         {orchestrated / plain:7.2f}")
    print(f"overhead, end to end:  {(orchestrated - plain) / n:6.2f} s per trial  (Ray start and")
    print("                       stop, MLflow database creation, tables: all over N trials)")
    if args.concurrent == 1:
        steady = steady_state(ends, per_trial)
        print(f"overhead, steady state:{steady:6.2f} s per trial  (between consecutive trials,")
        print("                       once Ray and MLflow are up)")
    print(f"target:                  0.25 s per trial ({os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m sweeps.bench --gpu [--report DIR]``: the GPU acceptance run, at most about 8 minutes
on one CUDA card, the Ray path first (it has never run on a GPU), then the kernels:

1. the main job (``search_spaces/width_vs_depth.yaml``, its shipped ``gpu: auto``) through
   ``python -m sweeps.run``: Ray's placement, MLflow from a GPU trial, its table; the best trial
   chosen on validation and its test figure, cut at ``MAIN_JOB_S`` (``sweep.time_budget_s``);
2. one Ctrl-C and ``--resume`` on CUDA: the smoke sweep, longer, stopped once a trial has
   reported, then resumed: exit 130 then 0, every trial finished once, on which device;
3. the CUDA correctness tests (``pytest -m cuda`` on ``CUDA_TESTS``): bf16 against fp32, a pack
   against its members alone, cached decoding, a resumed run, compiled against eager, no
   synchronising call inside a step, the GPU's hardware record;
4. steps per second of one trial, eager against the whole step as one CUDA graph
   (``train.compile: graph``) and against ``torch.compile`` of the forward pass
   (``train.compile: true``), at 100K, 1M and 10M parameters, from each run's last interval
   (after the compile and the graphs' recording); and one evaluation of 1,000 problems, greedy
   decoding against decoding at fixed shapes through a captured step;
5. packs of 1, 16 and 64 members at 100K and 1M: trials per hour packed against unpacked
   (``sweeps.bench_pack.run_pack_bench``; the unpacked side timed on ``UNPACKED_SAMPLE`` of the
   members) and each pack's MFU against the card's bf16 peak where it trains in bf16;
6. sharing the card: 16 trials of 100K through ``sweeps.run``'s driver with ``gpu: auto``, as
   many at once as there are CPUs at that fraction of the GPU each, against one pack of 16.

A part that would not fit the time left is skipped and says so. ``--report DIR`` writes
``report.md`` and ``figures.json`` (every figure above) there. Without CUDA it says so in one
line and exits 0, writing nothing (tests/test_gpu_bench.py, which also rehearses the whole run on
the CPU at tiny sizes: ``pytest -m soak tests/test_gpu_bench.py``). Figures: docs/gpu.md."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeps.analysis.gpu_report import write_report

ROOT = Path(__file__).resolve().parents[1]
# The main job, as ``sweeps.bench.FLAGSHIP`` names it (not imported: sweeps.bench imports this).
MAIN_JOB = ROOT / "search_spaces" / "width_vs_depth.yaml"
SMOKE = ROOT / "search_spaces" / "smoke.yaml"
NO_CUDA = "no CUDA device: the GPU acceptance run needs one (torch.cuda.is_available() is False)"
CUDA_TESTS = [
    "tests/test_cuda.py",
    "tests/test_host_reads.py",
    "tests/test_hardware_params.py",
]
GPU_STEPS = 30  # per packed trial: past the first steps' warm-up, and 2 x 81 trials fit
# On an H200, 64 unpacked 10M trials took over 170 s alone; their rate from 8 of them.
UNPACKED_SAMPLE = 8
EVAL_PROBLEMS = 1000  # part 4's evaluation: the main job's validation set's size


STEP_MODES = ((False, "eager"), ("graph", "graph"), (True, "compiled"))
"""Part 4's ``train.compile`` values and their names in the figures, eager first."""


@dataclass(frozen=True)
class Plan:
    """What the run does, and on which device: ``GPU`` is the acceptance run; the tests rehearse
    it on the CPU at tiny sizes (``REHEARSAL``)."""

    device: str = "cuda"
    total_s: float = 480.0
    main_job: Path = MAIN_JOB
    main_job_s: float = 90.0
    main_job_sets: tuple[str, ...] = ()
    # the smoke sweep, long enough on a GPU that a Ctrl-C lands mid-sweep
    ctrl_c_sets: tuple[str, ...] = ("base.train.max_steps=600", "base.train.eval_every=100")
    run_tests: bool = True
    graph_sizes: tuple[str, ...] = ("100k", "1m", "10m")
    graph_steps: int = 200
    step_modes: tuple[tuple[bool | str, str], ...] = STEP_MODES
    pack_sizes: tuple[str, ...] = ("100k", "1m")
    packs: tuple[int, ...] = (1, 16, 64)
    pack_steps: int = GPU_STEPS
    unpacked_sample: int = UNPACKED_SAMPLE
    sharing_sizes: tuple[str, ...] = ("100k",)
    sharing_trials: int = 16
    sharing_steps: int = 200


GPU = Plan()
REHEARSAL = Plan(
    device="cpu",
    total_s=600.0,
    main_job=SMOKE,
    main_job_s=60.0,
    ctrl_c_sets=("base.train.max_steps=200", "base.train.eval_every=20"),
    run_tests=False,
    # eager and the graphed step (run eagerly here) at the tiniest size: part 4's code runs
    # before a GPU does; torch.compile on 2 CPU cores (~40 s a size) is left out
    graph_sizes=("1k",),
    graph_steps=20,
    step_modes=STEP_MODES[:2],
    pack_sizes=("1k",),
    packs=(1, 2),
    pack_steps=4,
    unpacked_sample=2,
    sharing_sizes=("1k",),
    sharing_trials=4,
    sharing_steps=20,
)


@dataclass
class Figures:
    """Everything the run measured, as ``figures.json`` holds it."""

    device: str = ""
    torch: str = ""
    started: str = ""
    parts: dict[str, Any] = field(default_factory=dict)
    total_s: float = 0.0


def gpu_main(report_dir: Path | None = None, plan: Plan = GPU) -> int:
    """The acceptance run (see the module docstring); 0 when every part that ran passed, or
    without CUDA (one line), else 1."""
    import torch

    if plan.device == "cuda" and not torch.cuda.is_available():
        print(NO_CUDA)
        return 0
    start = time.perf_counter()
    name = torch.cuda.get_device_name() if plan.device == "cuda" else plan.device
    figures = Figures(name, torch.__version__, time.strftime("%Y-%m-%d %H:%M:%S"))
    print(f"GPU acceptance run on {name}", flush=True)
    left = lambda: plan.total_s - (time.perf_counter() - start)  # noqa: E731
    parts = [
        ("main_job", plan.main_job_s + 60, lambda: run_main_job(plan)),
        ("ctrl_c_resume", 120, lambda: ctrl_c_then_resume(plan)),
        ("cuda_tests", 60, lambda: run_cuda_tests() if plan.run_tests else {"skipped": "CPU"}),
        # a size: torch.compile's ~40 s, the eager and graphed runs ~10 s each (estimated)
        ("eager_vs_compiled", 70 * len(plan.graph_sizes), lambda: eager_vs_compiled(plan)),
        ("packs", 90, lambda: packs(plan, name)),
        ("sharing", 90, lambda: sharing(plan)),
    ]
    for number, (key, needs_s, run) in enumerate(parts, 1):
        print(f"\n{number}. {key.replace('_', ' ')}", flush=True)
        if left() < needs_s:
            figures.parts[key] = {"skipped": f"{left():.0f} s left, ~{needs_s:.0f} s needed"}
            print(f"skipped: {figures.parts[key]['skipped']}")
            continue
        figures.parts[key] = run()
        if "skipped" in figures.parts[key]:
            print(f"skipped: {figures.parts[key]['skipped']}")
    figures.total_s = time.perf_counter() - start
    print(f"\ntotal: {figures.total_s:.0f} s (target {plan.total_s:.0f} s)")
    if report_dir is not None:
        write_report(report_dir, figures)
        print(f"report: {report_dir / 'report.md'}, figures: {report_dir / 'figures.json'}")
    failed = [key for key, part in figures.parts.items() if part.get("ok") is False]
    return 1 if failed else 0


def run_main_job(plan: Plan) -> dict[str, Any]:
    """Part 1: the main job through ``sweeps.run`` with its shipped ``gpu: auto``, cut at
    ``plan.main_job_s``: its exit code, time, and the best trial chosen on validation."""
    with tempfile.TemporaryDirectory(prefix="sweeps-gpu-") as tmp:
        sets = [*plan.main_job_sets, f"sweep.time_budget_s={plan.main_job_s:.0f}"]
        code, seconds = _sweep(plan.main_job, Path(tmp), sets)
        out = {"ok": code == 0, "exit_code": code, "seconds": round(seconds, 1)}
        out.update(_trials_figures(plan.main_job, Path(tmp)))
    print(f"main job: exit code {code}, {seconds:.0f} s; {_brief(out)}")
    return out


def ctrl_c_then_resume(plan: Plan) -> dict[str, Any]:
    """Part 2: the smoke sweep (longer) stopped by one Ctrl-C once a trial has reported, then
    ``--resume``: the exit codes (130, 0) and every trial finished, once each."""
    with tempfile.TemporaryDirectory(prefix="sweeps-gpu-") as tmp:
        workdir = Path(tmp)
        proc = _start_sweep(SMOKE, workdir, list(plan.ctrl_c_sets))
        results = workdir / "out" / "smoke" / "ray" / "smoke"
        reported = _wait(
            lambda: any(p.stat().st_size for p in results.glob("*/result.json")),
            timeout_s=180,
            proc=proc,
        )
        proc.send_signal(signal.SIGINT)
        try:
            stopped = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            stopped = None
        code, seconds = _sweep(SMOKE, workdir, list(plan.ctrl_c_sets), resume=True)
        trials = _trials_figures(SMOKE, workdir)
        every_trial = trials.get("finished_trials") == trials.get("trials") == 4
        out = {
            "ok": reported and stopped == 130 and code == 0 and every_trial,
            "pressed_after_a_report": reported,
            "stop_exit_code": stopped,
            "resume_exit_code": code,
            "resume_seconds": round(seconds, 1),
            **trials,
        }
    print(f"Ctrl-C: exit {stopped}; --resume: exit {code}; {_brief(out)}")
    return out


def run_cuda_tests() -> dict[str, Any]:
    """Part 3: ``pytest -m cuda`` on ``CUDA_TESTS``."""
    command = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", *CUDA_TESTS]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    tail = done.stdout.strip().splitlines()[-1:] or [done.stderr.strip()[-300:]]
    print(f"pytest -m cuda: {tail[0]}")
    return {
        "ok": done.returncode == 0,
        "command": " ".join(["python", *command[1:]]),
        "summary": tail[0],
        "seconds": round(time.perf_counter() - start, 1),
    }


def eager_vs_compiled(plan: Plan) -> dict[str, Any]:
    """Part 4: one trial's training steps per second, eager against the graphed step and
    against ``torch.compile``, from each run's last interval between evaluations (the compile
    and the graphs' recording fall in the first)."""
    if not plan.graph_sizes:
        return {"skipped": "no sizes"}
    rows = []
    for size in plan.graph_sizes:
        row: dict[str, Any] = {"size": size}
        for mode, name in plan.step_modes:
            rate, n_params = step_rate(size, plan.graph_steps, plan.device, mode)
            row["n_params"] = n_params
            row[f"{name}_steps_per_s"] = round(rate, 1)
        said = [f"eager {row['eager_steps_per_s']} steps/s"]
        for _, name in plan.step_modes[1:]:
            row[f"{name}_ratio"] = round(row[f"{name}_steps_per_s"] / row["eager_steps_per_s"], 2)
            said.append(f"{name} {row[f'{name}_steps_per_s']} ({row[f'{name}_ratio']}x)")
        if any(mode == "graph" for mode, _ in plan.step_modes):  # and its decoding, graphed
            row["eager_eval_s"] = round(eval_seconds(size, plan.device, fixed=False), 3)
            row["graph_eval_s"] = round(eval_seconds(size, plan.device, fixed=True), 3)
            row["graph_eval_ratio"] = round(row["eager_eval_s"] / row["graph_eval_s"], 2)
            said.append(f"evaluation {row['graph_eval_ratio']}x")
        print(f"{size:>5} ({row['n_params']:,} params): " + ", ".join(said), flush=True)
        rows.append(row)
    return {"rows": rows, "steps": plan.graph_steps}


def step_rate(size: str, steps: int, device: str, compile: bool | str) -> tuple[float, int]:
    """Steps per second of one ``size`` trial over its last ``steps // 2`` steps, and its
    parameter count."""
    from arith.training.trainer import train
    from sweeps.bench_pack import pack_configs

    (config,) = pack_configs(size, 1, steps, device)
    train_cfg = dataclasses.replace(config.train, compile=compile, eval_every=steps // 2)
    reports: list[dict] = []
    summary = train(dataclasses.replace(config, train=train_cfg), reports.append)
    last = [r for r in reports if "perf/examples_per_s" in r][-1]
    return last["perf/examples_per_s"] / config.train.batch_size, int(summary["n_params"])


def eval_seconds(size: str, device: str, fixed: bool) -> float:
    """Seconds one untrained ``size`` model takes to measure ``EVAL_PROBLEMS`` validation
    problems (every answer decoded to its full budget), the second time: with ``fixed``, its
    decoding at fixed shapes, captured as a CUDA graph the first time (``train.compile: graph``'s
    evaluation, arith.evaluation.static_decode)."""
    import contextlib

    import torch

    from arith.evaluation.evaluate import evaluate_set
    from arith.evaluation.static_decode import StaticDecoding
    from arith.training.trainer import build_pack
    from sweeps.bench_pack import pack_configs

    (config,) = pack_configs(size, 1, 2, device)
    data = dataclasses.replace(config.data, val_size=EVAL_PROBLEMS)
    (member,), model = build_pack([dataclasses.replace(config, data=data)], torch.device(device))
    problems, fmt = member.dataset.eval_sets["val"], member.dataset.format
    with StaticDecoding() if fixed else contextlib.nullcontext():
        evaluate_set(model, fmt, problems, torch.device(device))  # the capture, where fixed
        start = time.perf_counter()
        evaluate_set(model, fmt, problems, torch.device(device))  # reads its figures back
        return time.perf_counter() - start


def packs(plan: Plan, device_name: str) -> dict[str, Any]:
    """Part 5: packed against unpacked trials per hour, and each pack's MFU."""
    import torch

    from arith.training.cost import describe
    from arith.training.device import resolved_precision
    from arith.training.throughput import gpu_peak_flops
    from sweeps.bench_pack import pack_configs, run_pack_bench

    bf16_peak = gpu_peak_flops(device_name) if plan.device == "cuda" else None
    rows = run_pack_bench(
        list(plan.pack_sizes), list(plan.packs), plan.pack_steps, plan.device, plan.unpacked_sample
    )
    for row in rows:
        config = pack_configs(row["size"], 1, plan.pack_steps, plan.device)[0]
        achieved = describe(config)["total_flops"] * row["packed_trials_per_h"] / 3600
        # MFU against the bf16 peak only where the pack trains in bf16 (precision auto keeps
        # small widths in fp32 on CUDA, whose peak the table of cards does not hold)
        row["precision"] = resolved_precision(
            torch.device(plan.device), config.train.precision, config.model.d_model
        )
        peak = bf16_peak if row["precision"] == "bf16" else None
        row["packed_flop_per_s"] = achieved
        row["mfu"] = achieved / peak if peak else None
        mfu = f"{100 * row['mfu']:.1f} %" if peak else f"n/a ({row['precision']})"
        print(
            f"{row['size']:>5} pack {row['pack']:>3}: {row['unpacked_trials_per_h']:,.0f} -> "
            f"{row['packed_trials_per_h']:,.0f} trials/h ({row['ratio']:.2f}x), MFU {mfu}"
        )
    return {
        "rows": rows,
        "steps": plan.pack_steps,
        "unpacked_sample": plan.unpacked_sample,
        "peak_flop_per_s": bf16_peak,
    }


def sharing(plan: Plan) -> dict[str, Any]:
    """Part 6: how ``gpu: auto`` should share a card among same-shape trials (issue 46, item 2):
    fractional GPUs against one pack, whole sweeps (``sweeps.bench_pack.run_sharing_bench``)."""
    from sweeps.bench_pack import run_sharing_bench

    on_gpu = plan.device == "cuda"
    sizes, n, steps = list(plan.sharing_sizes), plan.sharing_trials, plan.sharing_steps
    return {"rows": run_sharing_bench(sizes, n, steps, on_gpu), "steps": steps}


def _brief(part: dict[str, Any]) -> str:
    keys = ("trials", "finished_trials", "best_trial", "best_val", "best_test", "devices")
    return ", ".join(f"{k} {part[k]}" for k in keys if k in part)


def _start_sweep(spec: Path, workdir: Path, sets: list[str], resume: bool = False):
    command = [
        sys.executable,
        "-m",
        "sweeps.run",
        str(spec),
        "--out",
        str(workdir / "out"),
        "--tracking-uri",
        f"sqlite:///{workdir}/mlflow.db",
        *[a for s in sets for a in ("--set", s)],
        *(["--resume"] if resume else []),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # the child keeps its own copy of the file: this process's closes at once
    with open(workdir / f"sweep-{'resume' if resume else 'run'}.log", "w") as log:
        return subprocess.Popen(command, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)


def _sweep(spec: Path, workdir: Path, sets: list[str], resume: bool = False):
    """(exit code, seconds) of ``sweeps.run`` run to its end."""
    start = time.perf_counter()
    code = _start_sweep(spec, workdir, sets, resume).wait()
    return code, time.perf_counter() - start


def _wait(check, timeout_s: float, proc) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and proc.poll() is None:
        if check():
            return True
        time.sleep(0.2)
    return False


def _trials_figures(spec_path: Path, workdir: Path) -> dict[str, Any]:
    """From the sweep's trials.csv: trials, those finished, the devices they trained on, the best
    trial chosen on the sweep's metric and its held-out figures."""
    import pandas as pd

    from sweeps.runtime.report import best_trial, held_out_figures
    from sweeps.spec.sweep_spec import load_spec

    spec = load_spec(spec_path, [])
    table = workdir / "out" / spec.name / "trials.csv"
    if not table.is_file():
        return {"trials_csv": "missing"}
    trials = pd.read_csv(table)
    out: dict[str, Any] = {"trials": len(trials)}
    if "status" in trials.columns:
        out["finished_trials"] = int((trials["status"] == "TERMINATED").sum())
    if "hardware.device" in trials.columns:
        out["devices"] = sorted(set(trials["hardware.device"].astype(str)))
    best = best_trial(trials, spec.sweep.metric, spec.sweep.mode)
    if best is not None:
        out["best_trial"] = str(best.get("trial_id"))
        out["best_val"] = float(best[spec.sweep.metric])
        test = held_out_figures(best).get("test/exact_match")
        out["best_test"] = test
    return out

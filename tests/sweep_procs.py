"""Helpers for the tests that run ``python -m sweeps.run`` as a real process and kill things:
start a sweep, watch its trials' result files, and read what MLflow ended up holding."""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mlflow import MlflowClient

from sweeps.analysis.run_values import run_figures

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "search_spaces" / "smoke.yaml"


SQLITE = "sqlite:///"
_TEMPLATE: list[Path] = []


def fresh_store(db: Path) -> str:
    """A new MLflow SQLite store at ``db`` (unless one is there already), and its URI: a copy
    of one this session's MLflow made once. MLflow spends 4-7 s on 2 cores making a new
    store's tables (its migrations, one by one), which every test that gave a sweep, a server or
    a tracker a store of its own paid. The copy is SQLite's own backup, of a store no process
    writes. Not for a test whose sweep must make its store (one that asserts nothing was made,
    or times a Ctrl-C by the store's file)."""
    if not _TEMPLATE:
        folder = Path(tempfile.mkdtemp(prefix="mlflow-template-"))
        atexit.register(shutil.rmtree, folder, True)
        MlflowClient(f"{SQLITE}{folder / 'template.db'}").search_experiments(max_results=1)
        _TEMPLATE.append(folder / "template.db")
    if not db.exists():
        db.parent.mkdir(parents=True, exist_ok=True)
        source, copy = sqlite3.connect(_TEMPLATE[0]), sqlite3.connect(db)
        with contextlib.closing(source), contextlib.closing(copy):
            source.backup(copy)
    return f"{SQLITE}{db}"


def start_sweep(
    tmp: Path,
    uri: str,
    sets: list[str],
    *,
    resume: bool = False,
    spec: Path = SMOKE,
    log="run",
    flags: tuple[str, ...] = (),
    new_session: bool = False,
    launcher: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> subprocess.Popen:
    """The real command; ``flags``: more of its flags (``--extend``). ``new_session``: in a
    session of its own, so that ``ctrl_c`` can signal its process group as a terminal does.
    ``launcher``: a script (and its arguments) that runs ``-m sweeps.run ...`` itself, watching
    it (``tests/callback_probe.py``). ``env``: more of its environment (a head's token)."""
    # Tune snapshots the experiment (trial list, result files) every 10 s or more; these
    # sweeps last seconds: snapshots ten times a second let the tests see a trial mid-run (its
    # result file is copied with them) and give each kill more snapshots to land between.
    extra = env or {}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TUNE_GLOBAL_CHECKPOINT_S": "0.1", **extra}
    env.pop("MLFLOW_TRACKING_URI", None)
    args = [sys.executable, *launcher, "-m", "sweeps.run", str(spec), "--out", str(tmp / "out")]
    args += ["--tracking-uri", uri, *(f"--set={s}" for s in sets)]
    if resume:
        args.append("--resume")
    args += flags
    out = open(tmp / f"{log}.out", "w")  # noqa: SIM115 -- the process outlives this call
    err = open(tmp / f"{log}.err", "w")  # noqa: SIM115
    return subprocess.Popen(
        args, cwd=tmp, stdout=out, stderr=err, env=env, start_new_session=new_session
    )


def run_to_end(
    tmp: Path,
    uri: str,
    sets: list[str],
    *,
    resume: bool = False,
    log: str = "run",
    launcher: tuple[str, ...] = (),
    timeout_s: float = 300,
):
    """``python -m sweeps.run`` (run by ``launcher``, as ``start_sweep``) to its end; (exit
    code, stderr)."""
    proc = start_sweep(tmp, uri, sets, resume=resume, log=log, launcher=launcher)
    try:
        proc.wait(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            kill(proc)
    return proc.returncode, (tmp / f"{log}.err").read_text()


def ctrl_c(proc: subprocess.Popen) -> None:
    """Ctrl-C at a terminal: SIGINT to the foreground process group (``new_session``)."""
    os.killpg(proc.pid, signal.SIGINT)


def result_lines(experiment_dir: Path) -> dict[str, list[dict]]:
    """Trial directory name -> the results Tune's JSON logger wrote for it (on the driver)."""
    found = {}
    for path in sorted(experiment_dir.glob("*/result.json")):
        lines = []
        for line in path.read_text().splitlines():
            try:
                lines.append(json.loads(line))
            except ValueError:
                break  # a line being written
        found[path.parent.name] = lines
    return found


def wait_until(check: Callable[[], object], timeout_s: float, proc=None, every_s: float = 0.2):
    """Poll ``check`` until it returns something truthy; None if ``proc`` exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            return None
        time.sleep(every_s)
    return None


def is_ray_worker(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::")
    except OSError:
        return False


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def children(uri: str, experiment: str):
    """(parent runs, child runs) of an experiment."""
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return [], []
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("sweep.role") == "parent"]
    trials = [r for r in runs if r.data.tags.get("sweep.role") == "trial"]
    return parents, trials


def metric_steps(uri: str, run) -> dict[str, list[int]]:
    """Every metric of a run -> the steps of its whole history, in logged order."""
    client = MlflowClient(uri)
    return {
        key: [m.step for m in client.get_metric_history(run.info.run_id, key)]
        for key in run.data.metrics
    }


def assert_no_duplicate_steps(uri: str, runs) -> int:
    """No (key, step) pair logged twice in any run; returns how many pairs were checked."""
    checked = 0
    for run in runs:
        for key, steps in metric_steps(uri, run).items():
            assert len(steps) == len(set(steps)), (run.data.tags.get("sweep.trial_id"), key, steps)
            checked += len(steps)
    return checked


def assert_diagnostics_logged(client: MlflowClient, run) -> None:
    """A trial's data diagnostics and embedding trajectories (sweeps.analysis.plot_diagnostics)
    on its run: no evaluation set shares a problem with training, nor test with validation."""
    overlaps = {k: v for k, v in run_figures(run).items() if k.endswith("_overlap")}
    assert {"data/val/train_overlap", "data/test/train_overlap", "data/test/val_overlap"} <= set(
        overlaps
    ), overlaps
    assert set(overlaps.values()) == {0.0}, overlaps
    root = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"embeddings.png", "embeddings.json"} <= root, root
    diagnostics = {a.path for a in client.list_artifacts(run.info.run_id, "diagnostics")}
    assert diagnostics == {f"diagnostics/{n}" for n in ("answers.png", "carries.png", "data.json")}


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_mlflow_server(root: Path, port: int, timeout_s: float = 120) -> subprocess.Popen:
    """A real ``mlflow server`` on 127.0.0.1:port with its SQLite store and artifacts in root;
    returns once /health answers. Stop it with ``stop_mlflow_server``."""
    import urllib.request

    mlflow_bin = Path(sys.executable).with_name("mlflow")
    fresh_store(root / "server.db")
    proc = subprocess.Popen(
        [
            str(mlflow_bin),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            f"sqlite:///{root / 'server.db'}",
            "--artifacts-destination",
            str(root / "artifacts"),
            "--workers",
            "1",
        ],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "MLFLOW_LOGGING_LEVEL": "WARNING"},
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop_mlflow_server(proc)
                raise RuntimeError(f"mlflow server did not start ({proc.poll()})") from None
            time.sleep(0.3)


def stop_mlflow_server(proc: subprocess.Popen) -> None:
    """Stop the server and its workers (its own process group)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=30)
            return
        except subprocess.TimeoutExpired:
            continue


def reference_trials(
    sets: list[str], keys: tuple[str, ...], spec: Path = SMOKE, points: list[dict] | None = None
):
    """The trials of a sweep trained back to back in this process, never interrupted (one torch
    thread, as in a one-CPU Tune trial): a DataFrame of the swept values and ``keys``, with the
    convergence label the sweep computes from each trial's curves. ``points``: the trials'
    flat configs (random search's draws); the spec's grid when not given."""
    import pandas as pd
    import torch

    from arith.training.trainer import train
    from sweeps.analysis.collect import with_convergence
    from sweeps.spec.space import grid_points, resolve_run_config
    from sweeps.spec.sweep_spec import load_spec

    loaded = load_spec(spec, sets)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rows, curves = [], []
    try:
        for index, point in enumerate(grid_points(loaded) if points is None else points):
            config = resolve_run_config(loaded.base, point, loaded.derived)

            def keep(metrics: dict, trial: int = index) -> None:
                for name, value in metrics.items():
                    if isinstance(value, int | float) and "/" in name:
                        curves.append((trial, name, metrics["step"], float(value)))

            summary = train(config, keep)
            rows.append(
                {
                    "trial_id": index,
                    **point,
                    **{k: summary[k] for k in keys},
                    "status": "TERMINATED",
                    "stopped_reason": summary["stopped_reason"],
                }
            )
    finally:
        torch.set_num_threads(threads)
    curves_frame = pd.DataFrame(curves, columns=["trial_id", "metric", "step", "value"])
    return with_convergence(pd.DataFrame(rows), curves_frame, loaded.sweep.metric)


# What sweeps.run says on stderr before Ray is up; a refusal after them is still one error line.
STATUS_LINES = ("connecting to the Ray cluster at ", "starting a local Ray ")


def error_lines(stderr: str) -> list[str]:
    """stderr without the start-up status lines."""
    return [line for line in stderr.strip().splitlines() if not line.startswith(STATUS_LINES)]


def call_main(argv: list[str], out: io.StringIO | None = None) -> tuple[int, str]:
    """``python -m sweeps.run ARGV`` in-process: (exit code, stderr); stdout goes to ``out``
    when given."""
    from arith.cli import run_main
    from sweeps import run

    err, out = io.StringIO(), io.StringIO() if out is None else out
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            run_main(lambda: run.main(argv), freeze_at_exit=False)
        except SystemExit as stop:
            return int(stop.code or 0), err.getvalue()
    raise AssertionError("run_main always exits")


@dataclass
class FakeTrial:
    """What the tracker callback reads of a Tune Trial (the tests drive the callback by hand)."""

    trial_id: str
    config: dict
    status: str = "RUNNING"
    last_result: dict = field(default_factory=dict)
    error_file: str | None = None

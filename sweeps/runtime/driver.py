"""The driver of a sweep, the body of ``python -m sweeps.run``: ``run_sweep`` checks what it
can before Ray starts, trains every trial with Ray Tune (an embedded local Ray unless an
address is given), records it in MLflow from this process, then writes the scaling table and
plots from MLflow into DIR/<name>/ and prints the best trial; ``dry_run_text`` lists the trials
instead."""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sweeps.runtime import tuning
from sweeps.spec.sweep_spec import SweepSpec
from sweeps.tracking.outbox import one_line

# MLflow writes waiting for an unreachable tracking server (sweeps.tracking.outbox), beside the
# outputs.
JOURNAL_FILE = "mlflow_outbox.jsonl"


def dry_run_text(spec: SweepSpec) -> str:
    """The trials a sweep would run, with sizes and estimated training FLOPs (nothing starts)."""
    from arith.cost import describe
    from sweeps.spec.space import n_trials, resolve_run_config, tune_ordered_points

    s = spec.sweep
    lines = [
        f"sweep {spec.name}: search={s.search} metric={s.metric} ({s.mode}) "
        f"scheduler={s.scheduler.name} num_samples={s.num_samples}"
    ]
    sampled = [d for d in spec.space.values() if not (d.is_grid and s.search == "grid")]
    for dim in sampled:
        lines.append(f"  sampled {dim.key}: {dim.describe()}")
    for path, rule in spec.derived.items():
        lines.append(f"  derived {path} = {rule.expression}")
    points = tune_ordered_points(spec)
    numbered = "" if s.search == "optuna" else ", numbered as Tune's trial ids end (_00000)"
    lines.append(
        f"{n_trials(spec)} trials ({len(points)} grid points x {s.num_samples} samples{numbered}):"
    )
    total_flops = 0.0
    for i, point in enumerate(points):
        low = {d.key: d.values[0] for d in sampled}
        cfg = resolve_run_config(spec.base, {**point, **low}, spec.derived)
        size = describe(cfg)
        total_flops += size["total_flops"] * s.num_samples
        shown = {**point, **{p: cfg.flat()[p] for p in spec.derived}}
        lines.append(
            f"  {_trial_numbers(i, len(points), s.num_samples)}  {_fmt_point(shown)}  "
            f"n_params={size['n_params']:,}  steps={size['steps']:,}  "
            f"flops~{size['total_flops']:.2e}"
        )
    note = " (sampled axes at their first value)" if sampled else ""
    lines.append(f"estimated training FLOPs in all: {total_flops:.2e}{note}")
    if s.pack != 1:
        lines += _pack_lines(spec)
    return "\n".join(lines)


def _pack_lines(spec: SweepSpec) -> list[str]:
    """The packs a packed sweep trains: which trials (by their ids' ends) share one process."""
    from arith.cost import describe
    from sweeps.spec.packing import build_packs
    from sweeps.spec.space import resolve_run_config

    packs = build_packs(spec)
    n = sum(len(p) for p in packs)
    lines = [f"{len(packs)} packs (sweep.pack={spec.sweep.pack}) train these {n} trials:"]
    for k, pack in enumerate(packs):
        numbers = ",".join(f"{m.index:05d}" for m in pack)
        config = resolve_run_config(spec.base, pack[0].point, spec.derived)
        mib = len(pack) * describe(config)["train_bytes"] / 2**20
        lines.append(f"  pack {k}: {len(pack)} trial(s) {numbers} (training memory ~{mib:.0f} MiB)")
    return lines


def _trial_numbers(i: int, n_points: int, n_samples: int) -> str:
    """``00003``, or with repeats ``00003,00007,...`` (repeat r of point i is trial r*n+i)."""
    numbers = [f"{r * n_points + i:05d}" for r in range(min(n_samples, 3))]
    return ",".join(numbers) + (",..." if n_samples > 3 else "")


def _fmt_point(point: dict[str, Any]) -> str:
    if not point:
        return "(base config)"
    return " ".join(
        f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in point.items()
    )


def run_sweep(
    spec: SweepSpec,
    out_dir: Path,
    tracking_uri: str,
    *,
    address: str | None = None,
    resume: bool = False,
    overwrite: bool = False,
    storage: str | None = None,
    storage_shared: bool = False,
    timings: dict[str, float] | None = None,
    reuse_actors: bool = tuning.REUSE_ACTORS,
) -> int:
    """Run (or with ``resume``, continue) the sweep and write its outputs; returns the exit
    code. ``timings`` (if given) receives the seconds of each phase: startup (Ray, MLflow),
    tune, outputs. ``reuse_actors``: Tune's setting (``sweeps.bench`` compares both)."""
    from sweeps.cluster import connection as cluster
    from sweeps.cluster import tunefix
    from sweeps.runtime import resume as resuming

    _quiet_logs()
    timings = {} if timings is None else timings
    start = time.perf_counter()
    # Before Ray starts: a Ray this project does not support, a store that cannot be reached,
    # or nothing to resume, is one line.
    try:
        tunefix.require_supported_ray()
        check_tracking_uri(tracking_uri)
        if resume:
            cluster.check_resume_address(address)
        resuming.preflight(tracking_uri)
        if resume:
            parent_id = resuming.parent_to_resume(spec, out_dir, tracking_uri, storage=storage)
            resuming.quiet_unstarted_trials()
            for name, what in resuming.repair_snapshot(spec, out_dir, storage).items():
                print(f"{name}: {what}", file=sys.stderr)
        else:
            parent_id = None
            # Never two sweeps in one folder: continue the earlier one, or clear it first.
            earlier = resuming.earlier_sweep(spec, out_dir, storage)
            if earlier and not overwrite:
                raise resuming.refuse_earlier(spec, earlier, out_dir, tracking_uri)
            if earlier:
                resuming.remove_earlier(spec, out_dir, storage)
    except (resuming.SweepError, tunefix.UnsupportedRay, cluster.ClusterError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    import ray

    started_ray = not ray.is_initialized()
    storage = cluster.storage_path(storage, out_dir)
    if started_ray and address:
        print(f"connecting to the Ray cluster at {address} ...", file=sys.stderr, flush=True)
        # Before MLflow records anything, and before the Tuner (through Ray Client, Tune
        # builds it on the head): a cluster that cannot run this sweep is one line.
        try:
            cluster.connect(address)
            cluster.check_storage(storage, shared=storage_shared, via_client="://" in address)
        except cluster.ClusterError as err:
            ray.shutdown()
            print(f"error: {err}", file=sys.stderr)
            return 2
    slots = tuning.uses_slots(spec, started_ray and not address)
    if address and spec.sweep.max_concurrent and not slots and spec.sweep.search != "optuna":
        print(
            f"note: sweep.max_concurrent={spec.sweep.max_concurrent} caps a local Ray only; on "
            "a cluster, its resources decide how many trials run at once",
            file=sys.stderr,
        )
    tuner, tracker = build_tuner(
        spec,
        out_dir,
        tracking_uri,
        resume=resume,
        storage=storage,
        reuse_actors=reuse_actors,
        slots=slots,
    )
    # A fresh MLflow database spends seconds creating its tables, Ray seconds starting its
    # processes: do both at once.
    with ThreadPoolExecutor(max_workers=1) as pool:
        if parent_id is not None:
            parent = pool.submit(resuming.attach, tracker, parent_id)
        else:
            parent = pool.submit(resuming.start_parent, tracker, spec, out_dir)
        if started_ray and not address:
            # Ray takes ~10 s to start its processes; say so rather than sit silent.
            print(f"starting a local Ray ({os.cpu_count()} CPUs) ...", file=sys.stderr, flush=True)
            _init_ray(spec.sweep.max_concurrent if slots else None)
        parent.result()
    timings["startup"] = time.perf_counter() - start
    try:
        return _run(spec, tuner, tracker, out_dir, timings)
    finally:
        if started_ray:
            ray.shutdown()  # on a cluster we connected to: disconnects, the cluster stays


def check_tracking_uri(uri: str) -> None:
    """The stores a sweep logs to: an MLflow server or a SQLite file (an ``mlruns`` folder or a
    ``file:`` URI would fail after Ray started, in a traceback)."""
    from sweeps.analysis.store import is_sqlite
    from sweeps.runtime.resume import SweepError, is_http

    if not (is_http(uri) or is_sqlite(uri)):
        raise SweepError(
            f"--tracking-uri: expected http(s)://HOST:PORT or sqlite:///PATH.db, but got {uri!r}"
        )


def _run(spec: SweepSpec, tuner, tracker, out_dir: Path, timings: dict[str, float]) -> int:
    from sweeps.analysis import collect
    from sweeps.analysis.convergence import improving_line
    from sweeps.analysis.table_fits import fit_metrics, table_fits

    start = time.perf_counter()
    parent_id, tracking_uri = tracker.parent_run_id, tracker.tracking_uri
    status = "FAILED"
    try:
        results = tuner.fit()
        timings["tune"] = time.perf_counter() - start
        if not tracker.outbox.drain(tracker.drain_timeout_s):
            print(f"error: {_undelivered(tracker, out_dir)}", file=sys.stderr)
            return 1
        # The tables come from MLflow alone, as `python -m sweeps.table` rebuilds them.
        trials, curves = collect.trials_from_mlflow(tracking_uri, spec.name, parent_id)
        trials = collect.with_convergence(trials, curves, spec.sweep.metric)
        axes = collect.swept_paths(spec.raw)
        best = best_trial(trials, spec.sweep.metric, spec.sweep.mode)
        paths = collect.write_outputs(
            trials, curves, spec.tables, out_dir, metric=spec.sweep.metric, axes=axes
        )
        # Through the outbox like every write: a store hiccup here waits (and, past the wait,
        # stays in the journal for --resume) instead of ending the sweep in a traceback.
        tracker.log_outputs(paths)
        fits = fit_metrics(table_fits(trials, spec.tables)) if len(trials) else {}
        tracker.log_parent_figures(fits, what="the tables' fits")
        try:
            ui = _log_key_figures(spec, tracker, trials, axes, best)
        except Exception as err:  # the figures are a view; the sweep's results are safe
            print(f"warning: sweep figures not logged: {one_line(err)}", file=sys.stderr)
            ui = None
        if not tracker.outbox.drain(tracker.drain_timeout_s):
            print(f"error: {_undelivered(tracker, out_dir)}", file=sys.stderr)
            return 1
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        tracker.finish_parent(status)
    timings["outputs"] = time.perf_counter() - start - timings["tune"]
    errors = sum(1 for r in results if r.error is not None)
    seconds = time.perf_counter() - start + timings["startup"]
    print(_report(spec, out_dir, tracking_uri, parent_id, seconds, errors))
    if ui:  # a SQLite store: the address once `mlflow ui` (above) runs on its default port
        print(f"open the sweep: {ui}")
    if best is not None:
        print(_best_lines(spec, best, axes, tracking_uri, out_dir))
    improving = improving_line(trials)
    if improving:
        print(improving)
    missing = _missing_line(spec, trials)
    if missing:
        print(missing, file=sys.stderr)
    if tracker.redone["trials"]:
        print(_redone_line(tracker.redone))
    return 1 if errors and errors == len(results) else 0


def _missing_line(spec: SweepSpec, trials) -> str | None:
    """A warning when fewer trials finished than the space holds (a time budget aside): a sweep
    must never look complete with a trial lost (sweeps.snapshot says how one could be)."""
    from sweeps.spec import space

    expected = space.n_trials(spec)
    finished = int((trials["status"] != "RUNNING").sum()) if "status" in trials else 0
    if spec.sweep.time_budget_s is not None or finished >= expected:
        return None
    return (
        f"warning: {finished} of {expected} trials finished; the others never ran to their end "
        "(their MLflow runs, if any, stay RUNNING)"
    )


def _log_key_figures(
    spec: SweepSpec, tracker, trials, axes: list[str], best: dict[str, Any] | None
) -> str:
    """The sweep's figures on its parent run (the swept axes as params, the best trial and its
    metric, trials by status), the UI view that opens on it; returns that view's address."""
    from sweeps.spec.metrics import is_held_out
    from sweeps.tracking import ui

    s, client, parent_id = spec.sweep, tracker.client, tracker.parent_run_id
    params = {}
    for axis in axes:
        if axis in trials.columns:
            values = sorted(trials[axis].dropna().unique().tolist(), key=str)
            params[axis] = str(values)[:6000]
    metrics = {"trials/total": float(len(trials))}
    for status, count in trials["status"].fillna("UNKNOWN").value_counts().items():
        metrics[f"trials/{str(status).lower()}"] = float(count)
    tags = {}
    if best is not None:
        # The selection metric and, beside it, the held-out figures of the trial it chose.
        metrics[f"best/{s.metric}"] = float(best[s.metric])
        for key, value in held_out_figures(best).items():
            metrics[f"best/{key}"] = value
        tags["sweep.best_trial"] = str(best["trial_id"])
        tags["sweep.best_run_id"] = str(best["run_id"])
        tags["sweep.best_chosen_on"] = f"{s.metric} ({s.mode})"
    # Each figure once: a resumed sweep that ends again adds no second (key, step 0) pair.
    tracker.log_parent_figures(metrics, params, tags)
    experiment_id = client.get_run(parent_id).info.experiment_id
    held_out = [c for c in trials.columns if is_held_out(c) and c.endswith("/exact_match")]
    state = ui.view_state(parent_id, axes, s.metric, s.mode, columns=sorted(held_out))
    name = client.get_run(parent_id).info.run_name or s.name
    ui.save_view(client, experiment_id, parent_id, f"sweep {name}", state)
    uri = tracker.tracking_uri
    base = uri if uri.startswith(("http://", "https://")) else "http://127.0.0.1:5000"
    return ui.ui_address(base, experiment_id, parent_id)


# Breaks a tie on the sweep metric (several trials reach 1.000 on validation at small sizes):
# the lower validation loss, then the earlier trial.
TIE_BREAK = "val/loss"


def best_trial(trials, metric: str, mode: str) -> dict[str, Any] | None:
    """The trials row (a dict) the sweep chooses: the best ``metric`` (a validation or training
    metric, sweeps.spec), ties going to the lower ``val/loss`` where reported, then to the
    first trial by id; None when no trial has the metric. The one place a best trial is
    picked: the printed summary, the parent run and its tags all show this one."""
    import pandas as pd

    if metric not in trials.columns or trials.empty:
        return None
    keys = {"_score": pd.to_numeric(trials[metric], errors="coerce")}
    if mode == "max":
        keys["_score"] = -keys["_score"]
    if TIE_BREAK in trials.columns and metric != TIE_BREAK:
        keys["_tie"] = pd.to_numeric(trials[TIE_BREAK], errors="coerce")
    if "trial_id" in trials.columns:
        keys["_order"] = trials["trial_id"].astype(str)
    ranked = trials.assign(**keys).dropna(subset=["_score"])
    if ranked.empty:
        return None
    ranked = ranked.sort_values(list(keys), kind="stable", na_position="last")
    return ranked.iloc[0].drop(list(keys)).to_dict()


def held_out_figures(best: dict[str, Any]) -> dict[str, float]:
    """The held-out sets' metrics of the chosen trial (``test/exact_match``, ``ood/...``):
    reported at the choice made on validation, never chosen on."""
    from sweeps.spec.metrics import is_held_out

    return {
        key: float(value)
        for key, value in best.items()
        # value == value: not NaN, which a trial that did not report the metric has
        if isinstance(key, str) and is_held_out(key) and _is_number(value) and value == value
    }


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _chosen_text(metric: str, best: dict[str, Any]) -> str:
    """``chosen on val/exact_match 1; test/exact_match 0.998, ood/exact_match 0.4``."""
    headline = {k: v for k, v in held_out_figures(best).items() if k.endswith("/exact_match")}
    text = f"chosen on {metric} {float(best[metric]):.4g}"
    if headline:
        text += "; " + ", ".join(f"{k} {v:.4g}" for k, v in sorted(headline.items()))
    return text


def _best_lines(
    spec: SweepSpec, best: dict[str, Any], axes: list[str], uri: str, out_dir: Path
) -> str:
    """The best trial and the exact command that asks its model a question."""
    import shlex

    import yaml

    from arith.config import from_dict
    from arith.formats import build_format

    swept = " ".join(f"{k}={best[k]}" for k in axes if k in best)
    metric = spec.sweep.metric
    example = "12 + 34 ="
    saved = out_dir / "models" / str(best["trial_id"]) / "config.yaml"
    if saved.is_file():  # the trial's own config: task and format may be swept
        config = from_dict(yaml.safe_load(saved.read_text(encoding="utf-8")))
        example = build_format(config.format, config.task).example_prompt()
    command = ["python", "-m", "arith.predict", f"runs:/{best['run_id']}"]
    command += ["--tracking-uri", uri, example]
    return "\n".join(
        [
            f"best trial:     {spec.name}-{best['trial_id']} ({_chosen_text(metric, best)}"
            + (f"; {swept}" if swept else "")
            + f"), run {best['run_id']}",
            f"ask its model:  {shlex.join(command)}",
        ]
    )


def _undelivered(tracker, out_dir: Path) -> str:
    outbox = tracker.outbox
    return (
        f"mlflow at {tracker.tracking_uri} still unreachable {tracker.drain_timeout_s:.0f} s "
        f"after the sweep ({outbox.last_error}); {len(outbox.pending)} writes not delivered, "
        f"kept in {outbox.journal}: run again with --resume once it is back"
    )


def _redone_line(redone: dict[str, float]) -> str:
    return (
        f"restored from checkpoints: {redone['trials']} trial(s), redid {redone['steps']} steps "
        f"(~{redone['seconds']:.1f} s of training) logged before the driver or worker died"
    )


def build_tuner(
    spec: SweepSpec,
    out_dir: Path,
    tracking_uri: str,
    *,
    resume: bool = False,
    storage: str | None = None,
    reuse_actors: bool = tuning.REUSE_ACTORS,
    slots: bool = False,
):
    """The Tuner of a sweep and its MLflow callback (whose parent run the caller starts or,
    with ``resume``, attaches to). A resumed Tuner restores Tune's state from the output
    folder; MLflow, not Tune's copy, says what is logged. ``slots``: cap concurrency with
    TRIAL_SLOT resources (``sweeps.runtime.tuning.uses_slots``)."""
    from ray import tune
    from ray.tune.logger import JsonLoggerCallback

    from arith.cost import describe
    from sweeps.runtime import tuning
    from sweeps.runtime.callbacks import bind as bind_callbacks
    from sweeps.runtime.progress import ProgressLine
    from sweeps.runtime.trainable import train_pack_trial, train_trial
    from sweeps.spec import packing, space
    from sweeps.tracking.tracker import MLflowTracker

    s = spec.sweep
    # Packed: Tune runs one trial per pack, over a grid of pack numbers (sweeps.spec.packing).
    packs = packing.build_packs(spec) if s.pack != 1 else None
    if packs is None:
        param_space, num_samples = space.param_space(spec), s.num_samples
        trainable = tune.with_parameters(
            train_trial,
            base=spec.base,
            derived=spec.derived,
            checkpoint_every_s=s.checkpoint_every_s,
        )
    else:
        param_space, num_samples = packing.pack_param_space(packs), 1
        trainable = tune.with_parameters(
            train_pack_trial,
            base=spec.base,
            derived=spec.derived,
            packs=packs,
            checkpoint_every_s=s.checkpoint_every_s,
        )
    resolve = functools.partial(space.resolve_run_config, spec.base, derived=spec.derived)
    # How long the end of a sweep waits for an MLflow server that went away.
    wait_s = float(os.environ.get("SWEEPS_MLFLOW_WAIT_S", "60"))
    tracker = MLflowTracker(
        tracking_uri,
        spec.name,
        resolve,
        describe,
        drain_timeout_s=wait_s,
        metric=s.metric,
        journal=out_dir / JOURNAL_FILE,
        model_dir=out_dir / "models",
        packs=packs,
    )
    pack_sizes = None if packs is None else [len(pack) for pack in packs]
    progress = ProgressLine(
        spec.name, space.n_trials(spec), s.metric, s.mode, pack_sizes=pack_sizes
    )
    trainable = tune.with_resources(trainable, tuning.trial_resources(spec, slots))
    callbacks = [bind_callbacks(spec.name, [tracker, progress]), JsonLoggerCallback()]
    if resume:
        # Tune restores its own settings, and the callbacks it pickled, which ProcessCallbacks
        # binds to this process's tracker (sweeps.runtime.callbacks).
        tuner = tune.Tuner.restore(
            f"{storage or out_dir / 'ray'}/{spec.name}",
            trainable=trainable,
            resume_unfinished=True,
            resume_errored=True,
            param_space=param_space,
        )
        return tuner, tracker
    tuner = tune.Tuner(
        trainable,
        param_space=param_space,
        tune_config=tuning.tune_config(spec, num_samples, reuse_actors=reuse_actors),
        run_config=tuning.run_config(spec, storage or str(out_dir / "ray"), callbacks),
    )
    return tuner, tracker


def _report(spec, out_dir: Path, uri: str, parent_id: str, seconds: float, errors: int) -> str:
    table = (out_dir / "table.md").read_text() if (out_dir / "table.md").exists() else ""
    lines = [
        table.rstrip(),
        "",
        f"sweep {spec.name}: done in {seconds:.0f} s"
        + (f", {errors} trial(s) errored" if errors else ""),
        f"outputs:        {out_dir}",
        f"mlflow:         {uri}  (experiment {spec.name!r}, parent run {parent_id})",
        f"mlflow ui:      mlflow ui --backend-store-uri {uri}",
        f"table again:    python -m sweeps.table {out_dir} --tracking-uri {uri}",
    ]
    return "\n".join(lines)


# Warnings silenced, each by its message, once read and judged harmless. Nothing else is: a
# DeprecationWarning or FutureWarning is how a coming change of Ray or MLflow shows.
QUIET_WARNINGS = [
    # Ray 2.50's ray.init: a later Ray will stop hiding GPUs from trials that reserve none. Until
    # then (sweeps.cluster.tunefix.RAY_RANGE) it hides them, as sweeps need: a trial with
    # sweep.resources.gpu 0 and train.device auto must not take a GPU it did not reserve.
    (FutureWarning, r"Tip: In future versions of Ray, Ray will no longer override accelerator"),
]


def _quiet_logs() -> None:
    """Ray and MLflow talk a lot at INFO; the progress line is the view of a sweep."""
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    # Tune's new console output prints a banner even at verbose=0; the old one is silent there.
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    # Result files come from JsonLoggerCallback alone (no CSV or TensorBoard files per trial).
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    # The sweep metric may be reported only at the end (best/*); validation already ensured
    # that whatever decides on intermediate results (ASHA, Optuna) uses a per-eval metric.
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    for category, message in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    for name in ("ray", "ray.tune", "ray.train", "mlflow", "alembic", "optuna"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _init_ray(slots: int | None = None) -> None:
    """The embedded local Ray (an existing cluster: ``sweeps.cluster.connection.connect``), with
    ``slots`` TRIAL_SLOT resources when sweep.max_concurrent caps the trials
    (``sweeps.runtime.tuning``)."""
    import ray

    from sweeps.runtime import tuning

    # ERROR while starting: Ray's start-up notices are not the user's business; Tune's warnings
    # during the sweep are, so its logger goes back to WARNING.
    ray.init(
        num_cpus=os.cpu_count(),
        include_dashboard=False,
        resources={tuning.TRIAL_SLOT: slots} if slots else None,
        log_to_driver=False,
        logging_level=logging.ERROR,
    )
    logging.getLogger("ray.tune").setLevel(logging.WARNING)

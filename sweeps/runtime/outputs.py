"""The end of a sweep, once Tune returns: every MLflow write delivered, the scaling tables and
plots written from MLflow into the output folder and logged to the parent run with the tables'
fits, the sweep's figures and UI view on the parent run, the parent run ended, and the summary
printed (``sweeps.runtime.report``)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from sweeps.runtime.report import best_trial, held_out_figures, print_summary
from sweeps.spec.sweep_spec import SweepSpec
from sweeps.tracking.outbox import one_line


def finish(spec: SweepSpec, tuner, tracker, out_dir: Path, timings: dict[str, float]) -> int:
    """Run the Tuner to its end (None: an --extend with nothing to train), then write and log
    the outputs; returns the exit code (1 when MLflow stayed unreachable or every trial
    errored). ``timings`` receives tune and outputs."""
    from sweeps.analysis import collect
    from sweeps.analysis.table_fits import fit_metrics, table_fits

    start = time.perf_counter()
    parent_id, tracking_uri = tracker.parent_run_id, tracker.tracking_uri
    status = "FAILED"
    try:
        results = tuner.fit() if tuner is not None else []
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
    print_summary(
        spec,
        tracker,
        out_dir,
        trials=trials,
        axes=axes,
        best=best,
        ui=ui,
        seconds=seconds,
        errors=errors,
    )
    return 1 if errors and errors == len(results) else 0


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


def _undelivered(tracker, out_dir: Path) -> str:
    outbox = tracker.outbox
    return (
        f"mlflow at {tracker.tracking_uri} still unreachable {tracker.drain_timeout_s:.0f} s "
        f"after the sweep ({outbox.last_error}); {len(outbox.pending)} writes not delivered, "
        f"kept in {outbox.journal}: run again with --resume once it is back"
    )

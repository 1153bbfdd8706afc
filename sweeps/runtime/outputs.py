"""The end of a sweep, once Tune returns: every MLflow write delivered, the scaling tables and
plots written from MLflow into the output folder and logged to the parent run with the tables'
fits, the sweep's figures and UI view on the parent run, the parent run ended, and the summary
printed (``sweeps.runtime.report``)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from arith.cli import one_line
from sweeps.analysis.store import masked
from sweeps.runtime.interrupt import CtrlC
from sweeps.runtime.report import best_trial, held_out_figures, print_summary
from sweeps.spec.seed_trials import uses_seed_trials
from sweeps.spec.sweep_spec import SweepSpec


def finish(
    spec: SweepSpec,
    tuner,
    tracker,
    out_dir: Path,
    timings: dict[str, float],
    resume_lines: list[str],
) -> int:
    """Run the Tuner to its end (None: an --extend with nothing to train), then write and log
    the outputs; returns the exit code (1 when MLflow stayed unreachable or every trial
    errored; 130 when Ctrl-C stopped the sweep, which ``--resume`` then finishes: the
    ``resume_lines`` printed, ``sweeps.runtime.rerun``). ``timings`` receives tune and
    outputs."""
    start = time.perf_counter()
    status = "FAILED"
    ctrl_c = CtrlC()
    with ctrl_c:
        try:
            ctrl_c.tuning = True
            results = tuner.fit() if tuner is not None else []
            ctrl_c.tuning = False
            timings["tune"] = time.perf_counter() - start
            if ctrl_c.pressed:  # Tune stopped gracefully and returned as if it had ended
                raise KeyboardInterrupt
            written = _write_outputs(spec, tracker, out_dir)
            if written is None:
                return 1
            status = "FINISHED"
            # The sweep has ended: a press from here on is ignored, so that its parent run ends
            # FINISHED and its summary is printed whole (cut short here, a finished sweep ended
            # KILLED and said it had stopped before any trial ran)
            ctrl_c.ended = True
            prune_checkpoints(results)
        except KeyboardInterrupt:
            status = "KILLED"
            seconds = time.perf_counter() - start + timings["startup"]
            return _stopped(spec, tracker, out_dir, seconds, resume_lines, ctrl_c)
        finally:
            tracker.finish_parent(status)
            tracker.outbox.close()  # what is not delivered stays in the journal for --resume
        timings["outputs"] = time.perf_counter() - start - timings["tune"]
        errors = sum(1 for r in results if r.error is not None)
        seconds = time.perf_counter() - start + timings["startup"]
        print_summary(spec, tracker, out_dir, **written, seconds=seconds, errors=errors)
        return 1 if errors and errors == len(results) else 0


def _write_outputs(spec: SweepSpec, tracker, out_dir: Path) -> dict[str, Any] | None:
    """The tables, plots, fits and figures of a sweep that ran to its end, written and logged;
    what the summary prints from them, or None (the error printed) when MLflow stayed
    unreachable."""
    from sweeps.analysis import collect
    from sweeps.analysis.table_fits import fit_metrics, table_fits

    if not tracker.outbox.drain(tracker.drain_timeout_s):
        print(f"error: {_undelivered(tracker, out_dir)}", file=sys.stderr)
        return None
    trials, curves, axes = _read_back(spec, tracker)
    best = best_trial(
        trials, spec.sweep.metric, spec.sweep.mode, over_seeds=uses_seed_trials(spec.sweep)
    )
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
        return None
    return {"trials": trials, "axes": axes, "best": best, "ui": ui}


def prune_checkpoints(results) -> int:
    """Delete the checkpoints of a finished sweep's trials that ended well, but each trial's
    last (its models are in MLflow; a finished sweep resumes nothing, and an --extend trains
    in a Tune experiment of its own); errored trials keep theirs for a --resume that restarts
    them. Through the storage's own filesystem (each result's ``filesystem``, as Tune wrote
    it: a local folder or a bucket alike). Returns the bytes freed."""
    import pyarrow.fs

    freed = 0
    for result in results:
        path, filesystem = getattr(result, "path", None), getattr(result, "filesystem", None)
        if not path or filesystem is None:  # no trial folder: nothing of its own to prune
            continue
        if result.error is not None or result.checkpoint is None:
            continue
        last = result.checkpoint.path.rstrip("/").rsplit("/", 1)[-1]
        found = filesystem.get_file_info(pyarrow.fs.FileSelector(path, allow_not_found=True))
        for info in found:
            if info.type != pyarrow.fs.FileType.Directory:
                continue
            if info.base_name.startswith("checkpoint_") and info.base_name != last:
                inside = pyarrow.fs.FileSelector(info.path, recursive=True)
                freed += sum(f.size or 0 for f in filesystem.get_file_info(inside))
                filesystem.delete_dir(info.path)
    return freed


def _read_back(spec: SweepSpec, tracker):
    """(trials, curves, swept axes) from MLflow alone, as ``python -m sweeps.table`` reads
    them."""
    from sweeps.analysis import collect

    trials, curves = collect.trials_from_mlflow(
        tracker.tracking_uri, spec.name, tracker.parent_run_id
    )
    trials = collect.with_convergence(trials, curves, spec.sweep.metric)
    return trials, curves, collect.swept_paths(spec.raw)


def _stopped(
    spec: SweepSpec,
    tracker,
    out_dir: Path,
    seconds: float,
    resume_lines: list[str],
    ctrl_c: CtrlC,
) -> int:
    """Ctrl-C: the runs of trials still running end KILLED (the parent too, by the caller),
    the tables of the trials that finished are written marked partial, and the command that
    finishes the sweep is printed; exit code 130. Pressed again meanwhile, it stops at once,
    the tables as they were (``--resume`` writes them)."""
    from sweeps.analysis import collect
    from sweeps.spec import space

    total = space.n_trials(spec)
    finished = None  # how many the partial tables hold, once written
    try:
        tracker.end_unfinished()
        if tracker.outbox.drain(tracker.drain_timeout_s):
            trials, curves, axes = _read_back(spec, tracker)
            done = trials[~trials["status"].isin(UNFINISHED)] if "status" in trials else trials
            collect.write_outputs(
                done,
                curves,
                spec.tables,
                out_dir,
                metric=spec.sweep.metric,
                axes=axes,
                note=partial_note(len(done), total),
            )
            finished = len(done)
        else:
            print(f"error: {_undelivered(tracker, out_dir)}", file=sys.stderr)
            finished = 0
    except KeyboardInterrupt:  # pressed again: stop at once, as the first press promised
        pass
    how = (
        "at once, before its tables were written"
        if finished is None
        else f"with {finished} of {total} trials finished"
    )
    ctrl_c.ended = True  # what is left (the message, the parent run's end) must not be cut
    print(
        f"sweep {spec.name}: stopped after {seconds:.0f} s (Ctrl-C) {how}; nothing is lost. "
        "Finish it with:",
        *(f"  {line}" for line in resume_lines),
        sep="\n",
        file=sys.stderr,
    )
    return 130


def stopped_at_start(spec: SweepSpec, tracker, resume_lines: list[str]) -> int:
    """Ctrl-C before Tune ran: the parent run, if made, ends KILLED, and the command that
    starts the trials under it is printed (``--resume`` of a sweep Tune never saved starts
    them afresh: ``sweeps.runtime.resume``); exit code 130."""
    if tracker is None or tracker.parent_run_id is None:
        print(
            f"sweep {spec.name}: stopped (Ctrl-C) before it started; nothing was made: the same "
            "command starts it",
            file=sys.stderr,
        )
        return 130
    tracker.finish_parent("KILLED")
    tracker.outbox.close()
    print(
        f"sweep {spec.name}: stopped while starting (Ctrl-C), before any trial ran. Start it with:",
        *(f"  {line}" for line in resume_lines),
        sep="\n",
        file=sys.stderr,
    )
    return 130


# A child run's sweep.status while its trial has not ended.
UNFINISHED = ("RUNNING", "KILLED")


def partial_note(finished: int, total: int) -> str:
    """The first line of a stopped sweep's table.md."""
    return (
        f"**Partial: the sweep was stopped with {finished} of {total} trials finished; these "
        "tables hold those only. `--resume` finishes it.**"
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
    tracker.outbox.flush()  # the reads and the view below go after the figures
    experiment_id = client.get_run(parent_id).info.experiment_id
    held_out = [c for c in trials.columns if is_held_out(c) and c.endswith("/exact_match")]
    state = ui.view_state(parent_id, axes, s.metric, s.mode, columns=sorted(held_out))
    name = client.get_run(parent_id).info.run_name or s.name
    ui.save_view(client, experiment_id, parent_id, f"sweep {name}", state)
    uri = tracker.tracking_uri
    base = masked(uri) if uri.startswith(("http://", "https://")) else "http://127.0.0.1:5000"
    return ui.ui_address(base, experiment_id, parent_id)


def _undelivered(tracker, out_dir: Path) -> str:
    outbox = tracker.outbox
    return (
        f"mlflow at {masked(tracker.tracking_uri)} still unreachable "
        f"{tracker.drain_timeout_s:.0f} s after the sweep ({outbox.last_error}); "
        f"{len(outbox.pending)} writes not delivered, kept in {outbox.journal}: run again "
        "with --resume once it is back"
    )

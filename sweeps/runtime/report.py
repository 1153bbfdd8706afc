"""What a sweep prints when it ends, and the one choice of its best trial: the scaling table
and where the outputs, the MLflow runs and the UI are; the best trial with the command that asks
its model a question; and warnings for trials that never finished. ``best_trial`` is shared with
the figures on the parent run (``sweeps.runtime.outputs``), so both always name the same trial."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from sweeps.spec.seed_trials import STEPS_KEY, SeedsFigure, drawn_trial_id
from sweeps.spec.sweep_spec import SweepSpec


def print_summary(
    spec: SweepSpec,
    tracker,
    out_dir: Path,
    *,
    trials,
    axes: list[str],
    best: dict[str, Any] | None,
    ui: str | None,
    seconds: float,
    errors: int,
) -> None:
    """The end of a sweep on the terminal: the table and where everything is, the UI view, the
    best trial, the convergence line, a warning for trials lost, and what checkpoints redid."""
    from sweeps.analysis.convergence import improving_line

    tracking_uri = tracker.tracking_uri
    print(_report(spec, out_dir, tracking_uri, tracker.parent_run_id, seconds, errors))
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
        print(redone_line(tracker.redone, tracker.resumed_from))


def _report(spec, out_dir: Path, uri: str, parent_id: str, seconds: float, errors: int) -> str:
    from sweeps.analysis.store import masked

    uri = masked(uri)  # a password in it is never printed
    table = (out_dir / "table.md").read_text() if (out_dir / "table.md").exists() else ""
    lines = [
        table.rstrip(),
        "",
        f"sweep {spec.name}: done in {seconds:.0f} s"
        + (f", {errors} trial(s) errored" if errors else ""),
        f"outputs:        {out_dir} ({_megabytes(out_dir)} MB)",
        f"mlflow:         {uri}  (experiment {spec.name!r}, parent run {parent_id})",
        f"mlflow ui:      mlflow ui --backend-store-uri {uri}",
        f"table again:    python -m sweeps.table {out_dir} --tracking-uri {uri}",
    ]
    return "\n".join(lines)


def _missing_line(spec: SweepSpec, trials) -> str | None:
    """A warning when fewer trials finished than the space holds (a time budget aside): a sweep
    must never look complete with a trial lost (sweeps.runtime.tuning says how one could be)."""
    from sweeps.spec import space

    expected = space.n_trials(spec)
    finished = int((trials["status"] != "RUNNING").sum()) if "status" in trials else 0
    if spec.sweep.time_budget_s is not None or finished >= expected:
        return None
    return (
        f"warning: {finished} of {expected} trials finished; the others never ran to their end "
        "(their MLflow runs, if any, stay RUNNING)"
    )


# Breaks a tie on the sweep metric (several trials reach 1.000 on validation at small sizes):
# the lower validation loss, then the earlier trial.
TIE_BREAK = "val/loss"


def best_trial(trials, metric: str, mode: str, over_seeds: bool = False) -> dict[str, Any] | None:
    """The trials row (a dict) the sweep chooses: the best ``metric`` (a validation or training
    metric, sweeps.spec), ties going to the lower ``val/loss`` where reported, then to the
    first trial by id; None when no trial has the metric. The one place a best trial is
    picked: the printed summary, the parent run and its tags all show this one.

    ``over_seeds`` (Optuna's trials over seeds, ``sweeps.spec.seed_trials``): a config is
    chosen on the figure the searcher saw (``config_figures``); the row is its worst seed's,
    with that figure as its ``metric`` and ``OVER_SEEDS`` saying what it is."""
    import pandas as pd

    # over seeds, a column of steps to the threshold may be missing: no seed got there yet
    if trials.empty or (metric not in trials.columns and not over_seeds):
        return None
    sign = -1 if mode == "max" else 1  # every key sorts ascending
    if over_seeds:
        seeds = seed_figures(trials, metric)
        keys = {"_score": sign * config_figures(trials, seeds, metric, mode)}
        keys["_worst_seed_first"] = -sign * seeds
    else:
        keys = {"_score": sign * _numbers(trials, metric, float("nan"))}
    if TIE_BREAK in trials.columns and metric != TIE_BREAK:
        keys["_tie"] = pd.to_numeric(trials[TIE_BREAK], errors="coerce")
    if "trial_id" in trials.columns:
        keys["_order"] = trials["trial_id"].astype(str)
    # one concat, not assign's column at a time (pandas warns of a fragmented frame)
    ranked = pd.concat([trials, pd.DataFrame(keys, index=trials.index)], axis=1)
    ranked = ranked.dropna(subset=["_score"])
    if ranked.empty:
        return None
    ranked = ranked.sort_values(list(keys), kind="stable", na_position="last")
    best = ranked.iloc[0].drop(list(keys)).to_dict()
    if over_seeds:
        best[metric] = sign * float(ranked["_score"].iloc[0])
        best[OVER_SEEDS] = "its config's worst seed" if metric == STEPS_KEY else "its config's mean"
    return best


OVER_SEEDS = "_figure_over_seeds"
"""In a best trial chosen over seeds: what its ``metric``, its config's figure, is."""


def seed_figures(trials, metric: str):
    """Each seed trial's own figure as ``SeedsFigure`` counts it: ``val/steps_to_threshold``,
    or for a seed that never reached its threshold, its budget plus the share it missed; any
    other metric as it is."""
    import pandas as pd

    values = _numbers(trials, metric, float("nan"))
    if metric != STEPS_KEY:
        return values
    accuracy = _numbers(trials, "val/exact_match", 0.0)
    thresholds = _numbers(trials, "train.threshold", 0.95)
    budgets = _numbers(trials, "train.max_steps", _numbers(trials, "steps", 0.0))
    figures = []
    for index in trials.index:
        seed = SeedsFigure([thresholds[index]], [budgets[index]])
        report = {"val/exact_match": accuracy[index]}
        if values[index] == values[index]:  # not NaN: the step it reached the threshold
            report[STEPS_KEY] = values[index]
        figures.append(seed.update({0: report})[STEPS_KEY])
    return pd.Series(figures, index=trials.index)


def config_figures(trials, seeds, metric: str, mode: str):
    """Each row's config's figure (the rows ``<id>s<seed>`` of one drawn config) as
    ``SeedsFigure`` gives it to the searcher: steps to the threshold its worst seed's, any
    other metric the mean over its seeds; none where a seed has none."""
    configs = trials["trial_id"].astype(str).map(drawn_trial_id)
    over = ("min" if mode == "max" else "max") if metric == STEPS_KEY else "mean"
    return seeds.groupby(configs).transform(
        lambda s: getattr(s, over)() if s.notna().all() else float("nan")
    )


def _numbers(trials, column: str, default):
    """A numeric column, ``default`` (a number or a Series) where absent or empty."""
    import pandas as pd

    if column not in trials.columns:
        return pd.Series(default, index=trials.index)
    return pd.to_numeric(trials[column], errors="coerce").fillna(default)


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
    if best.get(OVER_SEEDS):
        text += f" ({best[OVER_SEEDS]})"
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
    from arith.text.formats import build_format
    from sweeps.analysis.store import masked

    swept = " ".join(f"{k}={best[k]}" for k in axes if k in best)
    metric = spec.sweep.metric
    example = "12 + 34 ="
    saved = out_dir / "models" / str(best["trial_id"]) / "config.yaml"
    if saved.is_file():  # the trial's own config: task and format may be swept
        config = from_dict(yaml.safe_load(saved.read_text(encoding="utf-8")))
        example = build_format(config.format, config.task).example_prompt()
    command = ["python", "-m", "sweeps.predict", f"runs:/{best['run_id']}"]
    command += ["--tracking-uri", masked(uri), example]
    return "\n".join(
        [
            f"best trial:     {best['trial_id']} "
            f"({_chosen_text(metric, best)}"
            + (f"; {swept}" if swept else "")
            + f"), run {best['run_id']}",
            f"ask its model:  {shlex.join(command)}",
        ]
    )


# What stopped the trials that restarted from their checkpoints, by the status their parent run
# had when --resume found it; without a resume (None), a worker died and Tune retried its trial.
REDO_CAUSES = {
    "KILLED": "Ctrl-C stopped the sweep",
    "RUNNING": "the sweep's driver died",
    None: "a worker died",
}


def redone_line(redone: dict[str, float], resumed_from: str | None) -> str:
    """What restarting from checkpoints cost: the steps trained again, which had run after each
    trial's last checkpoint, and what stopped them (``REDO_CAUSES``)."""
    cause = REDO_CAUSES.get(resumed_from, "the sweep's last run ended")
    return (
        f"restored from checkpoints: {redone['trials']} trial(s), redid {redone['steps']} steps "
        f"(~{redone['seconds']:.1f} s of training) that ran after their last checkpoint, "
        f"before {cause}"
    )


def _megabytes(folder: Path) -> str:
    """The folder's size on disk, for the summary: what a finished sweep leaves behind."""
    from sweeps.analysis.store import folder_bytes

    return f"{folder_bytes(folder) / 1e6:.1f}" if folder.is_dir() else "0"

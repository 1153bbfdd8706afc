"""The README shows what the main job makes: its figure is a copy of a plot the main job writes
(the PNG's title, which every plot carries, is the one the main job's plot has now) under a
caption naming the metric and the set that plot shows, and its "What it makes" names every file
and folder a run leaves. Built from the main job's spec without running it."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from sweeps.analysis import collect, plots
from sweeps.analysis.plot_style import figure_title, metric_label
from sweeps.analysis.store import STATE_FILE
from sweeps.runtime.tuner import JOURNAL_FILE
from sweeps.spec.space import grid_points, resolve_run_config
from sweeps.spec.sweep_spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
MAIN_JOB = load_spec(ROOT / "search_spaces" / "width_vs_depth.yaml")
IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")


def main_job_trials() -> pd.DataFrame:
    """One trial per grid point of the main job, as its run reads back (made-up figures)."""
    rows = []
    for i, point in enumerate(grid_points(MAIN_JOB)):
        flat = resolve_run_config(MAIN_JOB.base, point, MAIN_JOB.derived).flat()
        em = 0.5 + 0.08 * i
        rows.append({
            "trial_id": f"a188b_{i:05d}", "status": "TERMINATED", "run_id": f"r{i}",
            **{k: v for k, v in flat.items() if not isinstance(v, list | tuple)},
            "hardware.precision": "fp32", "n_params": 1000 * (i + 1), "steps": 4000,
            "wall_time_s": 60.0, "test/exact_match": em, "val/exact_match": em + 0.01,
            "best/val/exact_match": em + 0.02, "convergence": "converged",
        })  # fmt: skip
    return pd.DataFrame(rows)


def curves_of(trials: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        [(t, m, s, 0.5) for t in trials["trial_id"] for m in plots.CURVE_METRICS for s in (0, 200)],
        columns=list(collect.CURVE_COLUMNS),
    )


def test_the_readmes_figure_is_a_plot_the_main_job_writes_under_a_caption_of_what_it_shows():
    (alt, target), *more = IMAGE.findall(README)
    assert not more, "one figure in the README"
    trials = main_job_trials()
    figures = plots.plots_for(
        trials, curves_of(trials), MAIN_JOB.sweep.metric, MAIN_JOB.tables, sweep=MAIN_JOB.name
    )
    stem = Path(target).stem
    assert stem in figures, f"{target}: the main job writes {sorted(figures)}"
    # The copy's title is the plot's: the plot the job writes now, not another one (the
    # README showed "val/exact_match: mean ± std per cell" while the job drew test/).
    copied = Image.open(ROOT / target).text.get("Title")
    assert copied == figure_title(figures[stem]), (copied, figure_title(figures[stem]))
    # Its caption (the line before it and its alt text) names the metric and the set it shows.
    before = README[: README.index(f"![{alt}]({target})")].rstrip().rsplit("\n\n", 1)[-1]
    shown = metric_label(plots.shown_metric(trials, MAIN_JOB.sweep.metric, MAIN_JOB.tables))
    assert shown == "test/exact_match (test set)"
    assert shown in before, before
    assert "validation" not in (before + alt).lower(), (before, alt)


def what_it_makes() -> str:
    start = README.index("## What it makes")
    return README[start : README.index("\n## ", start + 1)]


def test_what_it_makes_names_every_file_a_run_of_the_main_job_leaves(tmp_path):
    trials = main_job_trials()
    written = collect.write_outputs(
        trials, curves_of(trials), MAIN_JOB.tables, tmp_path, metric=MAIN_JOB.sweep.metric,
        axes=collect.swept_paths(MAIN_JOB.raw),
    )  # fmt: skip
    names = {p.name for p in written}
    assert {"trials.csv", "table.md", "table_by_params.csv", "width_x_depth.png"} <= names
    # What the driver leaves beside the tables: its state, spec copy and journal, the models
    # and diagnostics copied out of the checkpoints, Ray's folder; and the store's two parts.
    names |= {STATE_FILE, "spec.yaml", JOURNAL_FILE, "models/", "diagnostics/", "ray/"}
    names |= {"mlflow.db", "mlartifacts/"}
    listed = what_it_makes()
    missing = sorted(n for n in names if f"`{n}" not in listed and f"/{n}`" not in listed)
    assert not missing, f"'What it makes' leaves out {missing}"


TEST_TIME = r"(about (an hour|\d+ minutes)|\d+ to \d+ minutes) on 2 cores"


@pytest.mark.parametrize("words", [TEST_TIME, '-m "not slow"'])
def test_the_readme_says_how_long_the_tests_take_and_a_quicker_subset(words):
    # The time is whatever CI last measured; that the quick start gives one is what matters.
    quick_start = README[README.index("## Quick start") : README.index("## What the main job")]
    assert re.search(words, quick_start)


def test_the_quick_start_holds_no_changelog():
    # The quick start and the output it shows; the history of its figures is the changelog's.
    quick_start = README[README.index("## Quick start") : README.index("## What it makes")]
    assert "rotary" not in quick_start and "the code before it printed" not in quick_start

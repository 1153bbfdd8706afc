"""sweeps.analysis.tables and sweeps.analysis.plots on trials frames built by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from sweeps.analysis import plots
from sweeps.analysis.table_fits import table_fits
from sweeps.analysis.tables import (
    build_table,
    default_table_specs,
    format_cell,
    primary_metric,
    render_markdown,
    summarise,
    to_markdown,
    varied_axes,
)
from sweeps.spec.table_block import TableSpec, table_specs_from_block

METRIC = "test/exact_match"


def _trials() -> pd.DataFrame:
    """2 widths x 2 depths x 3 seeds; exact match = base(width, depth) + 0.01 * seed."""
    rows = []
    for d_model in (64, 128):
        for n_layer in (1, 2):
            for seed in (0, 1, 2):
                rows.append(
                    {
                        "trial_id": f"t{len(rows):04d}",
                        "status": "TERMINATED",
                        "model.d_model": d_model,
                        "model.n_layer": n_layer,
                        "train.seed": seed,
                        "optim.lr": 1e-3,
                        "n_params": 12 * d_model * d_model * n_layer,
                        METRIC: 0.5 + 0.1 * n_layer + d_model / 1000 + 0.01 * seed,
                        # depth 1 reaches the threshold only for seeds 0 and 1
                        "val/steps_to_threshold": (
                            np.nan
                            if (n_layer == 1 and seed == 2)
                            else 1000.0 * n_layer + 100 * seed
                        ),
                    }
                )
    return pd.DataFrame(rows)


def test_mean_std_over_seeds():
    spec = TableSpec(rows=("model.d_model", "model.n_layer"), values=(METRIC,))
    table = build_table(_trials(), spec)
    cell = table.loc[(64, 2)]
    expected = [0.5 + 0.2 + 0.064 + 0.01 * s for s in range(3)]
    assert cell[(METRIC, "mean")] == pytest.approx(np.mean(expected))
    assert cell[(METRIC, "std")] == pytest.approx(np.std(expected, ddof=1))
    assert cell[(METRIC, "n")] == 3
    assert cell[(METRIC, "min")] == pytest.approx(min(expected))
    assert cell[(METRIC, "max")] == pytest.approx(max(expected))
    assert cell[(METRIC, "median")] == pytest.approx(np.median(expected))
    assert len(table) == 4


def test_pivot_has_one_column_block_per_column_value():
    spec = TableSpec(rows=("model.d_model",), columns=("model.n_layer",), values=(METRIC,))
    table = build_table(_trials(), spec)
    assert list(table.index) == [64, 128]
    assert table.loc[128, (1, METRIC, "mean")] == pytest.approx(0.5 + 0.1 + 0.128 + 0.01)
    assert table.loc[128, (2, METRIC, "n")] == 3
    assert {c[0] for c in table.columns} == {1, 2}


def test_no_rows_gives_one_all_row():
    table = build_table(_trials(), TableSpec(values=(METRIC,)))
    assert list(table.index) == ["all"]
    assert table.loc["all", (METRIC, "n")] == 12


def test_markdown_pivot():
    spec = TableSpec(rows=("model.d_model",), columns=("model.n_layer",), values=(METRIC,))
    text = to_markdown(build_table(_trials(), spec), spec)
    lines = text.splitlines()
    assert len(lines) == 4
    assert [c.strip() for c in lines[0].strip("|").split("|")] == [
        "model.d_model",
        "model.n_layer=1",
        "model.n_layer=2",
    ]
    assert set(lines[1].replace("|", "").split()) <= {"-------------", "------------------:"}
    assert "0.674 ± 0.010 (n=3)" in lines[2]
    assert lines[3].startswith("| 128 ")


def test_markdown_aggregate_max_is_a_plain_number():
    spec = TableSpec(rows=("model.n_layer",), values=(METRIC,), aggregate="max")
    text = to_markdown(build_table(_trials(), spec), spec)
    assert "| 1             |            0.748 |" in text
    assert "±" not in text


def test_steps_to_rendering_integers_missing_and_partial():
    spec = TableSpec(rows=("model.n_layer",), values=("val/steps_to_threshold",))
    text = to_markdown(build_table(_trials(), spec), spec)
    # depth 1: steps 1000, 1100 (seed 2 never got there); depth 2: 2000, 2100, 2200
    assert "1050 ± 58 (n=4/6)" in text
    assert "2100 ± 89 (n=6)" in text
    never = _trials().assign(**{"val/steps_to_threshold": np.nan})
    text = to_markdown(build_table(never, spec), spec)
    assert text.splitlines()[2].rstrip().endswith("— |")


@pytest.mark.parametrize(
    ("stats", "value", "aggregate", "expected"),
    [
        ({"mean": 0.9, "std": np.nan, "n": 1, "trials": 1}, METRIC, "mean_std", "0.900"),
        ({"mean": np.nan, "std": np.nan, "n": 0, "trials": 3}, METRIC, "mean_std", "—"),
        ({"mean": 1500.0, "std": np.nan, "n": 1, "trials": 3, "min": 1500, "max": 1500},
         "train/steps_to_100pct", "mean_std", "1500 (n=1/3)"),
        ({"mean": 5e3, "min": 5e3, "max": 5e3, "n": 3, "trials": 3}, "n_params", "mean_std",
         "5000"),
        ({"median": 0.25, "n": 2, "trials": 2}, "val/loss", "median", "0.250"),
        ({"mean": 2e-5, "std": 1e-6, "n": 2, "trials": 2, "min": 1, "max": 2}, "lr", "mean_std",
         "2.00e-05 ± 1.00e-06 (n=2)"),
    ],
)  # fmt: skip
def test_format_cell(stats, value, aggregate, expected):
    assert format_cell(stats, value, aggregate) == expected


def test_nan_values_and_nan_keys():
    trials = _trials()
    trials.loc[0, METRIC] = np.nan  # a failed trial: no metric
    trials["train.time_budget_s"] = [None] * 6 + [60.0] * 6  # a None key next to a number
    spec = TableSpec(rows=("train.time_budget_s",), values=(METRIC, "never/logged"))
    table = build_table(trials, spec)
    assert len(table) == 2
    none_row = table.iloc[1] if not math.isnan(table.index[0]) else table.iloc[0]
    assert none_row[(METRIC, "n")] == 5
    assert none_row[(METRIC, "trials")] == 6
    text = to_markdown(table, spec)
    assert "| None " in text and "| 60 " in text
    assert text.count("—") == 2  # the never-logged metric, once per row


def test_unknown_key_is_a_one_line_value_error():
    with pytest.raises(ValueError, match=r"no column 'model\.nope'") as info:
        build_table(_trials(), TableSpec(rows=("model.nope",)))
    assert "\n" not in str(info.value)


def test_summarise_is_flat_with_mean_std_n_columns():
    spec = TableSpec(rows=("model.d_model",), columns=("model.n_layer",), values=(METRIC,))
    flat = summarise(_trials(), spec)
    assert list(flat.columns[:2]) == ["model.d_model", "model.n_layer"]
    assert {f"{METRIC}:mean", f"{METRIC}:std", f"{METRIC}:n"} <= set(flat.columns)
    assert len(flat) == 4


def test_varied_axes_and_defaults():
    trials = _trials()
    assert varied_axes(trials) == ["model.d_model", "model.n_layer", "train.seed"]
    specs = default_table_specs(trials)
    assert [s.name for s in specs] == ["table", "width_vs_depth"]
    assert specs[0].rows == ("model.d_model", "model.n_layer")
    assert specs[0].values == (METRIC, "n_params", "val/steps_to_threshold")
    assert primary_metric(trials.drop(columns=[METRIC]).assign(**{"val/exact_match": 0.5})) == (
        "val/exact_match"
    )


def test_table_specs_from_block():
    block = {"rows": ["model.d_model"], "columns": ["model.n_layer"], "values": [METRIC]}
    (spec,) = table_specs_from_block(block)
    assert spec == TableSpec("table", ("model.d_model",), ("model.n_layer",), (METRIC,))
    specs = table_specs_from_block([{"rows": ["a.b"]}, {"values": ["x"], "aggregate": "max"}])
    assert [s.name for s in specs] == ["table", "table_2"]
    assert table_specs_from_block(None) == []


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"rows": ["a.b"], "colums": ["c.d"]}, r"^table\.colums: unknown key"),
        ({"aggregate": "avg"}, r"^table\.aggregate: must be one of .* but got 'avg'"),
        ([{"name": "x"}, {"name": "x"}], r"^table\[1\]\.name: 'x' already names table\[0\]"),
        ({"rows": "a.b"}, r"^table\.rows: expected a list of names, but got 'a\.b'"),
        ([{"rows": [1]}], r"^table\[0\]\.rows: expected a list of names"),
        ({"values": []}, r"^table\.values: must not be empty"),
        ({"rows": ["a.b"], "columns": ["a.b"]}, r"both a row and a column key"),
        ("rows", r"^table: expected a mapping"),
    ],
)
def test_table_specs_from_block_errors(block, message):
    with pytest.raises(ValueError, match=message) as info:
        table_specs_from_block(block)
    assert "\n" not in str(info.value)


def test_still_improving_mark_only_on_metric_columns():
    """width_vs_depth's by_params table: the ↑ goes on the metrics training longer could
    still raise, not on a cost (wall_time_s) or a count (n_params, steps)."""
    trials = _trials().assign(wall_time_s=12.5, steps=300, convergence="still_improving")
    trials["best/val/exact_match"] = trials[METRIC]
    values = ("n_params", METRIC, "best/val/exact_match", "steps", "wall_time_s")
    spec = TableSpec(rows=("model.d_model", "model.n_layer"), values=values, aggregate="mean")
    lines = to_markdown(build_table(trials, spec), spec).splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    for line in lines[2:6]:
        cells = dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True))
        marked = {name for name, cell in cells.items() if cell.endswith("↑")}
        assert marked == {METRIC, "best/val/exact_match"}, line


def test_render_markdown_escapes_pipes():
    text = render_markdown(["a", "b"], [["x|y", "1"]])
    assert "x\\|y" in text


def test_plots_for_width_depth_sweep(tmp_path):
    trials = _trials()
    curves = pd.DataFrame(
        [
            (t, m, step, v * step / 300)
            for t in trials["trial_id"]
            for m, v in (("val/exact_match", 0.9), ("train/loss", 3.0))
            for step in (100, 200, 300)
        ],
        columns=["trial_id", "metric", "step", "value"],
    )
    figures = plots.plots_for(trials, curves, METRIC)
    assert set(figures) == {"exact_match_vs_params", "width_x_depth", "training_curves"}
    cells = trials.groupby(["model.d_model", "model.n_layer"])
    means = cells[METRIC].mean()
    # one marker per cell at (its parameters, its mean over seeds)
    size = figures["exact_match_vs_params"].axes[0]
    expected = sorted(zip(cells["n_params"].first(), means, strict=True))
    np.testing.assert_allclose(drawn_cell_points(size), expected)
    assert (size.get_xlabel(), size.get_ylabel()) == ("parameters (n_params)", METRIC)
    # the heatmap: width on y, depth on x, each cell's mean written in it
    heat = figures["width_x_depth"].axes[0]
    assert (heat.get_ylabel(), heat.get_xlabel()) == ("model.d_model", "model.n_layer")
    assert [t.get_text() for t in heat.get_xticklabels()] == ["1", "2"]
    assert [t.get_text() for t in heat.get_yticklabels()] == ["64", "128"]
    written = sorted(float(t.get_text().split("\n")[0]) for t in heat.texts)
    assert written == pytest.approx(sorted(means.round(3)))
    # a line per trial per panel, through that trial's curve
    panels = figures["training_curves"].axes
    assert [ax.get_ylabel() for ax in panels] == ["val/exact_match", "train/loss"]
    lines = {line.get_gid(): line for line in panels[0].get_lines()}
    assert sorted(lines) == sorted(trials["trial_id"])
    assert lines["t0000"].get_label() == "64x1 seed=0"  # the swept values, not the trial id
    assert list(lines["t0000"].get_ydata()) == pytest.approx([0.3, 0.6, 0.9])
    figures["width_x_depth"].savefig(tmp_path / "width_x_depth.png", dpi=80)


def drawn_cell_points(ax) -> list[tuple[float, float]]:
    """The (x, y) of every cell marker exact_match_vs_params drew (errorbar's data lines)."""
    markers = [line for line in ax.get_lines() if line.get_marker() in plots.MARKERS]
    points = [(x, y) for line in markers for x, y in line.get_xydata()]
    return sorted((float(x), float(y)) for x, y in points)


def test_batch_lr_heatmap_bins_a_random_search_lr(tmp_path):
    rng = np.random.default_rng(0)
    trials = pd.DataFrame(
        {
            "trial_id": [f"t{i}" for i in range(30)],
            "train.batch_size": rng.choice([32, 64, 128], size=30),
            "optim.lr": 10 ** rng.uniform(-4, -2, size=30),
            "n_params": 1000,
            METRIC: rng.uniform(size=30),
        }
    )
    figures = plots.plots_for(trials, pd.DataFrame(columns=["trial_id", "metric", "step", "value"]))
    assert set(figures) == {"exact_match_vs_params", "batch_size_x_lr"}
    axes = figures["batch_size_x_lr"].axes[0]
    assert "log-binned" in axes.get_xlabel()
    assert len(axes.get_xticks()) <= plots.MAX_LEVELS
    figures["batch_size_x_lr"].savefig(tmp_path / "lr.png")


def _lr_trials() -> pd.DataFrame:
    """_trials at two learning rates: 3e-3 is better (by 0.05) for depth 2, 1e-3 for depth 1."""
    frames = []
    for lr, sign in ((1e-3, 1), (3e-3, -1)):
        frame = _trials().assign(**{"optim.lr": lr})
        frame[METRIC] += 0.05 * sign * np.where(frame["model.n_layer"] == 1, 1, -1)
        frame["val/exact_match"] = frame[METRIC]
        frame["trial_id"] = [f"{t}-{lr:g}" for t in frame["trial_id"]]
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def test_size_plot_of_selected_cells_with_the_fit_and_its_equation(tmp_path):
    block = {
        "rows": ["model.d_model", "model.n_layer"],
        "values": [METRIC],
        "select": {"over": ["optim.lr"], "by": "val/exact_match"},
        "fit": {"x": "n_params", "y": METRIC},
    }
    (spec,) = table_specs_from_block(block)
    trials = _lr_trials()
    figures = plots.plots_for(trials, pd.DataFrame(columns=["trial_id", "metric", "step", "value"]),
                              METRIC, [spec], table_fits(trials, [spec]))  # fmt: skip
    assert set(figures) == {"exact_match_vs_params", "width_x_depth"}  # the fit drawn in it
    ax = figures["exact_match_vs_params"].axes[0]
    labels = ax.get_legend_handles_labels()[1] + [t.get_text() for t in ax.get_legend().texts]
    assert "chosen lr=0.001" in labels and "chosen lr=0.003" in labels
    # exact match rises with size: the law is fitted to its error, 1 - exact match
    assert any(label.startswith(f"fit: 1 - {METRIC} = ") for label in labels)
    assert "4 cells" in ax.get_title()  # one marker per selected cell, not per lr
    figures["exact_match_vs_params"].savefig(tmp_path / "size.png", dpi=80)
    formatter = ax.xaxis.get_major_formatter()
    assert [formatter(v) for v in (3e4, 1e5, 2.5e6)] == ["30K", "100K", "2.5M"]


def test_isoflop_plot_marks_each_budgets_lowest_loss():
    rows = []
    for budget, best in ((1e12, 2e4), (1e13, 8e4)):
        for n_params in (1e4, 2e4, 4e4, 8e4, 1.6e5):
            loss = 1.0 + (np.log(n_params / best)) ** 2
            rows.append({"trial_id": f"{budget:g}-{n_params:g}", "train.flops_budget": budget,
                         "n_params": n_params, "val/loss": loss, METRIC: 0.5})  # fmt: skip
    trials = pd.DataFrame(rows)
    figures = plots.plots_for(trials, pd.DataFrame(columns=["trial_id", "metric", "step", "value"]))
    ax = figures["isoflop"].axes[0]
    stars = [line for line in ax.get_lines() if line.get_marker() == "*"]
    assert sorted(float(s.get_xdata()[0]) for s in stars) == [2e4, 8e4]
    assert [t.get_text() for t in ax.get_legend().texts] == ["1T FLOPs", "10T FLOPs"]


def test_training_curves_legend_below_and_line_styles_apart():
    curves = pd.DataFrame(
        [(f"t{i}", m, step, 1.0) for i in range(4) for m in ("val/exact_match", "train/loss")
         for step in (0, 10, 20)],
        columns=["trial_id", "metric", "step", "value"],
    )  # fmt: skip
    figure = plots.training_curves(curves)
    assert len(figure.axes) == 2  # one panel per metric
    styles = {line.get_linestyle() for line in figure.axes[0].get_lines()}
    assert len(styles) == 4  # four flat lines on top of each other, each its own style
    assert figure.legends and figure.legends[0]._loc == 8  # lower center, outside the axes


def test_exact_match_by_length_puts_trained_and_longer_lengths_on_one_axis(tmp_path):
    rows = []
    for position, longer in (("learned", 0.0), ("abacus_bias", 1.0)):
        for seed, test in ((0, 0.97), (1, 0.01)):
            row = {"trial_id": f"{position}-{seed}", "model.position": position,
                   "train.seed": seed, "n_params": 1000, METRIC: test}  # fmt: skip
            row |= {f"test/exact_match/len_{n}": test for n in (1, 2, 3)}
            row |= {f"longer/exact_match/len_{n}": longer for n in (4, 5)}
            rows.append(row)
    trials = pd.DataFrame(rows)
    figures = plots.plots_for(trials, pd.DataFrame(columns=["trial_id", "metric", "step", "value"]))
    assert "exact_match_by_length" in figures
    assert "exact_match_by_length" not in plots.plots_for(
        trials.filter(regex="^(?!longer/)"), pd.DataFrame(columns=["trial_id", "metric", "step"])
    )
    ax = figures["exact_match_by_length"].axes[0]
    means = {
        line.get_label().split(" ")[0]: line
        for line in ax.get_lines()
        if line.get_marker() != "None"
    }
    assert list(means["learned"].get_xdata()) == [1, 2, 3, 4, 5]
    assert list(means["learned"].get_ydata()) == pytest.approx([0.49] * 3 + [0.0] * 2)
    assert list(means["abacus_bias"].get_ydata()[3:]) == [1.0, 1.0]
    faint = [line for line in ax.get_lines() if line.get_alpha() == 0.35]
    assert len(faint) == 4  # each seed beside its mean
    figures["exact_match_by_length"].savefig(tmp_path / "length.png")


# ---- what a cell pools (issue 19): named in the caption, never passed off as seeds ----


@pytest.mark.parametrize(
    ("rows", "columns", "pooled"),
    [
        (("model.d_model", "model.n_layer"), (), []),  # cells differ only in seed
        (("model.d_model",), (), ["model.n_layer"]),
        ((), ("model.n_layer",), ["model.d_model"]),
        ((), (), ["model.d_model", "model.n_layer"]),
    ],
)
def test_pooled_axes_are_named_in_the_caption(rows, columns, pooled):
    from sweeps.analysis.collect import render_tables
    from sweeps.analysis.table_notes import describe, pooled_axes

    trials = _trials()
    # A value derived from the width is constant in a width's cells: not pooled by a width row.
    trials["optim.lr"] = 1e-3 * 64 / trials["model.d_model"]
    spec = TableSpec("t", rows=rows, columns=columns, values=(METRIC,))
    expected = sorted(pooled + (["optim.lr"] if "model.d_model" not in rows + columns else []))
    assert sorted(pooled_axes(trials, spec)) == expected
    caption = render_tables(trials, [spec]).splitlines()[2]
    assert caption == describe(spec, pooled_axes(trials, spec))
    if expected:
        assert "pooled in each cell (varied, but not a row, column or select.over key): " in caption
        assert all(axis in caption.split("pooled in each cell")[1] for axis in expected)
    else:
        assert "pooled" not in caption and "(seeds, repeats)" in caption


def test_a_selected_key_is_not_pooled():
    from sweeps.analysis.table_notes import pooled_axes
    from sweeps.spec.table_block import Selection

    trials = _trials().assign(**{"val/exact_match": lambda f: f[METRIC]})
    spec = TableSpec(
        rows=("model.d_model",),
        values=(METRIC,),
        select=Selection(("model.n_layer",), "val/exact_match"),
    )
    assert pooled_axes(trials, spec) == []


def test_the_main_jobs_by_params_table_shows_the_chosen_figure_beside_the_peak_labelled():
    """The best trial is chosen on each trial's last val/exact_match; by_params showed only
    best/val/exact_match (a trial's peak at one evaluation: 0.994 beside the chosen 0.990),
    unlabelled. Now both, and the caption says which is which."""
    from pathlib import Path

    from sweeps.analysis.table_notes import describe
    from sweeps.spec.sweep_spec import load_spec

    root = Path(__file__).resolve().parents[1]
    spec = load_spec(root / "search_spaces" / "width_vs_depth.yaml")
    by_params = next(t for t in spec.tables if t.name == "by_params")
    assert {spec.sweep.metric, f"best/{spec.sweep.metric}"} <= set(by_params.values)
    caption = describe(by_params)
    assert "best/val/exact_match is a trial's peak val/exact_match at one evaluation" in caption
    assert "val/exact_match its last (what a best trial is chosen on)" in caption

"""What a newcomer reads off the figures of sweeps.analysis (issue 30, item 8): each names the
set it shows, the size plot and heatmap show the number the table reports, "± std" only over
more than one trial, the training curves' legend inside the figure with labels of the swept
values, and the embeddings' labels apart. Frames built by hand, as width_vs_depth's look."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from sweeps.analysis import plots
from sweeps.analysis.plot_diagnostics import embeddings_figure
from sweeps.analysis.plot_style import SET_NAMES
from sweeps.spec.table_block import TableSpec

GRID = ((128, 2), (128, 1), (64, 2), (64, 1), (32, 2), (32, 1))
# width_vs_depth's first table: test exact match over width x depth
TABLE = TableSpec("width_vs_depth", rows=("model.d_model",), columns=("model.n_layer",),
                  values=("test/exact_match", "n_params"))  # fmt: skip
NO_CURVES = pd.DataFrame(columns=["trial_id", "metric", "step", "value"])


def _trials(seeds: int = 1) -> pd.DataFrame:
    """The 3 x 2 grid with Tune's trial ids; validation reads 0.008 above test (0.946 / 0.938
    at 32 x 2, as the issue's run did)."""
    rows = []
    for seed in range(seeds):
        for d_model, n_layer in GRID:
            test = 0.938 + 0.01 * (d_model // 32 - 1) / 3 - 0.1 * (2 - n_layer) + 0.004 * seed
            rows.append({
                "trial_id": f"88bca_{len(rows):05d}", "model.d_model": d_model,
                "model.n_layer": n_layer, "train.seed": seed,
                "train.precision": "bf16" if d_model >= 64 else "fp32",
                "n_params": 12 * d_model * d_model * n_layer + 1000,
                "val/exact_match": test + 0.008, "test/exact_match": test,
            })  # fmt: skip
    return pd.DataFrame(rows)


def _curves(trials: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        [(t, m, step, 0.9 * step / 300) for t in trials["trial_id"]
         for m in ("val/exact_match", "train/loss") for step in (100, 200, 300)],
        columns=["trial_id", "metric", "step", "value"],
    )  # fmt: skip


def _texts(figure) -> str:
    """Every title, axis label, colour bar label and suptitle of a figure, in one string."""
    parts = [figure._suptitle.get_text() if figure._suptitle else ""]
    for ax in figure.axes:
        parts += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
    return "\n".join(parts)


def test_size_plot_and_heatmap_show_what_the_table_reports():
    trials = _trials()
    # the sweep's metric is validation's; the table reports test
    figures = plots.plots_for(trials, _curves(trials), "val/exact_match", [TABLE])
    assert plots.shown_metric(trials, "val/exact_match", [TABLE]) == "test/exact_match"
    size = figures["exact_match_vs_params"].axes[0]
    assert size.get_ylabel() == "test/exact_match"
    assert "(test set)" in size.get_title()
    markers = [line for line in size.get_lines() if line.get_marker() in plots.MARKERS]
    drawn = sorted(float(y) for line in markers for _, y in line.get_xydata())
    assert drawn == pytest.approx(sorted(trials["test/exact_match"]))  # 0.938 at 32 x 2, not 0.946
    heat = figures["width_x_depth"].axes[0]
    assert heat.get_title().startswith("test/exact_match (test set)")
    assert "0.938" in {t.get_text() for t in heat.texts}
    # without a table that reports one, the metric asked for, as before
    assert plots.shown_metric(trials, "val/exact_match") == "val/exact_match"


@pytest.mark.parametrize(
    "name", ["exact_match_vs_params", "width_x_depth", "training_curves", "isoflop"]
)
def test_each_figure_names_the_set_it_shows(name):
    trials = _trials().assign(**{"train.flops_budget": 1e12, "val/loss": 1.0})
    trials.loc[3:, "train.flops_budget"] = 1e13
    figure = plots.plots_for(trials, _curves(trials), "val/exact_match", [TABLE])[name]
    text = _texts(figure)
    assert any(f"({where}" in text for where in SET_NAMES.values()), text


@pytest.mark.parametrize("seeds", [1, 2])
def test_heatmap_says_std_only_over_more_than_one_trial(seeds):
    heat = plots.width_depth_heatmap(_trials(seeds)).axes[0]
    cells = [t.get_text() for t in heat.texts]
    if seeds == 1:
        assert "±" not in heat.get_title() and "one trial per cell" in heat.get_title()
        assert not any("±" in c for c in cells)
    else:
        assert "mean ± std per cell (n = 2 trials)" in heat.get_title()
        assert all("±" in c for c in cells)


def _inside(inner, outer, slack: float = 0.5) -> bool:
    return (inner.x0 >= outer.x0 - slack and inner.x1 <= outer.x1 + slack
            and inner.y0 >= outer.y0 - slack and inner.y1 <= outer.y1 + slack)  # fmt: skip


@pytest.mark.parametrize("extra_axes", [0, 4])
def test_training_curves_legend_inside_the_figure_with_the_swept_values(extra_axes):
    trials = _trials(seeds=2)
    for i in range(extra_axes):  # more varied axes: longer labels, fewer legend columns
        trials[f"optim.long_axis_name_{i}"] = np.arange(len(trials)) * 1e-4
    trials = trials.head(12)
    figure = plots.plots_for(trials, _curves(trials), "val/exact_match", [TABLE])["training_curves"]
    FigureCanvasAgg(figure).draw()
    legend = figure.legends[0]
    renderer = figure.canvas.get_renderer()
    assert _inside(legend.get_window_extent(renderer), figure.bbox)
    labels = [t.get_text() for t in legend.texts]
    assert len(labels) == len(trials)
    assert not any(label.startswith("88bca") for label in labels)  # no trial id first
    if extra_axes == 0:
        assert labels[:2] == ["128x2 bf16 seed=0", "128x1 bf16 seed=0"]
        assert legend.get_title().get_text() == "d_model x n_layer, precision"
    assert [ax.get_title() for ax in figure.axes] == [
        "val/exact_match (validation set)",
        "train/loss (training set)",
    ]


def _crowded_track(n_digits: int = 100) -> dict:
    """base 100's hundred digit tokens in a tight cluster, three others far apart."""
    rng = np.random.default_rng(0)
    tokens = [f"{i:02d}" for i in range(n_digits)] + ["+", "=", "<eos>"]
    ends = np.concatenate([rng.normal(0, 0.05, (n_digits, 2)), [[-1, 0.5], [-0.8, -1], [1, 1]]])
    coords = np.stack([ends * 0.2, ends * 0.6, ends], axis=1)  # (vocab, S=3, k=2)
    return {"steps": [0, 100, 200], "coords": coords.tolist(), "tokens": tokens,
            "used": list(range(len(tokens))), "explained_variance": [0.4, 0.2]}  # fmt: skip


def test_embedding_labels_do_not_pile_up():
    figure = embeddings_figure(_crowded_track())
    FigureCanvasAgg(figure).draw()
    renderer = figure.canvas.get_renderer()
    ax = figure.axes[0]
    labels = {t.get_text(): t.get_window_extent(renderer) for t in ax.texts}
    assert {"+", "=", "<eos>"} <= set(labels)  # the tokens that are not digits first
    assert 3 < len(labels) < 103  # a readable subset of the digits
    boxes = list(labels.values())
    overlaps = [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :] if a.overlaps(b)]
    assert not overlaps
    assert all(_inside(box, ax.bbox, slack=2) for box in boxes)  # <eos> turns left at the edge
    assert f"{len(labels)} of 103 tokens labelled" in ax.get_title()


def test_embedding_labels_all_shown_when_they_fit():
    track = _crowded_track(n_digits=0)
    figure = embeddings_figure(track)
    assert sorted(t.get_text() for t in figure.axes[0].texts) == ["+", "<eos>", "="]
    assert "labelled" not in figure.axes[0].get_title()


# ---- figures a reader can take out of their folder (issue 47) ----


def _main_job_trials() -> pd.DataFrame:
    """The grid as the main job logs it: its task and format, and what each trial trained in
    recorded beside the swept precision (``hardware.precision``)."""
    trials = _trials()
    return trials.assign(**{
        "task.name": "addition", "task.n_digits": 3, "format.name": "base100",
        "hardware.precision": trials["train.precision"],
    })  # fmt: skip


def test_a_copy_of_the_swept_precision_does_not_repeat_in_the_legend():
    trials = _main_job_trials()
    figure = plots.plots_for(trials, _curves(trials), "val/exact_match", [TABLE])["training_curves"]
    legend = figure.legends[0]
    labels = [t.get_text() for t in legend.texts]
    # It read "d_model x n_layer, precision, precision" over "128x2 bf16 bf16".
    assert legend.get_title().get_text() == "d_model x n_layer, precision"
    assert labels[:2] == ["128x2 bf16", "128x1 bf16"]
    assert len(set(labels)) == len(labels)


def test_two_axes_of_one_short_name_are_told_apart():
    trials = _trials().assign(**{"optim.dropout": [0.0, 0.1] * 3, "model.dropout": 0.1})
    trials.loc[:1, "model.dropout"] = 0.2
    labels = plots.trial_labels(trials)
    assert labels["88bca_00000"] == "128x2 bf16 optim.dropout=0 model.dropout=0.2"


def _colour_distance(a, b) -> float:
    return float(np.linalg.norm(np.asarray(a[:3]) - np.asarray(b[:3])))


def test_every_trials_line_has_a_colour_of_its_own():
    # 128 x 2 and 128 x 1 were two shades of dark purple, one colour to the eye.
    trials = _main_job_trials()
    figure = plots.plots_for(trials, _curves(trials), "val/exact_match", [TABLE])["training_curves"]
    colours = [line.get_color() for line in figure.axes[0].get_lines()]
    assert len(colours) == 6
    closest = min(_colour_distance(a, b) for i, a in enumerate(colours) for b in colours[i + 1 :])
    assert closest > 0.25, closest


def test_every_figure_names_its_sweep_and_task():
    trials = _main_job_trials()
    figures = plots.plots_for(
        trials, _curves(trials), "val/exact_match", [TABLE], sweep="width_vs_depth"
    )
    assert {"exact_match_vs_params", "width_x_depth", "training_curves"} <= set(figures)
    for name, figure in figures.items():
        title = figure.get_suptitle()
        assert title.startswith("width_vs_depth · 3-digit addition, base 100"), (name, title)
        assert any(f"({where}" in _texts(figure) for where in SET_NAMES.values()), name

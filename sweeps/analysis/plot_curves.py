"""Line figures of trials: training curves (a metric against step, a line per trial) and exact
match against operand length (the length-generalisation plot)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import pandas as pd
from matplotlib.figure import Figure

from sweeps.analysis.plot_heatmaps import WIDTH_DEPTH
from sweeps.analysis.plot_style import (
    FRACTION_YLIM,
    LINE_STYLES,
    MARKERS,
    MAX_LEGEND,
    line_colours,
    measured_on,
    metric_label,
    metric_y_axis,
    short,
)
from sweeps.analysis.tables import config_axes, format_key, varied_axes

CURVE_METRICS = ("val/exact_match", "train/loss")
# The legend's font size in points (matplotlib's "small" at its default 10 pt), which its
# column count is estimated from.
LEGEND_FONT_PT = 8.5
# Per-length exact match of the in-distribution and the longer-than-trained sets.
LENGTH_COLUMN = re.compile(r"^(test|longer)/exact_match/len_(\d+)$")


def training_curves(
    curves: pd.DataFrame,
    metrics: Sequence[str] = CURVE_METRICS,
    labels: Mapping[str, str] | None = None,
    legend_title: str | None = None,
) -> Figure:
    """Each metric against step, one panel per metric, one line per trial (``curves``:
    trial_id, metric, step, value); colour and line style both vary, so curves that sit on
    each other (a flat 0 or 1) stay apart; the legend (``labels``: a trial's, by its id) goes
    below the panels in as many columns as fit the figure's width."""
    present = [m for m in metrics if (curves["metric"] == m).any()] or list(metrics[:1])
    trial_ids = sorted(curves["trial_id"].unique())
    names = [(labels or {}).get(t, str(t)) for t in trial_ids]
    width = 5.5 * len(present)
    ncols = _legend_columns(names, width)
    legend_rows = -(-min(len(trial_ids), MAX_LEGEND) // ncols)
    fig = Figure(figsize=(width, 4.0 + 0.22 * legend_rows), layout="constrained")
    axes = fig.subplots(1, len(present), squeeze=False)[0]
    colours = line_colours(len(trial_ids))
    for ax, metric in zip(axes, present, strict=True):
        rows = curves[curves["metric"] == metric]
        for i, (colour, trial_id) in enumerate(zip(colours, trial_ids, strict=False)):
            line = rows[rows["trial_id"] == trial_id].sort_values("step")
            if line.empty:
                continue
            marker = "o" if len(line) == 1 else None  # a trial that died after one report
            style = LINE_STYLES[i % len(LINE_STYLES)]
            ax.plot(line["step"], line["value"], color=colour, lw=1.4, alpha=0.9, label=names[i],
                    ls=style, marker=marker, markersize=4, gid=str(trial_id))  # fmt: skip
        metric_y_axis(ax, metric, rows["value"])
        ax.set_xlabel("step")
        ax.set_ylabel(metric)
        ax.set_title(metric_label(metric))
        ax.grid(True, which="major", alpha=0.3)
    if 0 < len(trial_ids) <= MAX_LEGEND:
        fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center",
                   ncols=ncols, fontsize=LEGEND_FONT_PT, title=legend_title,
                   title_fontsize=LEGEND_FONT_PT)  # fmt: skip
    fig.suptitle(f"training curves ({len(trial_ids)} trials)")
    return fig


def _legend_columns(labels: Sequence[str], width_in: float) -> int:
    """As many legend columns as fit ``width_in`` inches with the longest label (a label's
    width estimated from its characters; the handle and spacing take about 5 ems)."""
    em = LEGEND_FONT_PT
    entry = em * (5.0 + 0.62 * max((len(label) for label in labels), default=1))
    fit = int((width_in * 72 - 2 * em) // entry)
    return max(1, min(len(labels), fit, 4))


def exact_match_by_length(trials: pd.DataFrame) -> Figure:
    """Exact match against operand length, the trained lengths (test set) and the longer ones
    on one axis, a line per configuration (the mean over seeds, each seed faint beside it), a
    dashed line after the longest trained length: the length-generalisation plot."""
    columns = {int(m[2]): c for c in trials.columns if (m := LENGTH_COLUMN.match(c))}
    lengths = sorted(columns)
    trained = [n for n in lengths if columns[n].startswith("test/")]
    keys = config_axes(trials)
    groups = trials.groupby(keys, dropna=False) if keys else [("all", trials)]
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.subplots()
    colours = line_colours(len(groups))
    for i, (colour, (key, part)) in enumerate(zip(colours, groups, strict=False)):
        values = part[[columns[n] for n in lengths]].astype(float).to_numpy()
        label = " ".join(format_key(k) for k in key) if isinstance(key, tuple) else format_key(key)
        ax.plot(lengths, values.mean(0), color=colour, marker=MARKERS[i % len(MARKERS)], lw=1.6,
                ls=LINE_STYLES[i % len(LINE_STYLES)], label=f"{label} (n={len(part)})")  # fmt: skip
        for trial in values:  # each seed faintly: a mean of 0.97 and 0.01 is not a 0.5 model
            ax.plot(lengths, trial, color=colour, lw=0.8, alpha=0.35)
    if trained and max(trained) < max(lengths):
        ax.axvline(max(trained) + 0.5, color="grey", ls="--", lw=1)
        ax.text(max(trained) + 0.6, 0.62, "longer than trained", color="grey", fontsize="small")
    ax.set_ylim(*FRACTION_YLIM)
    ax.set_xticks(lengths)
    ax.set_xlabel("operand digits")
    sets = dict.fromkeys(measured_on(columns[n]) for n in lengths)
    ax.set_ylabel(f"exact match ({', then '.join(sets)})")
    ax.grid(True, alpha=0.3)
    ax.legend(title=" x ".join(short(k) for k in keys) or None, fontsize="small", loc=(0.02, 0.1))
    ax.set_title(f"exact match by operand length ({len(trials)} trials)")
    return fig


def trial_labels(trials: pd.DataFrame) -> dict[str, str]:
    """Short legend labels from the swept values, by trial id: ``128x2 bf16 seed=1`` (width x
    depth as one term, a word as it is, any other value as ``name=value``; ``label_title``
    names the terms). Trials that share a label get their trial id's end after it, and a
    sweep of one configuration the trial id alone."""
    joined, axes, words = _label_terms(trials)
    labels = {}
    for _, row in trials.iterrows():
        parts = ["x".join(format_key(row[a]) for a in WIDTH_DEPTH)] if joined else []
        parts += [str(row[a]) for a in words]
        parts += [f"{_name(a, axes)}={format_key(row[a])}" for a in axes if a not in words]
        labels[str(row["trial_id"])] = " ".join(parts)
    shared = pd.Series(labels, dtype=object).duplicated(keep=False)
    for trial_id in shared[shared].index:
        end = trial_id.rsplit("_", 1)[-1]
        labels[trial_id] = f"{labels[trial_id]} #{end}" if labels[trial_id] else trial_id
    return labels


def label_title(trials: pd.DataFrame) -> str | None:
    """What ``trial_labels``' bare terms are, for the legend's title: ``d_model x n_layer,
    precision``; None where every term names itself (``seed=1``)."""
    joined, axes, words = _label_terms(trials)
    terms = ([" x ".join(short(a) for a in WIDTH_DEPTH)] if joined else []) + [
        _name(a, axes) for a in words
    ]
    return ", ".join(terms) or None


def _label_terms(trials: pd.DataFrame) -> tuple[bool, list[str], list[str]]:
    """Whether width and depth both vary (one ``128x2`` term), the other varied axes, and
    those of them whose values are words (``bf16``, ``rope``: shown bare). An axis that says
    what an earlier one says, trial for trial, is left out: ``hardware.precision`` repeats a
    swept ``train.precision`` (``128x2 bf16 bf16`` under ``precision, precision``)."""
    varied = varied_axes(trials)
    joined = all(a in varied for a in WIDTH_DEPTH)
    axes: list[str] = []
    for a in varied:
        if joined and a in WIDTH_DEPTH:
            continue
        if not any(trials[a].astype(str).equals(trials[b].astype(str)) for b in axes):
            axes.append(a)
    words = [a for a in axes if trials[a].map(_is_word).all()]
    return joined, axes, words


def _name(axis: str, axes: Sequence[str]) -> str:
    """An axis's short name (``d_model``), or its whole path where another axis shares it."""
    return axis if sum(short(a) == short(axis) for a in axes) > 1 else short(axis)


def _is_word(value: object) -> bool:
    return isinstance(value, str) and not value.replace(".", "").replace("-", "").isdigit()

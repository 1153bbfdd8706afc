"""Line figures of trials: training curves (a metric against step, a line per trial) and exact
match against operand length (the length-generalisation plot)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sweeps.analysis.plot_style import (
    FRACTION_YLIM,
    LINE_STYLES,
    MARKERS,
    MAX_LEGEND,
    metric_y_axis,
    short,
)
from sweeps.analysis.tables import config_axes, format_key, varied_axes

CURVE_METRICS = ("val/exact_match", "train/loss")
# Per-length exact match of the in-distribution and the longer-than-trained sets.
LENGTH_COLUMN = re.compile(r"^(test|longer)/exact_match/len_(\d+)$")


def training_curves(
    curves: pd.DataFrame,
    metrics: Sequence[str] = CURVE_METRICS,
    labels: Mapping[str, str] | None = None,
) -> Figure:
    """Each metric against step, one panel per metric, one line per trial (``curves``:
    trial_id, metric, step, value); colour and line style both vary, so curves that sit on
    each other (a flat 0 or 1) stay apart; the legend goes below the panels."""
    present = [m for m in metrics if (curves["metric"] == m).any()] or list(metrics[:1])
    trial_ids = sorted(curves["trial_id"].unique())
    legend_rows = -(-min(len(trial_ids), MAX_LEGEND) // 2)
    fig = Figure(figsize=(5.5 * len(present), 4.0 + 0.22 * legend_rows), layout="constrained")
    axes = fig.subplots(1, len(present), squeeze=False)[0]
    colours = matplotlib.colormaps["viridis"](np.linspace(0.0, 0.9, max(len(trial_ids), 1)))
    for ax, metric in zip(axes, present, strict=True):
        rows = curves[curves["metric"] == metric]
        for i, (colour, trial_id) in enumerate(zip(colours, trial_ids, strict=False)):
            line = rows[rows["trial_id"] == trial_id].sort_values("step")
            if line.empty:
                continue
            label = (labels or {}).get(trial_id, str(trial_id))
            marker = "o" if len(line) == 1 else None  # a trial that died after one report
            style = LINE_STYLES[i % len(LINE_STYLES)]
            ax.plot(line["step"], line["value"], color=colour, lw=1.4, alpha=0.9, label=label,
                    ls=style, marker=marker, markersize=4)  # fmt: skip
        metric_y_axis(ax, metric, rows["value"])
        ax.set_xlabel("step")
        ax.set_ylabel(metric)
        ax.set_title(metric)
        ax.grid(True, which="major", alpha=0.3)
    if 0 < len(trial_ids) <= MAX_LEGEND:
        fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center",
                   ncols=min(len(trial_ids), 2 if len(present) == 1 else 3),
                   fontsize="small")  # fmt: skip
    fig.suptitle(f"training curves ({len(trial_ids)} trials)")
    return fig


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
    colours = matplotlib.colormaps["viridis"](np.linspace(0.0, 0.85, max(len(groups), 1)))
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
    ax.set_ylabel("exact match")
    ax.grid(True, alpha=0.3)
    ax.legend(title=" x ".join(short(k) for k in keys) or None, fontsize="small", loc=(0.02, 0.1))
    ax.set_title(f"exact match by operand length ({len(trials)} trials)")
    return fig


def trial_labels(trials: pd.DataFrame) -> dict[str, str]:
    """Short legend labels from the varied axes: ``t0003 d_model=64 n_layer=2 seed=1``."""
    axes = varied_axes(trials)
    labels = {}
    for _, row in trials.iterrows():
        parts = [f"{short(a)}={format_key(row[a])}" for a in axes]
        labels[str(row["trial_id"])] = " ".join([str(row["trial_id"]), *parts])
    return labels

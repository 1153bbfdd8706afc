"""Figures of a metric against model size: the scaling plot (``exact_match_vs_params``, with
its fitted laws) and the isoFLOP plot (final loss per compute budget)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from sweeps.analysis.plot_style import (
    MARKERS,
    MAX_LEGEND,
    metric_label,
    metric_y_axis,
    readable_log_ticks,
    short,
    short_number,
)
from sweeps.analysis.power_law import GroupFit, equation, floored_error, set_size_column
from sweeps.analysis.tables import config_axes, format_key
from sweeps.spec.table_block import FitSpec

BUDGET = "train.flops_budget"
# The keys a scaling plot colours its series by when it has no fit per group, first varied wins.
SERIES_KEYS = ("model.n_layer", "model.d_model")


def exact_match_vs_params(
    trials: pd.DataFrame,
    metric: str = "test/exact_match",
    *,
    x: str = "n_params",
    cells: Sequence[str] | None = None,
    chosen: Sequence[str] = (),
    fits: Sequence[GroupFit] = (),
    fit_spec: FitSpec | None = None,
) -> Figure:
    """``metric`` against ``x`` (log axis, ticks as 10K / 1M): a faint point per trial and one
    marker (mean ± std over seeds) per cell (``cells``: the keys that make one; default the
    varied axes), coloured by depth (or width) where the sweep varies it. ``chosen``: the keys a
    selected table chose per cell, shown by marker shape and named in the legend. ``fits``: the
    fitted laws, drawn over the points with their equations."""
    fig = Figure(figsize=(7.0, 4.8), layout="constrained")
    ax = fig.add_subplot()
    data = trials.dropna(subset=[x, metric]).copy()
    keys = list(cells) if cells else (config_axes(data) or [x])
    keys = list(dict.fromkeys([*keys, *chosen]))
    # Fits per group: colour by the group's key, so each law sits on its own points.
    grouped = next((k for g in fits for k in g.group), None)
    series_key = grouped or next((a for a in SERIES_KEYS if a in config_axes(data)), None)
    series = [None] if series_key is None else sorted(data[series_key].dropna().unique())
    colours = matplotlib.colormaps["viridis"](np.linspace(0.0, 0.85, max(len(series), 1)))
    shapes = _chosen_shapes(data, chosen)
    for colour, level in zip(colours, series, strict=False):
        part = data if level is None else data[data[series_key] == level]
        _draw_series(ax, part, keys, x, metric, colour, shapes)
    handles = _legend_handles(series_key, series, colours, shapes, chosen)
    by_level = dict(zip(series, colours, strict=False))
    handles += _draw_fits(ax, data, x, fits, fit_spec, grouped, by_level)
    if fit_spec is not None and fit_spec.fits_error and any(g.fit is not None for g in fits):
        handles += _mark_floored(ax, data, x, metric)
    ax.set_xscale("log")
    readable_log_ticks(ax.xaxis)
    ax.set_xlabel(f"parameters ({x})" if x.startswith("n_params") else x)
    ax.set_ylabel(metric)
    metric_y_axis(ax, metric, data[metric])
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", alpha=0.1)
    n_cells = len(data.groupby(keys, dropna=False)) if len(data) else 0
    ax.set_title(f"{metric_label(metric)} vs {x}\n({len(data)} trials, {n_cells} cells)")
    if handles and len(handles) <= MAX_LEGEND + 4:
        ax.legend(handles=handles, fontsize="small", loc="best")
    return fig


def _draw_series(
    ax, part: pd.DataFrame, keys: list[str], x: str, metric: str, colour, shapes: dict
) -> None:
    """One colour's trials: a faint point each, and a marker with its std per cell."""
    ax.scatter(part[x], part[metric], s=14, color=colour, alpha=0.3, linewidths=0)
    stats = _cell_stats(part, keys, x, metric)
    # Join the means into a scaling curve only where size alone tells the cells apart.
    if stats["x"].is_unique and len(stats) > 1:
        ax.plot(stats["x"], stats["mean"], color=colour, lw=1, alpha=0.8)
    for pick, marker in shapes.items():
        rows = stats if pick is None else stats[stats["pick"] == pick]
        if rows.empty:
            continue
        ax.errorbar(rows["x"], rows["mean"], yerr=rows["std"], fmt=marker, color=colour,
                    capsize=3, markersize=7, lw=1)  # fmt: skip


def _draw_fits(
    ax,
    data: pd.DataFrame,
    x: str,
    fits: Sequence[GroupFit],
    fit_spec: FitSpec | None,
    grouped: str | None,
    by_level: dict,
) -> list:
    """The fitted laws as dashed lines over their groups' range of ``x``, each in its group's
    colour (black without groups); their legend handles, labelled with the equations."""
    handles = []
    for group in fits:
        if group.fit is None or fit_spec is None:
            continue
        colour = by_level.get(group.group.get(grouped), "black") if grouped else "black"
        part = data[data[grouped] == group.group[grouped]] if grouped else data
        grid = np.geomspace(part[x].min(), part[x].max(), 100)
        where = f" [{group.label()}]" if group.group else ""
        (line,) = ax.plot(grid, fit_spec.predict(group.fit, grid), "--", color=colour, lw=1.5,
                          label=f"fit{where}: {equation(group.fit, fit_spec)}")  # fmt: skip
        handles.append(line)
    return handles


def _mark_floored(ax, data: pd.DataFrame, x: str, metric: str) -> list:
    """Ring the trials at 100 % whose error the fit took at the set's resolution
    (sweeps.analysis.power_law.floored_error): the law did not see them as measured; the legend
    counts them."""
    floored = floored_error(data, metric)[1]
    if not floored.any():
        return []
    label = f"100 %, fitted at error 0.5 / {set_size_column(metric)} ({int(floored.sum())})"
    rows = data[floored]
    return [ax.scatter(rows[x], rows[metric], s=70, facecolors="none", edgecolors="red",
                       linewidths=1.2, label=label, gid="floored")]  # fmt: skip


def _cell_stats(part: pd.DataFrame, keys: list[str], x: str, metric: str) -> pd.DataFrame:
    groups = part.groupby(keys, dropna=False)
    stats = pd.DataFrame(
        {
            "x": groups[x].mean(),
            "mean": groups[metric].mean(),
            "std": groups[metric].std(ddof=1).fillna(0.0),
        }
    )
    # A cell's chosen value is the last key of its index (the chosen keys come last).
    stats["pick"] = [k[-1] if isinstance(k, tuple) else k for k in stats.index]
    return stats.sort_values("x")


def _chosen_shapes(data: pd.DataFrame, chosen: Sequence[str]) -> dict[object, str]:
    """Marker per chosen value of the (last) chosen key; one shape without a choice."""
    if not chosen:
        return {None: "o"}
    values = sorted(data[chosen[-1]].dropna().unique())
    return {v: MARKERS[i % len(MARKERS)] for i, v in enumerate(values)}


def _legend_handles(series_key, series, colours, shapes, chosen) -> list:
    handles = []
    if series_key is not None and len(series) <= MAX_LEGEND:
        for colour, level in zip(colours, series, strict=False):
            label = f"{short(series_key)}={format_key(level)}"
            handles.append(Line2D([], [], color=colour, marker="o", lw=1, label=label))
    if chosen and len(shapes) <= MAX_LEGEND:
        for value, marker in shapes.items():
            label = f"chosen {short(chosen[-1])}={format_key(value)}"
            handles.append(Line2D([], [], color="grey", marker=marker, ls="", label=label))
    return handles


def isoflop(trials: pd.DataFrame, metric: str | None = None) -> Figure:
    """Final loss against parameters, one curve per ``train.flops_budget`` (mean over seeds),
    each curve's minimum marked: the compute-optimal size per budget (Hoffmann et al. 2022)."""
    metric = metric or next(
        (m for m in ("test/loss", "val/loss") if m in trials and trials[m].notna().any()),
        "val/loss",
    )
    fig = Figure(figsize=(7.0, 4.8), layout="constrained")
    ax = fig.add_subplot()
    data = trials.dropna(subset=["n_params", metric, BUDGET])
    budgets = sorted(data[BUDGET].unique())
    colours = matplotlib.colormaps["plasma"](np.linspace(0.0, 0.8, max(len(budgets), 1)))
    for colour, budget in zip(colours, budgets, strict=False):
        part = data[data[BUDGET] == budget]
        curve = part.groupby("n_params")[metric].mean().sort_index()
        label = f"{short_number(float(budget))} FLOPs"
        ax.plot(curve.index, curve.values, "o-", color=colour, lw=1.2, label=label)
        best = curve.idxmin()
        ax.plot([best], [curve[best]], "*", color=colour, markersize=16, markeredgecolor="black")
    ax.set_xscale("log")
    readable_log_ticks(ax.xaxis)
    if len(data) and (data[metric] > 0).all():
        ax.set_yscale("log")
        readable_log_ticks(ax.yaxis)
    ax.set_xlabel("parameters (n_params)")
    ax.set_ylabel(f"final {metric}")
    ax.set_title(f"isoFLOP: {metric_label(metric)} vs parameters per budget (★ = lowest)")
    ax.grid(True, which="major", alpha=0.3)
    if budgets:
        ax.legend(title=BUDGET, fontsize="small")
    return fig


def exact_match_by_op(trials: pd.DataFrame, split: str = "test") -> Figure:
    """Each operation's ``<split>/exact_match/<op>`` against parameters, a line per operation
    (mean over the trials of a size, a faint point per trial): the size ladder at which an
    operation emerges (seed 004's one model for + - * // %)."""
    from arith.evaluation.evaluate import OP_NAMES

    fig = Figure(figsize=(7.0, 4.8), layout="constrained")
    ax = fig.add_subplot()
    columns = [c for op in OP_NAMES.values() if (c := f"{split}/exact_match/{op}") in trials]
    colours = matplotlib.colormaps["tab10"](np.arange(len(columns)))
    for colour, column in zip(colours, columns, strict=True):
        data = trials.dropna(subset=["n_params", column])
        means = data.groupby("n_params")[column].mean()
        ax.scatter(data["n_params"], data[column], color=colour, alpha=0.3, s=12)
        ax.plot(means.index, means.values, marker="o", color=colour, label=column.split("/")[-1])
    ax.set_xscale("log")
    readable_log_ticks(ax.xaxis)
    ax.set_xlabel("parameters (n_params)")
    ax.set_ylabel(f"{split}/exact_match per operation")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    ax.set_title(f"{metric_label(split + '/exact_match')} per operation vs parameters "
                 f"({len(trials)} trials)")  # fmt: skip
    return fig

"""Scaling plots: trials / curves DataFrames -> matplotlib Figures (Agg, no pyplot state).

Figures are built with ``matplotlib.figure.Figure`` directly rather than pyplot, so a sweep
that draws many of them keeps no global figure registry alive and needs no display.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
from matplotlib import ticker
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from sweeps.analysis.power_law import GroupFit, equation, floored_error, set_size_column
from sweeps.analysis.tables import (
    build_table,
    format_key,
    primary_metric,
    select_trials,
    varied_axes,
)
from sweeps.spec.metrics import is_fraction
from sweeps.spec.table_block import FitSpec, TableSpec

CURVE_METRICS = ("val/exact_match", "train/loss")
WIDTH_DEPTH = ("model.d_model", "model.n_layer")
BATCH_LR = ("train.batch_size", "optim.lr")
# More distinct values than this on a heatmap axis (a random search's lr) get log-binned.
MAX_LEVELS = 8
MAX_LEGEND = 12
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
# Line styles cycled with colour, so flat curves lying on top of each other stay apart.
LINE_STYLES = ("-", "--", ":", "-.")
BUDGET = "train.flops_budget"
# Per-length exact match of the in-distribution and the longer-than-trained sets.
LENGTH_COLUMN = re.compile(r"^(test|longer)/exact_match/len_(\d+)$")


def _log_scaled_loss(metric: str, values: pd.Series) -> bool:
    """Whether ``values`` of ``metric`` go on a log y axis: a loss, positive throughout. A loss
    can fall by orders of magnitude over training and across sizes, and a log axis keeps all of
    that fall readable. This chooses an axis, not which way is better (``metric_direction``):
    an error or a number of steps, also better low, stays on a linear axis."""
    return "loss" in metric and len(values) > 0 and bool((values > 0).all())


def _short(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def _config_axes(trials: pd.DataFrame) -> list[str]:
    """The axes that tell configurations apart; seeds are repeats of one configuration."""
    return [a for a in varied_axes(trials) if a != "train.seed"]


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
    keys = list(cells) if cells else (_config_axes(data) or [x])
    keys = list(dict.fromkeys([*keys, *chosen]))
    # Fits per group: colour by the group's key, so each law sits on its own points.
    grouped = next((k for g in fits for k in g.group), None)
    series_key = grouped or next(
        (a for a in ("model.n_layer", "model.d_model") if a in _config_axes(data)), None
    )
    series = [None] if series_key is None else sorted(data[series_key].dropna().unique())
    colours = matplotlib.colormaps["viridis"](np.linspace(0.0, 0.85, max(len(series), 1)))
    shapes = _chosen_shapes(data, chosen)
    for colour, level in zip(colours, series, strict=False):
        part = data if level is None else data[data[series_key] == level]
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
    handles = _legend_handles(series_key, series, colours, shapes, chosen)
    by_level = dict(zip(series, colours, strict=False))
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
    if fit_spec is not None and fit_spec.fits_error and any(g.fit is not None for g in fits):
        handles += _mark_floored(ax, data, x, metric)
    ax.set_xscale("log")
    _readable_log_ticks(ax.xaxis)
    ax.set_xlabel(f"parameters ({x})" if x.startswith("n_params") else x)
    ax.set_ylabel(metric)
    if is_fraction(metric):
        ax.set_ylim(-0.03, 1.03)
    elif _log_scaled_loss(metric, data[metric]):
        ax.set_yscale("log")
        _readable_log_ticks(ax.yaxis)
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", alpha=0.1)
    n_cells = len(data.groupby(keys, dropna=False)) if len(data) else 0
    ax.set_title(f"{metric} vs {x} ({len(data)} trials, {n_cells} cells)")
    if handles and len(handles) <= MAX_LEGEND + 4:
        ax.legend(handles=handles, fontsize="small", loc="best")
    return fig


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
            label = f"{_short(series_key)}={format_key(level)}"
            handles.append(Line2D([], [], color=colour, marker="o", lw=1, label=label))
    if chosen and len(shapes) <= MAX_LEGEND:
        for value, marker in shapes.items():
            label = f"chosen {_short(chosen[-1])}={format_key(value)}"
            handles.append(Line2D([], [], color="grey", marker=marker, ls="", label=label))
    return handles


def _short_number(value: float, _pos: object = None) -> str:
    """Tick labels people read: 3K, 100K, 1.5M, 2G; 0.01, 0.5, 3 below a thousand."""
    if value <= 0:
        return f"{value:g}"
    for size, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if value >= size:
            return f"{value / size:g}{suffix}"
    return f"{value:g}"


def _readable_log_ticks(axis) -> None:
    """A log axis labelled 10K, 30K, 100K (with minor labels where it spans a decade or less)."""
    axis.set_major_formatter(ticker.FuncFormatter(_short_number))
    low, high = axis.get_data_interval()
    few_decades = low > 0 and high / low <= 100
    axis.set_minor_locator(ticker.LogLocator(subs=(2.0, 3.0, 5.0)))
    axis.set_minor_formatter(
        ticker.FuncFormatter(_short_number) if few_decades else ticker.NullFormatter()
    )


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
        label = f"{_short_number(float(budget))} FLOPs"
        ax.plot(curve.index, curve.values, "o-", color=colour, lw=1.2, label=label)
        best = curve.idxmin()
        ax.plot([best], [curve[best]], "*", color=colour, markersize=16, markeredgecolor="black")
    ax.set_xscale("log")
    _readable_log_ticks(ax.xaxis)
    if len(data) and (data[metric] > 0).all():
        ax.set_yscale("log")
        _readable_log_ticks(ax.yaxis)
    ax.set_xlabel("parameters (n_params)")
    ax.set_ylabel(f"final {metric}")
    ax.set_title(f"isoFLOP: {metric} vs parameters per budget (★ = lowest)")
    ax.grid(True, which="major", alpha=0.3)
    if budgets:
        ax.legend(title=BUDGET, fontsize="small")
    return fig


def _log_binned(values: pd.Series, max_levels: int = MAX_LEVELS) -> tuple[pd.Series, bool]:
    """Values as they are when few, else the centre of one of ``max_levels`` log-spaced bins."""
    numeric = pd.to_numeric(values, errors="coerce")
    if values.nunique() <= max_levels or numeric.isna().any() or (numeric <= 0).any():
        return values, False
    logs = np.log10(numeric)
    edges = np.linspace(logs.min(), logs.max(), max_levels + 1)
    index = np.clip(np.digitize(logs, edges[1:-1]), 0, max_levels - 1)
    centres = 10 ** ((edges[:-1] + edges[1:]) / 2)
    return pd.Series(centres[index], index=values.index).map(lambda c: float(f"{c:.2g}")), True


def heatmap(trials: pd.DataFrame, x: str, y: str, metric: str) -> Figure:
    """Mean metric per (y, x) cell, annotated with mean and ± std over the cell's trials."""
    data = trials.copy()
    data[x], x_binned = _log_binned(data[x])
    data[y], y_binned = _log_binned(data[y])
    spec = TableSpec(name="heatmap", rows=(y,), columns=(x,), values=(metric,))
    table = build_table(data, spec)
    x_levels = [c[0] for c in table.columns if c[-1] == "mean"]
    mean = np.array([[table.loc[r, (c, metric, "mean")] for c in x_levels] for r in table.index])
    std = np.array([[table.loc[r, (c, metric, "std")] for c in x_levels] for r in table.index])
    fig = Figure(figsize=(1.2 * len(x_levels) + 2.8, 0.8 * len(table.index) + 1.8))
    fig.set_layout_engine("constrained")
    ax = fig.add_subplot()
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="lightgrey")
    limits = {"vmin": 0.0, "vmax": 1.0} if is_fraction(metric) else {}
    image = ax.imshow(
        np.ma.masked_invalid(mean), cmap=cmap, origin="lower", aspect="auto", **limits
    )
    low, high = image.get_clim()
    for i in range(mean.shape[0]):
        for j in range(mean.shape[1]):
            text = _cell_text(mean[i, j], std[i, j], is_fraction(metric))
            ax.text(j, i, text, ha="center", va="center",
                    fontsize=9, color=_text_colour(mean[i, j], low, high))  # fmt: skip
    ax.set_xticks(range(len(x_levels)), [format_key(v) for v in x_levels])
    ax.set_yticks(range(len(table.index)), [format_key(v) for v in table.index])
    ax.set_xlabel(x + (" (log-binned)" if x_binned else ""))
    ax.set_ylabel(y + (" (log-binned)" if y_binned else ""))
    ax.set_title(f"{metric}: mean ± std per cell")
    fig.colorbar(image, ax=ax, label=metric)
    return fig


def _cell_text(mean: float, std: float, fraction: bool) -> str:
    if np.isnan(mean):
        return "—"
    spec = ".3f" if fraction else ".3g"
    return f"{mean:{spec}}" if np.isnan(std) else f"{mean:{spec}}\n±{std:{spec}}"


def _text_colour(value: float, low: float, high: float) -> str:
    # viridis is dark at the bottom of its range: white text there, black at the top.
    if np.isnan(value) or high <= low:
        return "black"
    return "white" if (value - low) / (high - low) < 0.6 else "black"


def width_depth_heatmap(trials: pd.DataFrame, metric: str = "test/exact_match") -> Figure:
    return heatmap(trials, x=WIDTH_DEPTH[1], y=WIDTH_DEPTH[0], metric=metric)


def batch_lr_heatmap(trials: pd.DataFrame, metric: str = "test/exact_match") -> Figure:
    return heatmap(trials, x=BATCH_LR[1], y=BATCH_LR[0], metric=metric)


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
        if _log_scaled_loss(metric, rows["value"]):
            ax.set_yscale("log")
            _readable_log_ticks(ax.yaxis)
        if is_fraction(metric):
            ax.set_ylim(-0.03, 1.03)
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
    keys = _config_axes(trials)
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
    ax.set_ylim(-0.03, 1.03)
    ax.set_xticks(lengths)
    ax.set_xlabel("operand digits")
    ax.set_ylabel("exact match")
    ax.grid(True, alpha=0.3)
    ax.legend(title=" x ".join(_short(k) for k in keys) or None, fontsize="small", loc=(0.02, 0.1))
    ax.set_title(f"exact match by operand length ({len(trials)} trials)")
    return fig


def trial_labels(trials: pd.DataFrame) -> dict[str, str]:
    """Short legend labels from the varied axes: ``t0003 d_model=64 n_layer=2 seed=1``."""
    axes = varied_axes(trials)
    labels = {}
    for _, row in trials.iterrows():
        parts = [f"{_short(a)}={format_key(row[a])}" for a in axes]
        labels[str(row["trial_id"])] = " ".join([str(row["trial_id"]), *parts])
    return labels


def plots_for(
    trials: pd.DataFrame,
    curves: pd.DataFrame,
    metric: str | None = None,
    specs: Sequence[TableSpec] = (),
    fits: Mapping[str, list[GroupFit] | str] | None = None,
) -> dict[str, Figure]:
    """The plots this sweep supports, by file stem: heatmaps only where both axes vary; the
    metric against parameters over the cells of the first selected table (with its fit where
    it fits the metric against n_params); ``fit_<table>`` for every other fitted table; an
    isoFLOP plot where ``train.flops_budget`` varies; exact match by operand length where the
    trials have a longer-than-trained set."""
    if metric is None or "exact_match" not in metric:  # the figures are of exact match
        metric = primary_metric(trials)
    fits = fits or {}
    axes = varied_axes(trials)
    figures: dict[str, Figure] = {}
    has_metric = metric in trials.columns and trials[metric].notna().any()
    shown = next((s for s in specs if s.select is not None and metric in s.values), None)
    overlay = next((s for s in specs if s.fit and (s.fit.x, s.fit.y) == ("n_params", metric)), None)
    shown = shown or overlay
    if has_metric and "n_params" in trials.columns and trials["n_params"].notna().any():
        figures["exact_match_vs_params"] = _size_plot(trials, metric, "n_params", shown, fits)
    for spec in specs:
        if spec.fit is None or spec is overlay:
            continue
        if {spec.fit.x, spec.fit.y} <= set(trials.columns):
            figures[f"fit_{spec.name}"] = _size_plot(trials, spec.fit.y, spec.fit.x, spec, fits)
    if has_metric and all(a in axes for a in WIDTH_DEPTH):
        figures["width_x_depth"] = width_depth_heatmap(trials, metric)
    if has_metric and all(a in axes for a in BATCH_LR):
        figures["batch_size_x_lr"] = batch_lr_heatmap(trials, metric)
    if BUDGET in axes and "n_params" in trials.columns:
        figures["isoflop"] = isoflop(trials)
    if any(c.startswith("longer/") and LENGTH_COLUMN.match(c) for c in trials.columns):
        figures["exact_match_by_length"] = exact_match_by_length(trials)
    if len(curves):
        figures["training_curves"] = training_curves(curves, labels=trial_labels(trials))
    return figures


def _size_plot(
    trials: pd.DataFrame,
    metric: str,
    x: str,
    spec: TableSpec | None,
    fits: Mapping[str, list[GroupFit] | str],
) -> Figure:
    """``exact_match_vs_params`` over a table's selected cells, with its fits where they are of
    this metric against this x."""
    if spec is None:
        return exact_match_vs_params(trials, metric, x=x)
    groups = fits.get(spec.name)
    drawn = spec.fit is not None and (spec.fit.x, spec.fit.y) == (x, metric)
    return exact_match_vs_params(
        select_trials(trials, spec),
        metric,
        x=x,
        cells=[*spec.rows, *spec.columns] or None,
        chosen=spec.select.over if spec.select is not None else (),
        fits=groups if drawn and isinstance(groups, list) else (),
        fit_spec=spec.fit if drawn else None,
    )

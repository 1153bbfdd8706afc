"""Scaling plots: trials / curves DataFrames -> matplotlib Figures (Agg, no pyplot state).

Figures are built with ``matplotlib.figure.Figure`` directly rather than pyplot, so a sweep
that draws many of them keeps no global figure registry alive and needs no display.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sweeps.tables import (
    TableSpec,
    build_table,
    format_key,
    primary_metric,
    varied_axes,
)

CURVE_METRICS = ("val/exact_match", "train/loss")
WIDTH_DEPTH = ("model.d_model", "model.n_layer")
BATCH_LR = ("train.batch_size", "optim.lr")
# More distinct values than this on a heatmap axis (a random search's lr) get log-binned.
MAX_LEVELS = 8
MAX_LEGEND = 12


def _is_fraction(metric: str) -> bool:
    return "exact_match" in metric or "accuracy" in metric or "normalised_match" in metric


def _short(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def _config_axes(trials: pd.DataFrame) -> list[str]:
    """The axes that tell configurations apart; seeds are repeats of one configuration."""
    return [a for a in varied_axes(trials) if a != "train.seed"]


def exact_match_vs_params(trials: pd.DataFrame, metric: str = "test/exact_match") -> Figure:
    """Metric against parameter count (log x): a faint point per trial, mean ± std per config,
    coloured by depth (or width) where the sweep varies it."""
    fig = Figure(figsize=(6.4, 4.4), layout="constrained")
    ax = fig.add_subplot()
    data = trials.dropna(subset=["n_params", metric]).copy()
    axes = _config_axes(data) or ["n_params"]
    series_key = next((a for a in ("model.n_layer", "model.d_model") if a in axes), None)
    series = [None] if series_key is None else sorted(data[series_key].dropna().unique())
    colours = matplotlib.colormaps["viridis"](np.linspace(0.0, 0.85, max(len(series), 1)))
    for colour, level in zip(colours, series, strict=False):
        part = data if level is None else data[data[series_key] == level]
        ax.scatter(part["n_params"], part[metric], s=14, color=colour, alpha=0.35, linewidths=0)
        groups = part.groupby(axes, dropna=False)
        stats = pd.DataFrame(
            {
                "x": groups["n_params"].mean(),
                "mean": groups[metric].mean(),
                "std": groups[metric].std(ddof=1).fillna(0.0),
            }
        ).sort_values("x")
        label = None if level is None else f"{_short(series_key)}={format_key(level)}"
        # Join the means into a scaling curve only where size alone tells the configs apart.
        style = "o-" if stats["x"].is_unique and len(stats) > 1 else "o"
        ax.errorbar(
            stats["x"], stats["mean"], yerr=stats["std"], fmt=style, color=colour,
            capsize=3, markersize=6, lw=1, label=label,
        )  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("parameters (n_params)")
    ax.set_ylabel(metric)
    if _is_fraction(metric):
        ax.set_ylim(-0.03, 1.03)
    ax.grid(True, which="both", alpha=0.3)
    n_configs = len(data.groupby(axes, dropna=False)) if len(data) else 0
    ax.set_title(f"{metric} vs parameters ({len(data)} trials, {n_configs} configs)")
    if series_key is not None and len(series) <= MAX_LEGEND:
        ax.legend(title=None, fontsize="small")
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
    limits = {"vmin": 0.0, "vmax": 1.0} if _is_fraction(metric) else {}
    image = ax.imshow(
        np.ma.masked_invalid(mean), cmap=cmap, origin="lower", aspect="auto", **limits
    )
    low, high = image.get_clim()
    for i in range(mean.shape[0]):
        for j in range(mean.shape[1]):
            text = _cell_text(mean[i, j], std[i, j], _is_fraction(metric))
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
    """Each metric against step, one line per trial (``curves``: trial_id, metric, step, value)."""
    present = [m for m in metrics if (curves["metric"] == m).any()] or list(metrics[:1])
    fig = Figure(figsize=(6.0 * len(present), 4.2), layout="constrained")
    axes = fig.subplots(1, len(present), squeeze=False)[0]
    trial_ids = sorted(curves["trial_id"].unique())
    colours = matplotlib.colormaps["viridis"](np.linspace(0.0, 0.9, max(len(trial_ids), 1)))
    for ax, metric in zip(axes, present, strict=True):
        rows = curves[curves["metric"] == metric]
        for colour, trial_id in zip(colours, trial_ids, strict=False):
            line = rows[rows["trial_id"] == trial_id].sort_values("step")
            if line.empty:
                continue
            label = (labels or {}).get(trial_id, str(trial_id))
            marker = "o" if len(line) == 1 else None  # a trial that died after one report
            ax.plot(line["step"], line["value"], color=colour, lw=1.2, alpha=0.85, label=label,
                    marker=marker, markersize=4)  # fmt: skip
        if "loss" in metric and (rows["value"] > 0).all() and len(rows):
            ax.set_yscale("log")
        if _is_fraction(metric):
            ax.set_ylim(-0.03, 1.03)
        ax.set_xlabel("step")
        ax.set_ylabel(metric)
        ax.set_title(metric)
        ax.grid(True, alpha=0.3)
    if 0 < len(trial_ids) <= MAX_LEGEND:
        fig.legend(
            *axes[0].get_legend_handles_labels(), loc="outside right upper", fontsize="x-small"
        )
    fig.suptitle(f"training curves ({len(trial_ids)} trials)")
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
    trials: pd.DataFrame, curves: pd.DataFrame, metric: str | None = None
) -> dict[str, Figure]:
    """The plots this sweep supports, by file stem; heatmaps only where both axes vary."""
    if metric is None or "exact_match" not in metric:
        metric = primary_metric(trials)
    axes = varied_axes(trials)
    figures: dict[str, Figure] = {}
    has_metric = metric in trials.columns and trials[metric].notna().any()
    if has_metric and "n_params" in trials.columns and trials["n_params"].notna().any():
        figures["exact_match_vs_params"] = exact_match_vs_params(trials, metric)
    if has_metric and all(a in axes for a in WIDTH_DEPTH):
        figures["width_x_depth"] = width_depth_heatmap(trials, metric)
    if has_metric and all(a in axes for a in BATCH_LR):
        figures["batch_size_x_lr"] = batch_lr_heatmap(trials, metric)
    if len(curves):
        figures["training_curves"] = training_curves(curves, labels=trial_labels(trials))
    return figures

"""Heatmaps of a metric over two swept axes (width x depth, batch size x learning rate): the
mean per cell, annotated with mean ± std over the cell's trials (the value alone for one)."""

from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sweeps.analysis.plot_style import metric_label
from sweeps.analysis.tables import build_table, format_key
from sweeps.spec.metrics import is_fraction
from sweeps.spec.table_block import TableSpec

WIDTH_DEPTH = ("model.d_model", "model.n_layer")
BATCH_LR = ("train.batch_size", "optim.lr")
# More distinct values than this on a heatmap axis (a random search's lr) get log-binned.
MAX_LEVELS = 8


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
    """Mean metric per (y, x) cell, annotated with mean and ± std over the cell's trials (±
    only where it has more than one); a fraction of right answers (``is_fraction``) coloured
    on a fixed 0-1 scale."""
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
    counts = [table.loc[r, (c, metric, "n")] for r in table.index for c in x_levels]
    ax.set_title(f"{metric_label(metric)}:\n{_aggregate_words(counts)}")
    fig.colorbar(image, ax=ax, label=metric)
    return fig


def _aggregate_words(counts: list[int]) -> str:
    """What a cell holds, for the title: ``mean ± std per cell (n = 3 trials)``, or ``one
    trial per cell`` where no cell has a spread to show."""
    most = max((int(n) for n in counts), default=0)
    if most <= 1:
        return "one trial per cell"
    least = min(int(n) for n in counts if n > 0)
    over = f"{most}" if least == most else f"{least}-{most}"
    return f"mean ± std per cell (n = {over} trials)"


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

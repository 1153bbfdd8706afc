"""The length grid as heatmaps (arith.data.length_grid): exact match over the digits of a (rows) and
of b (columns), one panel per configuration with the mean over its seeds, the trained length
marked, each panel titled with its extrapolation ratio."""

from __future__ import annotations

import re

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from arith.data.length_grid import RATIO_KEY
from sweeps.analysis.plot_style import short
from sweeps.analysis.tables import config_axes, format_key

CELL_COLUMN = re.compile(r"^lengths/exact_match/(\d+)x(\d+)$")
TRAINED_COLUMN = "task.n_digits"
MAX_TICKS = 13


def has_length_grid(trials: pd.DataFrame) -> bool:
    """Whether the trials measured a length grid (``lengths/exact_match/<la>x<lb>`` columns)."""
    return any(CELL_COLUMN.match(c) and trials[c].notna().any() for c in trials.columns)


def length_heatmap(trials: pd.DataFrame) -> Figure:
    """One panel per configuration (the varied axes but the seed): exact match per (la, lb)
    cell, the mean over the configuration's seeds on a 0-1 scale, a cell no seed measured
    grey; dashed lines where the operands grow longer than trained (``task.n_digits``)."""
    cells = {(int(m[1]), int(m[2])): c for c in trials.columns if (m := CELL_COLUMN.match(c))}
    rows = sorted({a for a, _ in cells})
    cols = sorted({b for _, b in cells})
    keys = config_axes(trials)
    groups = list(trials.groupby(keys, dropna=False)) if keys else [("all", trials)]
    fig = Figure(figsize=(4.6 * len(groups) + 1.2, 4.4), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(groups), sharey=True))
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="lightgrey")
    image = None
    for ax, (key, part) in zip(axes, groups, strict=True):
        grid = np.full((len(rows), len(cols)), np.nan)
        for (a, b), column in cells.items():
            values = part[column].astype(float)
            if values.notna().any():
                grid[rows.index(a), cols.index(b)] = values.mean()
        image = ax.pcolormesh(_edges(cols), _edges(rows), np.ma.masked_invalid(grid),
                              cmap=cmap, vmin=0.0, vmax=1.0)  # fmt: skip
        _mark_trained(ax, part)
        ax.set_xticks(_ticks(cols))
        ax.set_yticks(_ticks(rows))
        ax.set_title(_panel_title(keys, key, part), fontsize="medium")
        ax.set_xlabel("digits of b")
        ax.set_aspect("equal")
    axes[0].set_ylabel("digits of a")
    fig.colorbar(image, ax=list(axes), label="lengths/exact_match (length grid; mean over seeds)")
    fig.suptitle(f"exact match by operand lengths ({len(trials)} trials)")
    return fig


def _edges(levels: list[int]) -> np.ndarray:
    """Cell edges around ``levels`` (midpoints between them), so the axes read in digits
    whether the grid holds every length or every fourth."""
    values = np.asarray(levels, dtype=float)
    if len(values) == 1:
        return np.array([values[0] - 0.5, values[0] + 0.5])
    mids = (values[1:] + values[:-1]) / 2
    first, last = values[0] - (mids[0] - values[0]), values[-1] + (values[-1] - mids[-1])
    return np.concatenate([[first], mids, [last]])


def _ticks(levels: list[int]) -> list[int]:
    """The grid's own lengths as ticks, thinned to about 13 so a 48-length axis stays legible."""
    every = -(-len(levels) // MAX_TICKS)
    return [*levels[:-1:every], levels[-1]] if every > 1 else levels


def _mark_trained(ax, part: pd.DataFrame) -> None:
    """Dashed lines past the longest trained length, where the longer-than-trained cells begin."""
    if TRAINED_COLUMN not in part or part[TRAINED_COLUMN].isna().all():
        return
    trained = float(part[TRAINED_COLUMN].max()) + 0.5
    ax.axvline(trained, color="white", ls="--", lw=1.2)
    ax.axhline(trained, color="white", ls="--", lw=1.2)


def _panel_title(keys: list[str], key: object, part: pd.DataFrame) -> str:
    values = key if isinstance(key, tuple) else (key,)
    pairs = [f"{short(k)}={format_key(v)}" for k, v in zip(keys, values, strict=False)]
    # two settings a line, so panels of several varied axes do not run into each other
    label = "\n".join(" ".join(pairs[i : i + 2]) for i in range(0, len(pairs), 2))
    title = f"{label or 'all trials'} (n={len(part)})"
    if RATIO_KEY in part and part[RATIO_KEY].notna().any():
        ratios = ", ".join(f"{r:g}" for r in part[RATIO_KEY].dropna())
        title += f"\nextrapolation ratio {ratios}"
    return title

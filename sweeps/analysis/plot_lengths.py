"""The length grid as heatmaps (arith.data.length_grid): exact match over the digits of a (rows) and
of b (columns), one panel per configuration with the mean over its seeds, the trained length
marked, each panel titled with its extrapolation ratio; under them, where the trials ran the
length probe (arith.evaluation.length_probe), exact match along its ladder per trial."""

from __future__ import annotations

import re

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from arith.data.length_grid import RATIO_KEY, SUCCESS
from sweeps.analysis.plot_style import short
from sweeps.analysis.tables import config_axes, format_key

CELL_COLUMN = re.compile(r"^lengths/exact_match/(\d+)x(\d+)$")
PROBE_COLUMN = re.compile(r"^probe/exact_match/(\d+)$")
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
    probes = {int(m[1]): c for c in trials.columns if (m := PROBE_COLUMN.match(c))}
    fig = Figure(figsize=(4.6 * len(groups) + 1.2, 8.4 if probes else 4.4), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[4.4, 4.0]) if probes else (fig, None)
    axes = np.atleast_1d(top.subplots(1, len(groups), sharey=True))
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
    top.colorbar(image, ax=list(axes), label="lengths/exact_match (length grid; mean over seeds)")
    fig.suptitle(f"exact match by operand lengths ({len(trials)} trials)")
    if bottom is not None:
        _probe_curves(bottom.subplots(), trials, probes, keys, groups)
    return fig


def _probe_curves(ax, trials: pd.DataFrame, probes: dict[int, str], keys, groups) -> None:
    """Exact match along the length probe's ladder, one line per trial (a colour per
    configuration, a marker per seed), the 99 % bar dashed: a line ends where the probe broke
    or the model's context ended."""
    lengths = sorted(probes)
    colors = matplotlib.colormaps["tab10"]
    for i, (key, part) in enumerate(groups):
        label = _panel_title(keys, key, part).split(" (n=")[0].replace("\n", " ")
        for j, (_, row) in enumerate(part.iterrows()):
            xs = [n for n in lengths if pd.notna(row.get(probes[n]))]
            ys = [float(row[probes[n]]) for n in xs]
            ax.plot(xs, ys, color=colors(i % 10), marker="osd^v"[j % 5], ms=4,
                    label=label if j == 0 else None)  # fmt: skip
    ax.axhline(SUCCESS, color="grey", ls="--", lw=1)
    ax.set_xscale("log")
    ax.set_xticks(lengths, [str(n) for n in lengths])  # the rungs, in digits, not 2x10^1
    ax.minorticks_off()
    ax.set_xlabel("digits of each operand (length probe; log scale)")
    ax.set_ylabel("probe/exact_match")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize="small", loc="lower left")
    ax.set_title("length probe: until it breaks (one line per trial, a marker per seed)")


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

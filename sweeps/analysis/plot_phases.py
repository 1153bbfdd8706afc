"""The phase map (Liu et al. 2022, figure 6): learning rate x weight decay, each cell coloured by
its trials' learning phase (``sweeps.analysis.phases``; the majority over seeds), annotated with
the steps at which training and validation reached the threshold."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from sweeps.analysis.phases import (
    PHASE_COLUMN,
    PHASES,
    THRESHOLD_KEY,
    TRAIN_STEPS,
    VAL_STEPS,
    majority_phase,
)
from sweeps.analysis.tables import format_key

LR_WD = ("optim.lr", "optim.weight_decay")
# One colour per phase, in PHASES order: the two that generalise green and yellow, the two
# that do not blue and grey (colour-blind safe, Okabe-Ito).
PHASE_COLOURS = ("#009E73", "#F0E442", "#56B4E9", "#999999")


def phase_map(trials: pd.DataFrame, x: str = LR_WD[0], y: str = LR_WD[1]) -> Figure:
    """One cell per (``y``, ``x``) value pair of the trials, coloured by its majority phase
    (``k/n`` noted where the seeds disagree); each cell lists the median steps to the
    threshold on training and validation data over the trials that reached it (— never)."""
    xs, ys = sorted(trials[x].dropna().unique()), sorted(trials[y].dropna().unique())
    codes = np.full((len(ys), len(xs)), np.nan)
    fig = Figure(figsize=(1.5 * len(xs) + 2.6, 0.95 * len(ys) + 2.2), layout="constrained")
    ax = fig.add_subplot()
    for i, y_value in enumerate(ys):
        for j, x_value in enumerate(xs):
            cell = trials[(trials[x] == x_value) & (trials[y] == y_value)]
            phase, count = majority_phase(cell[PHASE_COLUMN])
            if phase is not None:
                codes[i, j] = PHASES.index(phase)
            ax.text(j, i, _cell_text(cell, phase, count), ha="center", va="center", fontsize=8)
    colours = ListedColormap(PHASE_COLOURS).with_extremes(bad="white")
    ax.imshow(np.ma.masked_invalid(codes), cmap=colours, vmin=-0.5, vmax=len(PHASES) - 0.5,
              origin="lower", aspect="auto")  # fmt: skip
    ax.set_xticks(range(len(xs)), [format_key(v) for v in xs])
    ax.set_yticks(range(len(ys)), [format_key(v) for v in ys])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    thresholds = trials.get(THRESHOLD_KEY, pd.Series(dtype=float)).dropna().unique()
    at = f"{thresholds[0]:.0%}" if len(thresholds) == 1 else "the threshold"
    ax.set_title(f"learning phase (train / val: steps to {at} exact match)")
    handles = [Patch(color=c, label=p) for p, c in zip(PHASES, PHASE_COLOURS, strict=True)]
    fig.legend(handles=handles, loc="outside lower center", ncols=len(PHASES), fontsize=8)
    return fig


def _cell_text(cell: pd.DataFrame, phase: str | None, count: int) -> str:
    if phase is None:
        return "—"
    with_phase = int(cell[PHASE_COLUMN].notna().sum())
    name = phase if count == with_phase else f"{phase} {count}/{with_phase}"
    return f"{name}\ntrain {_median_steps(cell, TRAIN_STEPS)}\nval {_median_steps(cell, VAL_STEPS)}"


def _median_steps(cell: pd.DataFrame, column: str) -> str:
    steps = pd.to_numeric(cell.get(column, pd.Series(dtype=float)), errors="coerce").dropna()
    return f"{steps.median():,.0f}" if len(steps) else "—"

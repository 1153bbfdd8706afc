"""How a claim's check reads the trials and words what it found (``sweeps.analysis.claims``):
a column as numbers, the mean and std over seeds per cell, the best cell chosen on validation,
and a figure or a verdict as text, "not measured" where the data is absent."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

Frames = dict[str, pd.DataFrame]

CHOOSE_ON = "val/exact_match"
"""The metric every "best" is chosen on (mean over seeds per cell)."""
NOT_MEASURED = "**not measured**"


def pct(x: float) -> str:
    return "not measured" if x is None or not np.isfinite(x) else f"{100 * x:.1f} %"


def verdict_of(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def bar(value: float, ok: Callable[[float], bool]) -> str:
    """The verdict of ``ok(value)``, or "not measured" where the value is absent."""
    if value is None or not np.isfinite(value):
        return NOT_MEASURED
    return verdict_of(bool(ok(value)))


def points(shift: float) -> str:
    return f"{100 * shift:+.1f}" if np.isfinite(shift) else "not measured"


def is_measured(trials: pd.DataFrame, name: str) -> bool:
    return name in trials.columns and column(trials, name).notna().any()


def column(trials: pd.DataFrame, name: str) -> pd.Series:
    if name not in trials.columns:
        return pd.Series(np.nan, index=trials.index, dtype=float)
    return pd.to_numeric(trials[name], errors="coerce")


def per_cell(trials: pd.DataFrame, keys: list[str], metric: str) -> pd.DataFrame:
    """Mean and std of ``metric`` over seeds per combination of ``keys``."""
    frame = trials.assign(_m=column(trials, metric))
    keys = [k for k in keys if k in frame.columns]
    if not keys:
        return pd.DataFrame({"mean": [frame["_m"].mean()], "std": [frame["_m"].std()]})
    grouped = frame.groupby(keys, dropna=False)["_m"]
    return pd.DataFrame({"mean": grouped.mean(), "std": grouped.std()}).reset_index()


def chosen_cell(trials: pd.DataFrame, keys: list[str], reported: str, on: str = CHOOSE_ON):
    """The cell (mean over seeds per combination of ``keys``) with the highest ``on``, as a row
    holding ``keys``, ``chosen`` (its ``on``) and ``reported`` (its ``reported``); None when
    ``on`` was not measured: a best is never picked on the figure it reports."""
    if not is_measured(trials, on):
        return None
    choice = per_cell(trials, keys, on).rename(columns={"mean": "chosen"})
    figure = per_cell(trials, keys, reported)["mean"]
    choice = choice.assign(reported=figure.to_numpy()).dropna(subset=["chosen"])
    return choice.loc[choice["chosen"].idxmax()] if len(choice) else None

"""A table's scaling-law fits (sweeps.analysis.power_law) over its selected trials, and where
they go: lines under the table in table.md, ``fit:*`` columns in table.csv, metrics of the
MLflow parent run."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence

import pandas as pd
from mlflow import MlflowClient
from mlflow.entities import Metric

from sweeps.analysis.power_law import GroupFit, fit_columns, format_fit, group_fits, key_text
from sweeps.analysis.tables import select_trials
from sweeps.spec.table_block import TableSpec

__all__ = [
    "GroupFit",
    "fit_metrics",
    "fit_note",
    "log_fits_to_parent",
    "table_fits",
    "with_fit_columns",
]


def table_fits(trials: pd.DataFrame, specs: Sequence[TableSpec]) -> dict[str, list[GroupFit] | str]:
    """Per table with a ``fit:``, the fits of its groups over its selected trials, or (a string)
    why none could be made."""
    out: dict[str, list[GroupFit] | str] = {}
    for spec in specs:
        if spec.fit is None:
            continue
        try:
            chosen = select_trials(trials, spec)
            out[spec.name] = group_fits(chosen, spec.fit, [*spec.rows, *spec.columns])
        except ValueError as err:
            out[spec.name] = str(err)
    return out


def fit_note(fits: list[GroupFit] | str, spec: TableSpec) -> str:
    """A table's fits as table.md lines (one per group), or why there is none."""
    if isinstance(fits, str):
        return f"_fit not made: {fits}_"
    lines = [
        format_fit(g.fit, spec.fit, g.label())
        if g.fit is not None
        else f"_fit not made{f' ({g.label()})' if g.group else ''}: {g.error}_"
        for g in fits
    ]
    return "  \n".join(lines)


def with_fit_columns(frame: pd.DataFrame, fits: list[GroupFit] | str | None) -> pd.DataFrame:
    """table.csv with its fit: ``fit:E``, ``fit:E_low``, ..., ``fit:n_points`` on each row,
    from the fit of the row's group (empty where that group has none)."""
    if not isinstance(fits, list) or frame.empty:
        return frame
    frame = frame.copy()
    for g in fits:
        if g.fit is None:
            continue
        rows = pd.Series(True, index=frame.index)
        for key, value in g.group.items():
            rows &= (frame[key] == value) | (frame[key].isna() & pd.isna(value))
        for name, value in fit_columns(g.fit).items():
            frame.loc[rows, f"fit:{name}"] = value
    return frame


def fit_metrics(fits: Mapping[str, list[GroupFit] | str]) -> dict[str, float]:
    """The fits as MLflow metric names and values for the parent run:
    ``fit/<table>/alpha``, ``fit/<table>/alpha_low``, ... and, for a table fitted per group,
    ``fit/<table>/<key>_<value>/alpha`` (characters MLflow refuses become ``_``)."""
    out: dict[str, float] = {}
    for table, groups in fits.items():
        if isinstance(groups, str):
            continue
        for g in groups:
            if g.fit is None:
                continue
            where = "/".join(f"{k}_{key_text(v)}" for k, v in g.group.items())
            prefix = "/".join(p for p in ("fit", table, where) if p)
            for name, value in fit_columns(g.fit).items():
                out[re.sub(r"[^A-Za-z0-9_\-. /]", "_", f"{prefix}/{name}")] = value
    return out


def log_fits_to_parent(
    client: MlflowClient, parent_run_id: str, trials: pd.DataFrame, specs: Sequence[TableSpec]
) -> dict[str, float]:
    """The tables' fits as metrics of the parent run (``fit_metrics``); returns them."""
    metrics = fit_metrics(table_fits(trials, specs)) if not trials.empty else {}
    if metrics:
        now = int(time.time() * 1000)
        rows = [Metric(k, v, now, 0) for k, v in metrics.items()]
        client.log_batch(parent_run_id, metrics=rows)
    return metrics

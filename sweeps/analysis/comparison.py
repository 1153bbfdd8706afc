"""Two or more sweeps side by side (pure functions on their trials DataFrames).

The sweeps are compared on the keys they share: the row and column keys of their tables where
every sweep has some in common, else the swept dimensions they have in common (seeds aside:
they are repeats). Each cell holds one metric's mean ± std over the trials of that cell, as the
scaling tables compute it (``sweeps.analysis.tables.summarise``); the difference is each
sweep's mean minus the first sweep's, cell by cell.

A sweep that also varies keys the others do not (a learning rate) is not pooled over them:
per cell, the values of those keys with the best mean selection metric (a validation metric,
the sweep's own ``select.by`` or ``sweep.metric``) are chosen, and the compared metric is
reported at that choice, as the tables' best-per-cell selection does. A test metric is
reported, never selected on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sweeps.analysis.plot_style import FRACTION_YLIM, MARKERS
from sweeps.analysis.tables import (
    MISSING,
    config_axes,
    format_cell,
    format_key,
    format_number,
    is_integer_value,
    render_markdown,
    summarise,
)
from sweeps.spec.metrics import is_fraction, is_held_out
from sweeps.spec.table_block import Selection, TableSpec

SEED = "train.seed"
# The selection metric of a sweep whose spec names none that is not held out.
FALLBACK_SELECT_BY = "val/exact_match"
STAT_COLUMNS = ("mean", "std", "n")


@dataclass(frozen=True)
class Side:
    """One sweep of a comparison: its label, trials, table specs and ``sweep.metric``."""

    label: str
    trials: pd.DataFrame
    tables: Sequence[TableSpec] = ()
    metric: str | None = None


@dataclass(frozen=True)
class Comparison:
    """The compared metric per shared cell: ``frame`` is indexed by the shared keys, with
    ``<label>:mean``, ``<label>:std``, ``<label>:n`` per sweep, ``<label>:<key>`` for each key
    it selected per cell, and ``<label> - <first label>`` for every sweep after the first."""

    frame: pd.DataFrame
    keys: tuple[str, ...]
    metric: str
    labels: tuple[str, ...]
    selections: Mapping[str, Selection | None]


def shared_keys(sides: Sequence[Side]) -> list[str]:
    """The table keys every sweep has (in the first sweep's order), else the swept dimensions
    every sweep has; seeds never (they are repeats of one configuration)."""
    table_keys = [_table_keys(side) for side in sides]
    shared = _common(table_keys)
    return shared or _common([config_axes(side.trials) for side in sides])


def _table_keys(side: Side) -> list[str]:
    keys = [k for spec in side.tables for k in (*spec.rows, *spec.columns)]
    return [k for k in dict.fromkeys(keys) if k in side.trials.columns]


def _common(lists: Sequence[Sequence[str]]) -> list[str]:
    rest = [set(keys) for keys in lists[1:]]
    return [k for k in lists[0] if k != SEED and all(k in others for others in rest)]


def selection_for(
    side: Side, keys: Sequence[str], select_by: str | None = None
) -> Selection | None:
    """How a sweep picks its trials in a shared cell: over its varied axes that are not shared
    (seeds aside), by ``select_by``, else its first table's ``select.by``, else its
    ``sweep.metric``, else FALLBACK_SELECT_BY; None when it varies nothing else."""
    over = [a for a in config_axes(side.trials) if a not in keys]
    if not over:
        return None
    first = next((s.select for s in side.tables if s.select is not None), None)
    if select_by is not None:
        return Selection(tuple(over), select_by)
    if first is not None:
        return Selection(tuple(over), first.by, first.mode)
    if side.metric is not None and not is_held_out(side.metric):
        return Selection(tuple(over), side.metric)
    return Selection(tuple(over), FALLBACK_SELECT_BY)


def compare(
    sides: Sequence[Side],
    metric: str,
    keys: Sequence[str] | None = None,
    select_by: str | None = None,
) -> Comparison:
    """``metric`` per shared cell of every sweep, and each one's difference from the first.
    Raises ValueError (one line) for fewer than two sweeps, no shared keys, or a key or metric
    a sweep's trials lack."""
    if len(sides) < 2:
        raise ValueError(f"sweeps: {len(sides)} given: compare needs two or more")
    keys = list(keys) if keys else shared_keys(sides)
    if not keys:
        axes = "; ".join(f"{s.label}: {', '.join(config_axes(s.trials)) or 'none'}" for s in sides)
        raise ValueError(f"keys: none shared: the sweeps vary {axes}")
    for side in sides:
        for column, field in [*((k, "keys") for k in keys), (metric, "metric")]:
            if column not in side.trials.columns:
                names = [c for c in side.trials.columns if ("/" in c) == (field == "metric")]
                raise ValueError(
                    f"{field}: {column!r}: not a column of sweep {side.label!r} "
                    f"(it has {', '.join(names[:12])}{', ...' if len(names) > 12 else ''})"
                )
    parts, selections = [], {}
    for side in sides:
        selection = selection_for(side, keys, select_by)
        selections[side.label] = selection
        parts.append(_side_frame(side, keys, metric, selection))
    frame = pd.concat(parts, axis=1, join="outer").sort_index()
    first = sides[0].label
    for side in sides[1:]:
        frame[f"{side.label} - {first}"] = frame[f"{side.label}:mean"] - frame[f"{first}:mean"]
    labels = tuple(s.label for s in sides)
    return Comparison(frame, tuple(keys), metric, labels, selections)


def _side_frame(
    side: Side, keys: Sequence[str], metric: str, selection: Selection | None
) -> pd.DataFrame:
    spec = TableSpec(side.label, rows=tuple(keys), values=(metric,), select=selection)
    flat = summarise(side.trials, spec).set_index(list(keys))
    columns = {f"{metric}:{stat}": f"{side.label}:{stat}" for stat in STAT_COLUMNS}
    if selection is not None:
        columns |= {f"{key}:chosen": f"{side.label}:{key}" for key in selection.over}
    return flat[list(columns)].rename(columns=columns)


def to_markdown(comparison: Comparison) -> str:
    """A heading, a caption that says what the cells hold and how each sweep chose its
    trials, and the table: the keys, each sweep's cell (and chosen values), the differences."""
    c, frame = comparison, comparison.frame
    first = c.labels[0]
    header = [*c.keys]
    for label in c.labels:
        selection = c.selections[label]
        header += [label, *(f"{label} · {k}" for k in (selection.over if selection else ()))]
    header += [f"{label} - {first}" for label in c.labels[1:]]
    integer = is_integer_value(c.metric)
    body = []
    for index, row in frame.iterrows():
        cells = [format_key(k) for k in (index if isinstance(index, tuple) else (index,))]
        for label in c.labels:
            cells.append(_cell(row, label, c.metric))
            selection = c.selections[label]
            for key in selection.over if selection else ():
                value = row[f"{label}:{key}"]
                cells.append(MISSING if pd.isna(value) else format_key(value))
        cells += [signed(row[f"{label} - {first}"], integer) for label in c.labels[1:]]
        body.append(cells)
    table = render_markdown(header, body, n_left=len(c.keys))
    return f"## compare: {c.metric}\n\n{caption(c)}\n\n{table}\n"


def _cell(row: pd.Series, label: str, metric: str) -> str:
    n = row[f"{label}:n"]
    if pd.isna(n) or n == 0:
        return MISSING
    mean, std = row[f"{label}:mean"], row[f"{label}:std"]
    stats = {"mean": mean, "std": std, "n": n, "trials": n, "min": np.nan, "max": np.nan}
    return format_cell(stats, metric, "mean_std")


def signed(value: float, integer: bool = False) -> str:
    """A difference with its sign: +0.125, -3, ``—`` where a side has no value."""
    if pd.isna(value):
        return MISSING
    return ("-" if value < 0 else "+") + format_number(abs(float(value)), integer)


def caption(comparison: Comparison) -> str:
    c = comparison
    keys = ", ".join(c.keys)
    parts = [
        f"{c.metric}: mean ± std over the trials of each cell (seeds, repeats) by {keys}; "
        f"difference: each sweep's mean minus {c.labels[0]}'s"
    ]
    for label in c.labels:
        sel = c.selections[label]
        if sel is not None:
            parts.append(
                f"{label}: per cell, the {', '.join(sel.over)} with the best mean {sel.by} "
                f"({sel.direction}) is selected and shown; {c.metric} is reported at that choice"
                + (", never selected on" if is_held_out(c.metric) else "")
            )
    return "; ".join(parts) + "."


def figure(comparison: Comparison) -> Figure:
    """The metric per shared cell, one line of points (± std) per sweep, each a little to the
    side so the error bars stay apart; a fraction of right answers on 0-1."""
    c, frame = comparison, comparison.frame
    fig = Figure(figsize=(max(5.0, 0.9 * len(frame) + 3), 4))
    ax = fig.subplots()
    positions = np.arange(len(frame))
    step = 0.25 / len(c.labels)
    for i, label in enumerate(c.labels):
        means = frame[f"{label}:mean"].to_numpy(dtype=float)
        stds = np.nan_to_num(frame[f"{label}:std"].to_numpy(dtype=float))
        offset = (i - (len(c.labels) - 1) / 2) * step
        marker = MARKERS[i % len(MARKERS)]
        ax.errorbar(positions + offset, means, yerr=stds, marker=marker, capsize=3, label=label)
    ax.set_xticks(positions, [_cell_label(index, c.keys) for index in frame.index])
    ax.set_xlabel(", ".join(c.keys))
    ax.set_ylabel(c.metric)
    if is_fraction(c.metric):
        ax.set_ylim(*FRACTION_YLIM)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    ax.set_title(f"{c.metric} by {', '.join(c.keys)}")
    fig.tight_layout()
    return fig


def _cell_label(index: object, keys: Sequence[str]) -> str:
    values = index if isinstance(index, tuple) else (index,)
    return "\n".join(format_key(v) for v in values) if len(keys) > 1 else format_key(values[0])

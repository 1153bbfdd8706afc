"""Scaling tables: a trials DataFrame -> aggregated tables and their markdown (pure functions).

A table groups the trials by its row and column keys (dotted config paths such as
``model.d_model``, or summary columns such as ``n_params``) and aggregates every value over the
trials of a group, i.e. over the seeds and repeats of one configuration. With column keys the
table is a pivot. A ``mean_std`` cell renders as ``0.912 ± 0.013 (n=3)``; a single trial as
``0.912``; a ``steps_to`` value as an integer, or ``—`` when no trial of the group got there.

A ``select`` (best-per-cell selection) first keeps, within each cell (one combination of the row
and column keys), only the trials of the ``over`` values (e.g. the learning rate) whose ``by``
metric, averaged over seeds, is best; the cell then reports those trials, and the chosen
``over`` values appear as extra columns. Selection is on a validation metric; test metrics are
reported at the choice, never selected on (a ``test/`` ``by`` is refused).

A table's ``TableSpec`` comes from a spec's ``table:`` block (``sweeps.spec.table_block``), or
from ``default_table_specs`` when the spec names none.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from sweeps.analysis.convergence import BUDGET_KEY, STILL_IMPROVING
from sweeps.spec.metrics import metric_direction
from sweeps.spec.table_block import TableSpec

# Every value gets all of these; ``n`` counts the trials with a value, ``trials`` all of them.
STATS = ("mean", "std", "n", "trials", "min", "max", "median")
# Counts that read better as integers than as "12345.000".
INTEGER_VALUES = frozenset({"n_params", "n_params_non_embedding", "flops_per_token", "steps"})
PRIMARY_METRICS = ("test/exact_match", "best/val/exact_match", "val/exact_match")
MISSING = "—"
# The row label of a table without row keys.
ALL_LABEL = "all"
# The stat under which a selected cell's chosen ``over`` value is kept (not one of STATS).
CHOSEN = "chosen"
# With a ``convergence`` column in the trials: how many of a cell's trials still improved.
IMPROVING_COLUMN = ("convergence", STILL_IMPROVING)
IMPROVING_MARK = " ↑"


def varied_axes(trials: pd.DataFrame) -> list[str]:
    """Config columns (dotted paths) that take more than one value across the trials."""
    config_columns = [c for c in trials.columns if "." in c and "/" not in c]
    return [c for c in config_columns if trials[c].nunique(dropna=False) > 1]


def config_axes(trials: pd.DataFrame) -> list[str]:
    """The varied axes that tell configurations apart; seeds are repeats of one configuration."""
    return [a for a in varied_axes(trials) if a != "train.seed"]


def primary_metric(trials: pd.DataFrame) -> str:
    """The headline metric: test exact match where the trials have it, else validation's."""
    for name in PRIMARY_METRICS:
        if name in trials.columns and trials[name].notna().any():
            return name
    return PRIMARY_METRICS[0]


def default_table_specs(
    trials: pd.DataFrame, metric: str | None = None, max_levels: int = 8
) -> list[TableSpec]:
    """Tables for a sweep whose spec names none: metric by every varied axis, plus the pivots."""
    metric = metric or primary_metric(trials)
    axes = config_axes(trials)
    values = [metric]
    for extra in ("n_params", "val/steps_to_threshold"):
        if extra in trials.columns and extra != metric:
            values.append(extra)
    specs = [TableSpec("table", rows=tuple(axes), values=tuple(values))]
    pivots = {
        "width_vs_depth": ("model.d_model", "model.n_layer"),
        "batch_size_vs_lr": ("train.batch_size", "optim.lr"),
    }
    for name, (row, column) in pivots.items():
        # A random search draws a new lr per trial; a pivot over those would be all holes.
        if row in axes and column in axes and trials[column].nunique() <= max_levels:
            specs.append(TableSpec(name, rows=(row,), columns=(column,), values=(metric,)))
    return specs


def _check_columns(trials: pd.DataFrame, spec: TableSpec) -> None:
    keys = [*spec.rows, *spec.columns]
    if spec.select is not None:
        keys += [*spec.select.over, spec.select.by]
    missing = [k for k in keys if k not in trials.columns]
    if missing:
        raise ValueError(
            f"table {spec.name!r}: the trials have no column {missing[0]!r} "
            f"(columns: {', '.join(map(str, trials.columns))})"
        )


def select_trials(trials: pd.DataFrame, spec: TableSpec) -> pd.DataFrame:
    """The trials a selected table reports: in each cell (row and column keys), those of the
    ``over`` values with the best mean ``by`` (NaNs skipped; a tie goes to the first value in
    sorted order). A cell where no choice has a ``by`` value keeps no trial. Without a
    ``select`` the trials themselves."""
    sel = spec.select
    if sel is None:
        return trials
    _check_columns(trials, spec)
    cell_keys = [trials[k] for k in (*spec.rows, *spec.columns)]
    if cell_keys:
        cell = trials.groupby(cell_keys, dropna=False, sort=True).ngroup()
    else:
        cell = pd.Series(0, index=trials.index)
    choice = trials.groupby(
        [*cell_keys, *(trials[k] for k in sel.over)], dropna=False, sort=True
    ).ngroup()
    score = pd.to_numeric(trials[sel.by], errors="coerce")
    frame = pd.DataFrame({"cell": cell, "choice": choice, "score": score})
    means = frame.groupby(["cell", "choice"])["score"].mean().dropna()
    if means.empty:
        return trials.iloc[0:0]
    by_cell = means.groupby(level="cell")
    best = by_cell.idxmin() if sel.direction == "min" else by_cell.idxmax()
    chosen = {c for _, c in best}
    return trials[choice.isin(chosen)]


def _grouped_stats(trials: pd.DataFrame, spec: TableSpec) -> pd.DataFrame:
    """Index: the group keys (a constant "" level first when there are no rows); columns:
    (value, stat), plus (over key, "chosen") for a selected table."""
    _check_columns(trials, spec)
    frame = trials.copy()
    row_keys = list(spec.rows)
    if not row_keys:
        frame[""] = ALL_LABEL
        row_keys = [""]
    keys = [*row_keys, *spec.columns]
    # Every cell of the trials keeps its row/column even when selection leaves it empty.
    cells = frame.groupby([frame[k] for k in keys], dropna=False, sort=True).size().index
    frame = select_trials(frame, spec)
    values = pd.DataFrame(
        {v: pd.to_numeric(frame.get(v), errors="coerce") for v in spec.values}, index=frame.index
    )
    grouped = values.groupby([frame[k] for k in keys], dropna=False, sort=True)
    per_stat = {
        "mean": grouped.mean(),
        "std": grouped.std(ddof=1),
        "n": grouped.count(),
        "min": grouped.min(),
        "max": grouped.max(),
        "median": grouped.median(),
    }
    sizes = grouped.size()
    columns = {}
    for value in spec.values:
        for stat in STATS:
            columns[(value, stat)] = sizes if stat == "trials" else per_stat[stat][value]
    if spec.select is not None:
        over = frame[list(spec.select.over)].groupby(
            [frame[k] for k in keys], dropna=False, sort=True
        )
        for key in spec.select.over:
            columns[(key, CHOSEN)] = over[key].first()
    if "convergence" in frame.columns:  # how many of a cell's trials were still improving
        improving = (frame["convergence"] == STILL_IMPROVING).groupby(
            [frame[k] for k in keys], dropna=False, sort=True
        )
        columns[("convergence", STILL_IMPROVING)] = improving.sum()
    result = pd.DataFrame(columns)
    return result.reindex(cells) if spec.select is not None else result


def summarise(trials: pd.DataFrame, spec: TableSpec) -> pd.DataFrame:
    """One row per group: the key columns, then ``<value>:<stat>`` columns (table.csv)."""
    long = _grouped_stats(trials, spec)
    long.columns = [f"{value}:{stat}" for value, stat in long.columns]
    flat = long.reset_index()
    return flat.drop(columns=[""]) if not spec.rows else flat


def build_table(trials: pd.DataFrame, spec: TableSpec) -> pd.DataFrame:
    """The table as a frame: index = row keys (one ``all`` row when there are none); columns =
    (*column key values, value, stat), so ``table.loc[64, (2, "test/exact_match", "mean")]``."""
    wide = _grouped_stats(trials, spec)
    stats = _value_stats(spec, wide)
    if spec.columns:
        wide = wide.unstack(list(spec.columns))
        n_keys = len(spec.columns)
        wide = wide.reorder_levels([*range(2, 2 + n_keys), 0, 1], axis=1)
        combos = list(dict.fromkeys(c[:n_keys] for c in wide.columns))
        order = [(*c, *vs) for c in combos for vs in stats]
        wide = wide[order]
    for column in wide.columns:
        if column[-1] in ("n", "trials", STILL_IMPROVING):
            wide[column] = wide[column].fillna(0).astype(int)
    return wide


def _value_stats(spec: TableSpec, wide: pd.DataFrame) -> list[tuple[str, str]]:
    """The (value, stat) columns of one column combination, in order (``wide``: the grouped
    stats before any pivot)."""
    chosen = spec.select.over if spec.select is not None else ()
    flags = [IMPROVING_COLUMN] if IMPROVING_COLUMN in wide.columns else []
    return [*((v, s) for v in spec.values for s in STATS), *((k, CHOSEN) for k in chosen), *flags]


def column_combos(table: pd.DataFrame, spec: TableSpec) -> list[tuple]:
    """The column-key value combinations of a built table, in order (``[()]`` without pivot)."""
    n_keys = len(spec.columns)
    return list(dict.fromkeys(tuple(c[:n_keys]) for c in table.columns))


def format_key(value: object) -> str:
    """A row or column key as a label: 64, 0.0003, None, plain."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "None"
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, float | np.floating):
        # 5e+08 rather than 500000000 for a budget; exact integers below a million as they are
        short = f"{value:g}"
        if float(value).is_integer() and (abs(value) < 1e6 or float(short) != value):
            return str(int(value))
        return short
    return str(value)


def _is_missing(value: object) -> bool:
    return value is None or (isinstance(value, float | np.floating) and math.isnan(value))


def format_number(x: float, integer: bool = False) -> str:
    if x is None or not np.isfinite(x):
        return MISSING if x is None or np.isnan(x) else str(x)
    if integer:
        return str(round(x))
    if abs(x) >= 1000:
        return f"{x:.0f}"
    if x != 0 and abs(x) < 1e-3:
        return f"{x:.2e}"
    return f"{x:.3f}"


def is_integer_value(name: str) -> bool:
    return name in INTEGER_VALUES or "steps_to" in name


def format_cell(stats: Mapping[str, float], value: str, aggregate: str) -> str:
    """One cell from a group's stats; see the module docstring for the forms."""
    n, trials = int(stats["n"]), int(stats["trials"])
    if n == 0:
        return MISSING
    integer = is_integer_value(value)
    if aggregate != "mean_std":
        return format_number(stats[aggregate], integer)
    # A steps_to value is missing when a seed never got there: say how many did.
    count = f"n={n}/{trials}" if "steps_to" in value and n < trials else f"n={n}"
    mean = format_number(stats["mean"], integer)
    if integer and "steps_to" not in value and stats["min"] == stats["max"]:
        return mean if n == trials else f"{mean} ({count})"  # n_params of one config
    if n == 1:
        return mean if count == "n=1" else f"{mean} ({count})"
    return f"{mean} ± {format_number(stats['std'], integer)} ({count})"


def to_markdown(table: pd.DataFrame, spec: TableSpec, budget: str = BUDGET_KEY) -> str:
    """The built table as a GitHub markdown table (no dependency on ``tabulate``); ``budget``:
    the key the footnote of still-improving cells says to raise."""
    row_names = list(spec.rows) or [""]
    combos = column_combos(table, spec)
    chosen = spec.select.over if spec.select is not None else ()
    header = list(row_names)
    for combo in combos:
        label = ", ".join(f"{k}={format_key(v)}" for k, v in zip(spec.columns, combo, strict=True))
        for value in spec.values:
            if not label:
                header.append(value)
            else:
                header.append(label if len(spec.values) == 1 else f"{label} · {value}")
        for key in chosen:
            header.append(f"{label} · {key}" if label else key)
    body = []
    marked = False
    for label, row in table.iterrows():
        keys = label if isinstance(label, tuple) else (label,)
        cells = [format_key(k) for k in keys]
        for combo in combos:
            flag = (*combo, *IMPROVING_COLUMN)
            improving = flag in row.index and row[flag] > 0
            for value in spec.values:
                stats = {s: row[(*combo, value, s)] for s in STATS}
                cell = format_cell(stats, value, spec.aggregate)
                if improving and cell != MISSING and _marks_improving(value):
                    cell += IMPROVING_MARK
                    marked = True
                cells.append(cell)
            for key in chosen:
                pick = row[(*combo, key, CHOSEN)]
                cells.append(MISSING if _is_missing(pick) else format_key(pick))
        body.append(cells)
    text = render_markdown(header, body, n_left=len(row_names))
    return text + "\n\n" + IMPROVING_NOTE.format(budget=budget) if marked else text


def _marks_improving(value: str) -> bool:
    """Whether a column takes the still-improving mark: a metric of the model with a better
    direction (exact match, a loss), not a count (``steps_to``, ``n_params``) or a cost
    (``wall_time_s``), which training longer does not improve."""
    return metric_direction(value) is not None and not is_integer_value(value)


IMPROVING_NOTE = (
    "_↑: a trial of this cell was still improving when training stopped (its monitored metric "
    "rose over its last evaluations): the cell is budget-limited; raise {budget}._"
)


def render_markdown(header: Sequence[str], body: Iterable[Sequence[str]], n_left: int = 1) -> str:
    """A padded markdown table; the first ``n_left`` columns left-aligned, the rest right."""
    rows = [[str(c).replace("|", "\\|") for c in r] for r in [header, *body]]
    widths = [max(3, *(len(r[i]) for r in rows)) for i in range(len(header))]
    rule = ["-" * w if i < n_left else "-" * (w - 1) + ":" for i, w in enumerate(widths)]

    def line(cells: Sequence[str]) -> str:
        padded = [
            c.ljust(w) if i < n_left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(padded) + " |"

    return "\n".join([line(rows[0]), line(rule), *(line(r) for r in rows[1:])])


# Trial statuses a reader of a table must be told about: their values are in the cells, but
# they are not what the configuration would reach with a working run.

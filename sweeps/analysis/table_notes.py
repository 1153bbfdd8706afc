"""What a table says beside its cells: its caption (what the cells hold, over what, and which
columns mean what), the axes a cell pools, and a note naming the trials that diverged or
errored (pure functions, as ``sweeps.analysis.tables``)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from sweeps.analysis.tables import config_axes, format_key, select_trials
from sweeps.spec.table_block import TableSpec

NOTED_STATUSES = {"DIVERGED": "diverged (non-finite loss)", "ERROR": "errored"}


def status_note(trials: pd.DataFrame, spec: TableSpec | None = None) -> str:
    """One line per noted status (``diverged (non-finite loss): 1 trial: t_3 (optim.lr=1e+04)``),
    empty when every trial ran normally."""
    if "status" not in trials.columns:
        return ""
    keys = [*spec.rows, *spec.columns] if spec is not None else []
    lines = []
    for status, label in NOTED_STATUSES.items():
        hit = trials[trials["status"] == status]
        if hit.empty:
            continue
        names = []
        for _, row in hit.iterrows():
            where = ", ".join(f"{k}={format_key(row[k])}" for k in keys if k in row.index)
            names.append(f"{row.get('trial_id', '?')}" + (f" ({where})" if where else ""))
        count = f"{len(hit)} trial" + ("s" if len(hit) > 1 else "")
        lines.append(f"{label}: {count}: {'; '.join(names)}")
    return "\n".join(lines)


def pooled_axes(trials: pd.DataFrame, spec: TableSpec) -> list[str]:
    """Config columns other than ``train.seed`` that take several values inside one cell of
    the table (after selection): a cell's spread is then over them too, not over seeds alone.
    A value derived from a row key (the lr of a batch size) is constant in a cell: not pooled."""
    if trials.empty:
        return []
    chosen = select_trials(trials, spec)
    keys = [*spec.rows, *spec.columns]
    candidates = [a for a in config_axes(chosen) if a not in keys]
    if not keys or not candidates:
        return candidates
    per_cell = chosen.groupby([chosen[k] for k in keys], dropna=False)[candidates]
    counts = per_cell.nunique(dropna=False).max()
    return [a for a in candidates if counts[a] > 1]


def describe(spec: TableSpec, pooled: Sequence[str] = ()) -> str:
    """A one-line caption: what the cells hold and over what (``pooled``: ``pooled_axes``)."""
    over = "seeds, repeats" + (f" and {', '.join(pooled)}" if pooled else "")
    how = {
        "mean_std": f"mean ± std over trials with equal keys ({over})",
        "mean": f"mean over trials with equal keys ({over})",
    }.get(spec.aggregate, f"{spec.aggregate} over trials with equal keys ({over})")
    parts = [f"{', '.join(spec.values)}: {how}", *_peak_notes(spec.values)]
    if spec.rows:
        parts.append(f"rows: {', '.join(spec.rows)}")
    if spec.columns:
        parts.append(f"columns: {', '.join(spec.columns)}")
    if pooled:
        parts.append(
            f"pooled in each cell (varied, but not a row, column or select.over key): "
            f"{', '.join(pooled)}"
        )
    sel = spec.select
    if sel is not None:
        parts.append(
            f"per cell, the {', '.join(sel.over)} with the best mean {sel.by} over its trials "
            f"({sel.direction}) is selected and shown; selection is on validation, the held-out "
            "sets are reported at that choice and never selected on"
        )
    return "; ".join(parts) + "."


def _peak_notes(values: Sequence[str]) -> list[str]:
    """What a ``best/<metric>`` column is beside the metric itself: a trial's peak at one
    evaluation, where the metric is its last value (the one a sweep chooses its best trial
    on); the two differ whenever a later evaluation fell back."""
    return [
        f"{v} is a trial's peak {v[5:]} at one evaluation"
        + (f", {v[5:]} its last (what a best trial is chosen on)" if v[5:] in values else "")
        for v in values
        if v.startswith("best/")
    ]

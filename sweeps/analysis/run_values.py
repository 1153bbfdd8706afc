"""A child run's values as the trials frame holds them: its params turned back from MLflow's
strings into numbers, column by column (``parse_param_column``), and its figures
(``run_figures``): the latest value of each metric, and the single values measured once at the
trial's end, which a run keeps as tags of their names (``sweeps.spec.metrics.is_final_figure``;
runs logged before kept them as metrics, and read the same)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from mlflow.entities import Run

from sweeps.spec.metrics import is_final_figure

_INT = re.compile(r"[-+]?\d+")


def run_figures(run: Run) -> dict[str, float]:
    """Every figure of a child run by name: its metrics' latest values, then the figures it
    holds as tags (a tag that is no number is left out)."""
    figures = dict(run.data.metrics)
    for key, text in run.data.tags.items():
        if is_final_figure(key):
            try:
                figures[key] = float(text)
            except ValueError:
                continue
    return figures


def figure_tag(value: float) -> str:
    """A figure as its tag's text: every digit of the float, so that it reads back equal."""
    return repr(float(value)) if math.isfinite(value) else str(float(value))


def parse_param_column(raw: Sequence[str | None]) -> list[object]:
    """Strings back to values, one type per column: all ints, else all floats, else all bools,
    else the strings themselves (lists such as "[1, 2]" stay strings); "None" -> None."""
    present = [v for v in raw if v is not None and v != "None"]
    parsers = (
        lambda v: int(v) if _INT.fullmatch(v.strip()) else _fail(),
        float,
        lambda v: {"True": True, "False": False}[v],
    )
    for parse in parsers:
        try:
            parsed = iter([parse(v) for v in present])
        except (ValueError, KeyError):
            continue
        return [None if v is None or v == "None" else next(parsed) for v in raw]
    return [None if v == "None" else v for v in raw]


def _fail() -> int:
    raise ValueError


def is_number_or_none(value: object) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))

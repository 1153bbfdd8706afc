"""The checks of the scaling questions: how exact match grows along a ladder of model sizes
(``model_size``) and which shape of a size does best (``width_vs_depth``), beside seed 002's
figures. The rules of every check are in ``sweeps.analysis.claims``."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sweeps.analysis.claims_reading import (
    CHOOSE_ON,
    NOT_MEASURED,
    Frames,
    bar,
    chosen_cell,
    column,
    pct,
    per_cell,
    verdict_of,
)

LADDER_BAR = 0.99
"""The findings issue's bar for the best cell of a size ladder (test exact match)."""
DIP_STANDARD_ERRORS = 2.0
"""A size ladder still "rises" through a rung that sits below the one before by no more than
this many standard errors of the difference of the two test-set estimates,
``sqrt(p1 (1 - p1) / n + p2 (1 - p2) / n)`` with ``n = data.test_size``: two binomial estimates
of one accuracy differ by more than two standard errors about one time in twenty."""

SEED_SMALL_MODEL = (253_000, 0.376)
"""Seed 002: its 253K-parameter model reaches 37.6 % exact match (n_params, exact match)."""


def _best_cell(trials: pd.DataFrame) -> str:
    if "n_params" not in trials.columns:
        return f"Best cell: {NOT_MEASURED} (no n_params column)."
    best = chosen_cell(trials, ["n_params"], "test/exact_match")
    if best is None:
        return f"Best cell: {NOT_MEASURED} (no {CHOOSE_ON} to choose it on)."
    return (
        f"Best cell, chosen on validation ({pct(best['chosen'])} {CHOOSE_ON}): "
        f"{int(best['n_params']):,} parameters, {pct(best['reported'])} test exact match "
        f"(bar >= {pct(LADDER_BAR)}: {bar(best['reported'], lambda v: v >= LADDER_BAR)})."
    )


def ladder_rises(cells: pd.DataFrame, test_size: float) -> bool:
    """Whether no rung of ``cells`` (mean test exact match by n_params, sorted) sits below the
    one before by more than DIP_STANDARD_ERRORS standard errors of their difference."""
    p = cells["mean"].to_numpy(dtype=float)
    variance = p * (1 - p) / test_size
    allowed = DIP_STANDARD_ERRORS * np.sqrt(variance[1:] + variance[:-1])
    return bool((np.diff(p) >= -allowed).all())


def _rise_line(trials: pd.DataFrame, cells: pd.DataFrame) -> str:
    ladder = ", ".join(
        f"{int(n):,} -> {pct(m)}" for n, m in zip(cells.n_params, cells["mean"], strict=True)
    )
    rule = f"no rung below the one before by more than {DIP_STANDARD_ERRORS:g} standard errors"
    sizes = column(trials, "data.test_size").dropna().unique()
    if len(cells) < 2 or cells["mean"].isna().any():
        verdict = NOT_MEASURED
    elif len(sizes) != 1:  # the resolution of the estimates is unknown (or not one)
        verdict = f"{NOT_MEASURED} (no single data.test_size to take the standard error from)"
    else:
        rule += f" of a test set of {int(sizes[0]):,}"
        verdict = verdict_of(ladder_rises(cells, float(sizes[0])))
    return f"Along the parameter ladder ({ladder}) accuracy rises, {rule}: {verdict}."


def _size_ladder(frames: Frames, near: int | None, seed_figure: float) -> list[str]:
    trials = frames["main"]
    cells = per_cell(trials, ["n_params"], "test/exact_match").sort_values("n_params")
    out = [_best_cell(trials), _rise_line(trials, cells)]
    if near is not None and len(cells) and "n_params" in cells:
        row = cells.iloc[int((cells.n_params - near).abs().argmin())]
        out.append(
            f"The rung nearest the seed's {near:,}-parameter model ({int(row.n_params):,} "
            f"parameters) reaches {pct(row['mean'])}, against the seed's {pct(seed_figure)}."
        )
    return out


def model_size(frames: Frames) -> list[str]:
    return _size_ladder(frames, *SEED_SMALL_MODEL)


def width_vs_depth(frames: Frames) -> list[str]:
    out = _size_ladder(frames, *SEED_SMALL_MODEL)
    shape = ["model.d_model", "model.n_layer"]
    trials = frames["main"]
    if not set(shape) <= set(trials.columns):
        return out
    top = chosen_cell(trials, shape, "test/exact_match")
    if top is None:
        out.append(f"The best shape: {NOT_MEASURED} (no {CHOOSE_ON} to choose it on).")
    else:
        out.append(
            f"The best shape, chosen on validation ({pct(top['chosen'])}), is "
            f"{int(top['model.d_model'])} wide x {int(top['model.n_layer'])} deep: "
            f"{pct(top['reported'])} test exact match."
        )
    return out

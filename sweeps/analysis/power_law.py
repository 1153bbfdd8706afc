"""Scaling-law fits: ``y = E + A * x^(-alpha)`` fitted to a table's trials (scipy, pure functions).

The fit minimises a Huber loss on log residuals, ``log(E + A x^-alpha) - log(y)``, from several
starting points (as Hoffmann et al. 2022 and OLMo-core's ladder analysis do), with ``E`` and
``A`` kept positive by fitting their logs and ``x`` divided by its geometric mean for
conditioning. The intervals are a residual bootstrap: the fitted curve times resampled
exp(log residuals), refitted from the best fit, and the 5th and 95th percentiles taken (90 %).
Fewer than ``MIN_DISTINCT_X`` distinct x values are refused: the law has three parameters.

A trial at 100 % exact match has an error of 0, which a log residual cannot take; it is not
left out (that would drop the best trials) but floored at the evaluation set's resolution,
half an example (``0.5 / data.<set>_size``), and the fit says how many were floored.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from sweeps.spec.table_block import FitSpec

MIN_DISTINCT_X = 4
# The x a fit is usually made against (summary columns; any config path works too):
# n_params (arith.training.cost.n_params), tokens (training tokens, steps x batch_size x sequence
# length) and flops (training FLOPs, tokens x flops_per_token; arith.training.cost.step_cost).
# Table keys that x is computed from are coordinates of x, not groups of separate fits.
X_SOURCES = {
    "n_params": ("model.", "n_params", "flops_per_token"),
    "n_params_non_embedding": ("model.", "n_params", "flops_per_token"),
    "tokens": ("train.", "steps", "tokens"),
    "flops": ("model.", "train.", "n_params", "flops_per_token", "steps", "tokens", "flops"),
}
PARAMS = ("E", "A", "alpha")
HUBER_DELTA = 1e-3
LEVEL = 0.9


@dataclass(frozen=True)
class PowerLawFit:
    """Fitted ``y = E + A * x^(-alpha)`` with bootstrap intervals (lo, hi) per parameter."""

    E: float
    A: float
    alpha: float
    intervals: dict[str, tuple[float, float]]
    n_points: int
    n_x: int
    n_floored: int = 0
    """Points whose error was 0 and was fitted at the evaluation set's resolution instead."""

    def predict(self, x: np.ndarray | float) -> np.ndarray:
        return self.E + self.A * np.asarray(x, dtype=float) ** (-self.alpha)


def fit_power_law(
    x: np.ndarray,
    y: np.ndarray,
    *,
    n_boot: int = 200,
    seed: int = 0,
    x_name: str = "x",
    n_floored: int = 0,
    why_dropped: str = "",
) -> PowerLawFit:
    """Fit the law to the finite points with x > 0 and y > 0; ValueError (one line) when
    fewer than MIN_DISTINCT_X distinct x values remain (``why_dropped``: said in it, why some
    points were not positive). ``n_floored``: how many of ``y`` are floors, carried into the
    fit."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    x, y = x[keep], y[keep]
    n_x = len(np.unique(x))
    if n_x < MIN_DISTINCT_X:
        raise ValueError(
            f"fit: {x_name} has {n_x} distinct value(s) with a positive result{why_dropped}, "
            f"but fitting y = E + A*x^(-alpha) needs at least {MIN_DISTINCT_X}"
        )
    scale = float(np.exp(np.mean(np.log(x))))
    u = x / scale
    best = _best_fit(u, y, _starts(u, y))
    log_residuals = _residuals(best, u, y)
    predicted = y * np.exp(log_residuals)  # the fitted curve at each point
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(n_boot):
        y_star = predicted * np.exp(rng.choice(-log_residuals, size=len(y), replace=True))
        samples.append(_to_params(_best_fit(u, y_star, [best]), scale))
    low, high = np.percentile(np.array(samples), [50 * (1 - LEVEL), 50 * (1 + LEVEL)], axis=0)
    E, A, alpha = _to_params(best, scale)
    names = ("E", "A", "alpha")
    intervals = {k: (float(lo), float(hi)) for k, lo, hi in zip(names, low, high, strict=True)}
    return PowerLawFit(E, A, alpha, intervals, len(y), n_x, n_floored)


def set_size_column(metric: str) -> str:
    """The config key of the size of the evaluation set ``metric`` is measured on:
    ``test/exact_match`` -> ``data.test_size``, ``longer/exact_match`` -> ``data.longer_size``."""
    return f"data.{metric.split('/', 1)[0]}_size"


def floored_error(trials: pd.DataFrame, metric: str) -> tuple[pd.Series, pd.Series]:
    """(``1 - metric`` with each 0 raised to half an example of its evaluation set, which of the
    trials were so raised). A set of n examples cannot tell an error under 1/n from 0; half of
    that keeps a perfect trial in the fit, below every measurable error. Where the trials have
    no set size column, a 0 stays 0 (and the fit leaves it out, saying so)."""
    error = 1 - pd.to_numeric(trials[metric], errors="coerce")
    column = set_size_column(metric)
    size = (
        pd.to_numeric(trials[column], errors="coerce")
        if column in trials.columns
        else pd.Series(np.nan, index=trials.index)
    )
    floored = (error <= 0) & (size > 0)
    return error.where(~floored, 0.5 / size), floored


def _residuals(theta: np.ndarray, u: np.ndarray, y: np.ndarray) -> np.ndarray:
    log_e, log_a, alpha = theta
    return np.log(np.exp(log_e) + np.exp(log_a) * u ** (-alpha)) - np.log(y)


def _starts(u: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    starts = []
    for frac, alpha in itertools.product((0.01, 0.3, 0.8), (0.1, 0.3, 0.7, 1.5)):
        e = frac * y.min()
        a = max(float(np.median(y)) - e, 1e-12)
        starts.append(np.array([np.log(e), np.log(a), alpha]))
    return starts


def _best_fit(u: np.ndarray, y: np.ndarray, starts: list[np.ndarray]) -> np.ndarray:
    fits = [
        least_squares(
            _residuals,
            start,
            args=(u, y),
            loss="huber",
            f_scale=HUBER_DELTA,
            bounds=([-50.0, -50.0, 0.0], [50.0, 50.0, 5.0]),
        )
        for start in starts
    ]
    return min(fits, key=lambda f: f.cost).x


def _to_params(theta: np.ndarray, scale: float) -> tuple[float, float, float]:
    """(E, A, alpha) in the units of x: A_u * (x/scale)^-alpha = (A_u * scale^alpha) x^-alpha."""
    log_e, log_a, alpha = (float(t) for t in theta)
    return float(np.exp(log_e)), float(np.exp(log_a + alpha * np.log(scale))), alpha


def format_fit(fit: PowerLawFit, spec: FitSpec, group: str = "") -> str:
    """The fit as a table.md line: the equation and each parameter with its 90 % interval
    (``group``: the label of the group it was fitted on, if any)."""
    parts = [
        f"{name} = {value:.4g} [{lo:.4g}, {hi:.4g}]"
        for name, value, (lo, hi) in (
            ("E", fit.E, fit.intervals["E"]),
            ("A", fit.A, fit.intervals["A"]),
            ("alpha", fit.alpha, fit.intervals["alpha"]),
        )
    ]
    where = f" ({group})" if group else ""
    floored = (
        f", {fit.n_floored} at 100 % fitted at an error of 0.5 / {set_size_column(spec.y)}"
        if fit.n_floored
        else ""
    )
    return (
        f"_fit{where}: {spec.target} = E + A * {spec.x}^(-alpha) over {fit.n_points} trials "
        f"({fit.n_x} distinct {spec.x}{floored}); {'; '.join(parts)} "
        f"({int(LEVEL * 100)} % bootstrap intervals)_"
    )


def group_keys(spec: FitSpec, table_keys: Sequence[str]) -> list[str]:
    """The keys whose value combinations get a fit each: ``spec.per``, else the table keys
    other than x and those x is computed from (X_SOURCES): a table of n_params by
    train.flops_budget fits one law per budget; one of d_model by n_layer, a single law."""
    if spec.per is not None:
        return list(spec.per)
    sources = X_SOURCES.get(spec.x, ())
    return [k for k in table_keys if k != spec.x and not k.startswith(sources)]


@dataclass(frozen=True)
class GroupFit:
    """The fit of one group (``group``: key -> value, empty for a single fit), or why none."""

    group: dict[str, object]
    fit: PowerLawFit | None
    error: str | None = None

    def label(self) -> str:
        return ", ".join(f"{k}={key_text(v)}" for k, v in self.group.items())


def group_fits(trials: pd.DataFrame, spec: FitSpec, table_keys: Sequence[str]) -> list[GroupFit]:
    """One GroupFit per combination of ``group_keys`` in ``trials`` (the table's selected trials,
    in sorted order); ValueError when a column is missing."""
    keys = group_keys(spec, table_keys)
    missing = [k for k in (spec.x, spec.y, *keys) if k not in trials.columns]
    if missing:
        raise ValueError(f"fit: the trials have no column {missing[0]!r}")
    parts = [((), trials)] if not keys else trials.groupby(keys, dropna=False, sort=True)
    out = []
    for values, part in parts:
        values = values if isinstance(values, tuple) else (values,)
        group = dict(zip(keys, values, strict=True))
        x = pd.to_numeric(part[spec.x], errors="coerce").to_numpy()
        y = pd.to_numeric(part[spec.y], errors="coerce")
        floored = pd.Series(False, index=part.index)
        if spec.fits_error:
            y, floored = floored_error(part, spec.y)
        unfloored = int((y == 0).sum()) if spec.fits_error else 0
        why = f" ({unfloored} at 0 left out: no {set_size_column(spec.y)} to floor them)"
        try:
            fit = fit_power_law(x, y.to_numpy(), x_name=spec.x, n_floored=int(floored.sum()),
                                why_dropped=why if unfloored else "")  # fmt: skip
            out.append(GroupFit(group, fit))
        except ValueError as err:
            out.append(GroupFit(group, None, str(err)))
    return out


def fit_columns(fit: PowerLawFit) -> dict[str, float]:
    """The fit as flat columns (table.csv; MLflow metrics under a prefix): E, E_low, E_high,
    A, ..., alpha_high, n_points, n_floored."""
    out: dict[str, float] = {}
    for name in PARAMS:
        low, high = fit.intervals[name]
        out.update({name: getattr(fit, name), f"{name}_low": low, f"{name}_high": high})
    out["n_points"] = float(fit.n_points)
    out["n_floored"] = float(fit.n_floored)
    return out


def equation(fit: PowerLawFit, spec: FitSpec) -> str:
    """``y = 0.41 + 12.3 * n_params^(-0.35)``: the fitted law in one short line."""
    return f"{spec.target} = {fit.E:.3g} + {fit.A:.3g} * {spec.x}^(-{fit.alpha:.3g})"


def key_text(value: object) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e6:
        return str(int(value))
    return f"{value:g}" if isinstance(value, float) else str(value)

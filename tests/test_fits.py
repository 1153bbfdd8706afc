"""sweeps.fits: a power law recovered from synthetic noisy data; the too-few-points refusal."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sweeps.collect import render_tables
from sweeps.fits import fit_power_law
from sweeps.tables import table_specs_from_block

X = np.repeat([1e4, 3e4, 1e5, 3e5, 1e6, 3e6], 3)


def _truth(alpha: float) -> np.ndarray:
    """E = 0.5 plus a reducible part of 1.0 at the smallest x, 2 % multiplicative noise."""
    return 0.5 + 1e4**alpha * X ** (-alpha)


def _noisy(alpha: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return _truth(alpha) * np.exp(rng.normal(0, 0.02, len(X)))


@pytest.mark.parametrize("alpha", [0.2, 0.35, 0.6])
def test_recovers_a_known_exponent_from_noisy_data(alpha):
    fit = fit_power_law(X, _noisy(alpha, seed=1), n_boot=30)
    assert fit.alpha == pytest.approx(alpha, abs=0.05)
    low, high = fit.intervals["alpha"]
    assert low < fit.alpha < high and high - low < 0.2
    assert (
        np.abs(fit.predict(X) / _truth(alpha) - 1).max() < 0.03
    )  # E and A trade off; the curve holds
    assert fit.n_x == 6 and fit.n_points == len(X)


def test_too_few_distinct_x_is_refused_in_one_line():
    x = np.repeat([1e4, 1e5, 1e6], 4)
    with pytest.raises(ValueError, match=r"^fit: n_params has 3 distinct .* at least 4") as info:
        fit_power_law(x, 1 + x**-0.3, x_name="n_params")
    assert "\n" not in str(info.value)


def test_fit_under_the_table_in_table_md():
    trials = pd.DataFrame({"n_params": X, "test/loss": _noisy(0.35, seed=2)})
    block = {
        "rows": ["n_params"],
        "values": ["test/loss"],
        "fit": {"x": "n_params", "y": "test/loss"},
    }
    (spec,) = table_specs_from_block(block)
    text = render_tables(trials, [spec])
    assert "_fit: test/loss = E + A * n_params^(-alpha) over 18 trials" in text
    assert "alpha = 0.3" in text and "90 % bootstrap intervals" in text
    few = render_tables(trials[trials["n_params"] < 2e5], [spec])
    assert "_fit not made: fit: n_params has 3 distinct" in few


@pytest.mark.parametrize(
    ("fit", "message"),
    [
        ({"x": "n_params"}, r"^table\.fit\.y: missing"),
        ({"x": "n_params", "y": "test/loss", "law": "exp"}, r"^table\.fit\.law: .*'exp'"),
        ({"x": "n_params", "y": "test/loss", "form": 1}, r"^table\.fit\.form: unknown key"),
    ],
)
def test_fit_block_errors(fit, message):
    with pytest.raises(ValueError, match=message):
        table_specs_from_block({"values": ["test/loss"], "fit": fit})

"""sweeps.analysis.power_law and sweeps.analysis.table_fits: a power law recovered from synthetic
noisy data, the too-few-points refusal, fits per group and where they are written."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient
from sweep_procs import fresh_store

from sweeps.analysis import plots
from sweeps.analysis.collect import render_tables
from sweeps.analysis.power_law import fit_columns, fit_power_law, floored_error, group_keys
from sweeps.analysis.table_fits import (
    fit_metrics,
    fit_note,
    log_fits_to_parent,
    table_fits,
    with_fit_columns,
)
from sweeps.analysis.tables import summarise
from sweeps.spec.table_block import table_specs_from_block

METRIC = "test/exact_match"
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


def _budget_trials() -> pd.DataFrame:
    """Two budgets x 6 sizes x 3 seeds; loss falls as n_params^-0.3 under 1e12, ^-0.5 over."""
    alphas = {1e12: 0.3, 1e13: 0.5}
    rows = []
    for budget, alpha in alphas.items():
        rng = np.random.default_rng(int(budget) % 97)
        for x in X:
            loss = (0.5 + 1e4**alpha * x ** (-alpha)) * np.exp(rng.normal(0, 0.02))
            rows.append({"train.flops_budget": budget, "n_params": x, "test/loss": loss})
    return pd.DataFrame(rows)


def test_one_fit_per_group_of_the_remaining_keys_in_md_csv_and_mlflow_names():
    trials = _budget_trials()
    block = {
        "name": "iso",
        "rows": ["n_params"],
        "columns": ["train.flops_budget"],
        "values": ["test/loss"],
        "fit": {"x": "n_params", "y": "test/loss"},
    }
    (spec,) = table_specs_from_block(block)
    assert group_keys(spec.fit, ["n_params", "train.flops_budget"]) == ["train.flops_budget"]
    fits = table_fits(trials, [spec])["iso"]
    assert [g.group for g in fits] == [{"train.flops_budget": 1e12}, {"train.flops_budget": 1e13}]
    assert [round(g.fit.alpha, 1) for g in fits] == [0.3, 0.5]
    text = render_tables(trials, [spec], {"iso": fits})
    assert "_fit (train.flops_budget=1e+12): test/loss = E + A * n_params^(-alpha)" in text
    csv = with_fit_columns(summarise(trials, spec), fits)
    low = csv[csv["train.flops_budget"] == 1e12]
    assert low["fit:alpha"].round(1).unique().tolist() == [0.3]
    assert (low["fit:alpha_low"] < low["fit:alpha"]).all() and (low["fit:n_points"] == 18).all()
    metrics = fit_metrics({"iso": fits})
    assert round(metrics["fit/iso/train.flops_budget_1e_12/alpha"], 1) == 0.3
    assert {
        "fit/iso/train.flops_budget_1e_13/alpha_high",
        "fit/iso/train.flops_budget_1e_13/E",
    } <= set(metrics)
    # x computed from the keys (shape, budget): one fit over every cell, unless per says so
    (single,) = table_specs_from_block({**block, "fit": {"x": "flops", "y": "test/loss"}})
    assert group_keys(single.fit, ["model.d_model", "train.flops_budget", "n_params"]) == []
    per = {**block, "fit": {"x": "n_params", "y": "test/loss", "per": []}}
    (one,) = table_specs_from_block(per)
    assert len(table_fits(trials, [one])["iso"]) == 1


def test_fit_per_must_name_a_table_key_other_than_x():
    block = {"rows": ["n_params"], "values": ["test/loss"]}
    with pytest.raises(ValueError, match=r"^table\.fit\.per: 'model\.n_layer' is not a row"):
        table_specs_from_block(
            {**block, "fit": {"x": "n_params", "y": "l", "per": ["model.n_layer"]}}
        )
    with pytest.raises(ValueError, match=r"^table\.fit\.per: expected a list"):
        table_specs_from_block({**block, "fit": {"x": "n_params", "y": "l", "per": 3}})


def test_log_fits_to_parent_run(tmp_path):
    client = MlflowClient(fresh_store(tmp_path / "mlflow.db"))
    run = client.create_run(client.create_experiment("fits"))
    (spec,) = table_specs_from_block(
        {"name": "size", "rows": ["n_params"], "values": ["test/loss"],
         "fit": {"x": "n_params", "y": "test/loss"}}
    )  # fmt: skip
    trials = pd.DataFrame({"n_params": X, "test/loss": _noisy(0.35, seed=2)})
    logged = log_fits_to_parent(client, run.info.run_id, trials, [spec])
    stored = client.get_run(run.info.run_id).data.metrics
    assert stored == pytest.approx(logged)
    assert stored["fit/size/alpha_low"] < stored["fit/size/alpha"] < stored["fit/size/alpha_high"]


def _perfect_at_the_top(n_perfect_sizes: int, test_size: int | None) -> pd.DataFrame:
    """Exact match whose error falls as n_params^-0.35 over X, with every trial of the largest
    ``n_perfect_sizes`` sizes at exactly 100 %."""
    error = _noisy(0.35, seed=3) * 0.4
    perfect = np.isin(X, np.unique(X)[-n_perfect_sizes:])
    trials = pd.DataFrame({"n_params": X, METRIC: np.where(perfect, 1.0, 1 - error)})
    return trials if test_size is None else trials.assign(**{"data.test_size": test_size})


def _fit_block(trials: pd.DataFrame):
    (spec,) = table_specs_from_block(
        {"name": "size", "rows": ["n_params"], "values": [METRIC],
         "fit": {"x": "n_params", "y": METRIC}}
    )  # fmt: skip
    return spec, table_fits(trials, [spec])["size"]


@pytest.mark.parametrize("n_perfect_sizes", [2, 3])
def test_trials_at_100_percent_are_fitted_at_the_set_resolution(n_perfect_sizes):
    trials = _perfect_at_the_top(n_perfect_sizes, test_size=2000)
    spec, (group,) = _fit_block(trials)
    n_perfect = 3 * n_perfect_sizes
    assert group.error is None and group.fit is not None
    assert (group.fit.n_points, group.fit.n_floored, group.fit.n_x) == (18, n_perfect, 6)
    line = fit_note([group], spec)
    floored = f"{n_perfect} at 100 % fitted at an error of 0.5 / data.test_size"
    assert f"over 18 trials (6 distinct n_params, {floored})" in line
    assert fit_columns(group.fit)["n_floored"] == n_perfect
    error, at_floor = floored_error(trials, METRIC)
    assert at_floor.sum() == n_perfect and (error[at_floor] == 0.5 / 2000).all()


def test_zeros_without_a_set_size_are_counted_where_the_fit_is_refused():
    _, (group,) = _fit_block(_perfect_at_the_top(3, test_size=None))
    assert group.fit is None
    assert group.error == (
        "fit: n_params has 3 distinct value(s) with a positive result (9 at 0 left out: no "
        "data.test_size to floor them), but fitting y = E + A*x^(-alpha) needs at least 4"
    )


def test_size_plot_rings_the_floored_trials():
    trials = _perfect_at_the_top(2, test_size=2000)
    trials["trial_id"] = [f"t{i}" for i in range(len(trials))]
    spec, groups = _fit_block(trials)
    empty = pd.DataFrame(columns=["trial_id", "metric", "step", "value"])
    figure = plots.plots_for(trials, empty, METRIC, [spec], {"size": groups})
    ax = figure["exact_match_vs_params"].axes[0]
    (ring,) = [c for c in ax.collections if c.get_gid() == "floored"]
    perfect = trials[trials[METRIC] == 1.0]
    drawn = sorted(map(tuple, ring.get_offsets()))
    assert drawn == sorted(zip(perfect.n_params, perfect[METRIC], strict=True))
    assert "100 %, fitted at error 0.5 / data.test_size (6)" in [
        t.get_text() for t in ax.get_legend().texts
    ]
    without_fit = plots.exact_match_vs_params(trials, METRIC)
    assert not [c for c in without_fit.axes[0].collections if c.get_gid() == "floored"]

"""The search space: grid expansion, derived values, distributions and their Tune domains."""

from __future__ import annotations

import math

import pytest
from ray import tune

from arith.errors import ConfigError
from sweeps.runtime import tune_space
from sweeps.runtime.trainable import reportable, summary_report
from sweeps.spec import space
from sweeps.spec.sweep_spec import SpecError, parse_spec

BASE = {
    "task": {"name": "addition", "n_digits": 2},
    "model": {"n_layer": 1, "d_model": 32, "n_head": 2},
    "train": {"max_steps": 10, "batch_size": 32},
}


def make_spec(space_block: dict, **sweep) -> object:
    raw = {
        "sweep": {"name": "t", **sweep},
        "base": BASE,
        "space": space_block,
    }
    return parse_spec(raw)


def test_grid_is_the_product_of_lists_and_seeds():
    spec = make_spec({"model.d_model": [16, 32], "model.n_layer": [1, 2, 3]}, seeds=[0, 1])
    points = space.grid_points(spec)
    assert len(points) == 12 == space.n_trials(spec)
    assert {(p["model.d_model"], p["model.n_layer"], p["train.seed"]) for p in points} == {
        (d, n, s) for d in (16, 32) for n in (1, 2, 3) for s in (0, 1)
    }


def test_dry_run_order_is_the_order_tune_numbers_its_trials():
    """Tune's own variant generator on the param space: point i is trial ..._0000i."""
    from ray.tune.search.variant_generator import generate_variants

    spec = make_spec(
        {"model.n_layer": [1, 2, 3], "model.d_model,model.n_head": [[16, 2], [32, 4]]},
        seeds=[0, 1],
    )
    tune_order = [
        {k: (list(v) if isinstance(v, tuple) else v) for k, v in config.items()}
        for _, config in generate_variants(tune_space.param_space(spec))
    ]
    assert space.tune_ordered_points(spec) == tune_order
    assert space.tune_ordered_points(spec) != space.grid_points(spec)  # the old numbering


def test_num_samples_repeats_the_grid():
    # A repeat redraws the sampled lr (a grid without a sampled or seed axis is refused).
    spec = make_spec(
        {"model.d_model": [16, 32], "optim.lr": {"loguniform": [1e-4, 1e-2]}}, num_samples=3
    )
    assert space.n_trials(spec) == 6


def test_random_search_turns_lists_into_choices():
    spec = make_spec(
        {"model.d_model": [16, 32], "optim.lr": {"loguniform": [1e-4, 1e-2]}},
        search="random",
        num_samples=5,
    )
    assert space.grid_points(spec) == [{}]
    assert space.n_trials(spec) == 5
    domains = tune_space.param_space(spec)
    assert isinstance(domains["model.d_model"], tune.search.sample.Categorical)
    assert isinstance(domains["optim.lr"], tune.search.sample.Float)


def test_grid_search_domains_and_seeds():
    spec = make_spec({"model.d_model": [16, 32]}, seeds=[3, 4])
    domains = tune_space.param_space(spec)
    assert domains["model.d_model"] == {"grid_search": [16, 32]}
    assert domains["train.seed"] == {"grid_search": [3, 4]}


@pytest.mark.parametrize(
    ("kind", "args", "domain"),
    [
        ("uniform", [0.0, 0.5], tune.search.sample.Float),
        ("loguniform", [1e-5, 1e-1], tune.search.sample.Float),
        ("randint", [1, 5], tune.search.sample.Integer),
        ("choice", [0.0, 0.1, 1.0], tune.search.sample.Categorical),
    ],
)
def test_distributions_become_tune_domains(kind, args, domain):
    key = "model.n_layer" if kind == "randint" else "optim.weight_decay"
    spec = make_spec({key: {kind: args}}, search="random")
    assert isinstance(tune_space.param_space(spec)[key], domain)
    sample = tune_space.param_space(spec)[key].sample()
    if kind == "randint":
        assert 1 <= sample < 5
    elif kind != "choice":
        assert args[0] <= sample <= args[1]


def test_validation_points_cover_choices_and_upper_bounds():
    spec = make_spec(
        {
            "model.d_model": [16, 32],
            "model.n_layer": {"choice": [1, 2]},
            "optim.lr": {"uniform": [1e-3, 1e-2]},
        }
    )
    points = space.validation_points(spec)
    assert {p["model.d_model"] for p in points} == {16, 32}
    assert {p["model.n_layer"] for p in points} == {1, 2}
    assert {p["optim.lr"] for p in points} == {1e-3, 1e-2}


def test_joined_paths_search_pairs():
    spec = make_spec({"model.d_model,model.n_layer": [[64, 1], [32, 2]]})
    points = space.grid_points(spec)
    assert len(points) == 2
    cfg = space.resolve_run_config(spec.base, points[1], spec.derived)
    assert (cfg.model.d_model, cfg.model.n_layer) == (32, 2)


def test_joined_paths_need_matching_tuples():
    with pytest.raises(SpecError, match=r"^space\.model\.d_model,model\.n_layer\[0\]: "):
        make_spec({"model.d_model,model.n_layer": [[64], [32, 2]]})


def test_derived_value_sees_the_trial_and_the_defaults():
    spec = parse_spec(
        {
            "sweep": {"name": "t"},
            "base": BASE,
            "space": {"train.batch_size": [32, 128]},
            "derived": {
                "optim.lr": "1e-3 * sqrt(train.batch_size / 32)",
                "optim.warmup_steps": "max(1, train.max_steps / 10)",
            },
        }
    )
    cfg = space.resolve_run_config(spec.base, {"train.batch_size": 128}, spec.derived)
    assert math.isclose(cfg.optim.lr, 2e-3)
    assert cfg.optim.warmup_steps == 1


def test_derived_value_may_depend_on_a_condition():
    rule = space.parse_derived(
        "derived.train.precision",
        "train.precision",
        "'bf16' if model.d_model >= 64 and model.n_layer != 3 else 'fp32'",
        {"train.precision", "model.d_model", "model.n_layer"},
    )
    narrow = space.resolve_run_config(BASE, {"model.d_model": 32}, {"train.precision": rule})
    wide = space.resolve_run_config(BASE, {"model.d_model": 128}, {"train.precision": rule})
    assert (narrow.train.precision, wide.train.precision) == ("fp32", "bf16")


def test_derived_text_is_never_arithmetic():
    rule = space.parse_derived("d", "optim.lr", "format.name * 3", {"optim.lr", "format.name"})
    with pytest.raises(ConfigError, match="arithmetic on text"):
        space.resolve_run_config(BASE, {}, {"optim.lr": rule})


def test_derived_expression_cannot_call_anything_else():
    paths = {"optim.lr", "train.batch_size"}
    for text in (
        "__import__('os').system('true')",
        "train.batch_size.__class__",
        "[1, 2]",
        "'a' * 3",
        "'a' < 'b' < 'c' if 1 in (1,) else 0",
        "model.d_model is 1",
        "lambda: 1",
        "sqrt(x=1)",
    ):
        with pytest.raises(ConfigError):
            space.parse_derived("derived.optim.lr", "optim.lr", text, paths)


def test_derived_errors_at_evaluation_are_config_errors():
    rule = space.parse_derived(
        "d", "optim.lr", "log(train.batch_size - 32)", {"optim.lr", "train.batch_size"}
    )
    with pytest.raises(ConfigError, match=r"optim\.lr"):
        space.resolve_run_config(BASE, {}, {"optim.lr": rule})


def test_search_algorithm_and_scheduler():
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search import BasicVariantGenerator
    from ray.tune.search.optuna import OptunaSearch

    spec = make_spec(
        {"optim.lr": {"loguniform": [1e-4, 1e-2]}},
        search="optuna",
        num_samples=4,
        scheduler={"name": "asha", "grace_period": 1, "max_t": 5},
    )
    assert isinstance(tune_space.search_algorithm(spec), OptunaSearch)
    assert isinstance(tune_space.scheduler(spec), ASHAScheduler)
    assert isinstance(
        tune_space.search_algorithm(make_spec({"model.d_model": [16]})), BasicVariantGenerator
    )


def test_optuna_takes_list_choices_without_a_warning():
    """Adam's betas drawn by Optuna: Tune's searcher turns the list choices into Optuna's
    distribution (with its in-memory study) and the console shows no storage warning."""
    import warnings

    spec = make_spec({"optim.betas": {"choice": [[0.9, 0.95], [0.8, 0.95]]}}, search="optuna")
    searcher = tune_space.search_algorithm(spec)
    with warnings.catch_warnings(record=True) as shown:
        searcher.set_search_properties("val/exact_match", "max", tune_space.param_space(spec))
        assert searcher.suggest("t0")["optim.betas"] in ([0.9, 0.95], [0.8, 0.95])
    assert not [str(w.message) for w in shown if "categorical" in str(w.message)]


def test_trainable_reports_numbers_only():
    metrics = {
        "step": 10,
        "val/exact_match": 0.5,
        "perf/mfu": None,
        "checkpoint": "/x",
        "done": 1,
        "flag": True,
    }
    assert reportable(metrics) == {"step": 10, "val/exact_match": 0.5}
    last = summary_report(
        {"steps": 10, "stopped_reason": "early_stopping", "train/steps_to_100pct": None}
    )
    assert last == {"steps": 10, "stopped_reason": "early_stopping", "final_weights": "last"}

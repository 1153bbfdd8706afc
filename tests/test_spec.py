"""Spec validation: every mistake is one line naming its dotted path, exit 2, nothing started."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sweeps.spec.spec_file import SpecError, apply_overrides
from sweeps.spec.sweep_spec import load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[1]

GOOD = {
    "sweep": {"name": "t", "metric": "val/exact_match", "mode": "max", "search": "grid"},
    "base": {
        "task": {"name": "addition", "n_digits": 2},
        "model": {"n_layer": 1, "d_model": 32, "n_head": 2},
        "train": {"max_steps": 10},
    },
    "space": {"model.d_model": [16, 32], "optim.lr": {"loguniform": [1.0e-4, 1.0e-2]}},
    "table": {"rows": ["model.d_model"], "values": ["test/exact_match", "n_params"]},
}


def with_change(path: str, value) -> dict:
    """GOOD with one value set (``None`` deletes); ``path`` splits on '/' (space keys keep dots)."""
    raw = copy.deepcopy(GOOD)
    *parents, leaf = path.split("/")
    node = raw
    for key in parents:
        node = node.setdefault(key, {})
    if value is None:
        node.pop(leaf, None)
    else:
        node[leaf] = value
    return raw


def test_good_spec_parses():
    spec = parse_spec(copy.deepcopy(GOOD))
    assert spec.name == "t"
    assert set(spec.space) == {"model.d_model", "optim.lr"}
    assert spec.tables[0].rows == ("model.d_model",)


@pytest.mark.parametrize(
    ("path", "value", "expected_path", "shows"),
    [
        ("sweep/nmae", "x", "sweep.nmae", "unknown key"),
        ("sweep/name", "has space", "sweep.name", "'has space'"),
        ("sweep/mode", "maximum", "sweep.mode", "'maximum'"),
        ("sweep/num_samples", 0, "sweep.num_samples", "0"),
        ("sweep/metric", "val/accuracy", "sweep.metric", "'val/accuracy'"),
        ("sweep/resources", {"cpu": "two"}, "sweep.resources.cpu", "'two'"),
        ("sweep/scheduler", {"name": "hyperband"}, "sweep.scheduler.name", "'hyperband'"),
        ("space/model.d_model", [], "space.model.d_model", "[]"),
        ("space/model.width", [1, 2], "space.model.width", "'model.width'"),
        ("space/optim.lr", {"loguniform": [0.0, 1.0]}, "space.optim.lr.loguniform", "[0.0, 1.0]"),
        ("space/optim.lr", {"uniform": [0.1, 0.01]}, "space.optim.lr.uniform", "[0.1, 0.01]"),
        ("space/optim.lr", {"normal": [0, 1]}, "space.optim.lr", "'normal'"),
        ("space/model.n_layer", [1, -1], "space.model.n_layer", "-1"),
        ("base/model/n_layers", 2, "base.model.n_layers", "unknown key"),
        ("base/model/position", "sinusoidal", "base.model.position", "sinusoidal"),
        ("base/train/max_steps", "many", "base.train.max_steps", "'many'"),
        ("table/values", ["test/accuracy"], "table.values[0]", "'test/accuracy'"),
        ("table/rows", ["model.width"], "table.rows[0]", "'model.width'"),
        ("table/aggregate", "sum", "table.aggregate", "'sum'"),
        ("table/select", {"over": ["optim.lr"], "by": "test/loss"}, "table.select.by", "test/"),
        (
            "table/select",
            {"over": ["model.w"], "by": "val/loss"},
            "table.select.over[0]",
            "model.w",
        ),
        ("table/select", {"over": ["optim.lr"], "by": "val/acc"}, "table.select.by", "'val/acc'"),
        (
            "table/select",
            {"over": ["optim.lr"], "by": "val/loss", "mode": "up"},
            "table.select.mode",
            "up",
        ),
        ("table/select", {"over": ["model.d_model"], "by": "val/loss"}, "table.select.over", "row"),
        ("derived", {"optim.lr": "__import__('os')"}, "derived.optim.lr", "not allowed"),
        ("derived", {"optim.lr": "1e-3 * sqrt(train.batchsize)"}, "derived.optim.lr", "batchsize"),
        ("derived", {"optim.lr": "1e-3 *"}, "derived.optim.lr", "1e-3 *"),
        ("derived", {"model.d_model": "64"}, "derived.model.d_model", "also searched"),
        ("nonsense", {}, "nonsense", "unknown block"),
    ],
)
def test_bad_input_names_the_path(path, value, expected_path, shows):
    with pytest.raises(SpecError) as info:
        parse_spec(with_change(path, value))
    message = str(info.value)
    assert message.startswith(f"{expected_path}: "), message
    assert shows in message
    assert "\n" not in message


def test_base100_with_abacus_is_caught_at_a_grid_point():
    raw = with_change("space/model.position", ["rope", "abacus"])
    raw["base"]["format"] = {"name": "base100"}
    with pytest.raises(SpecError, match=r"^space\.model\.position: .*abacus"):
        parse_spec(raw)


def test_asha_needs_a_metric_reported_at_every_evaluation():
    raw = with_change("sweep/scheduler", {"name": "asha"})
    raw["sweep"]["metric"] = "best/val/exact_match"  # reported once, at the end
    with pytest.raises(SpecError, match=r"^sweep\.metric: .*only measured at the end"):
        parse_spec(raw)


def test_overrides_reach_every_block():
    raw = apply_overrides(
        GOOD,
        [
            "base.train.max_steps=50",
            "space.model.n_layer=[1,2]",
            "sweep.scheduler.name=asha",
            "table.columns=[model.n_layer]",
        ],
    )
    spec = parse_spec(raw)
    assert spec.base["train"]["max_steps"] == 50
    assert spec.space["model.n_layer"].values == (1, 2)
    assert spec.sweep.scheduler.name == "asha"
    assert spec.tables[0].columns == ("model.n_layer",)
    assert GOOD["base"]["train"]["max_steps"] == 10  # the original is left alone


def test_learning_rates_in_scientific_notation_are_floats(tmp_path):
    # PyYAML reads 1e-3 as a string; a spec or --set that writes it so means the number
    raw = apply_overrides(GOOD, ["base.optim.lr=1e-3", "space.optim.weight_decay=[1e-2, 1.5E+0]"])
    spec = parse_spec(raw)
    assert spec.base["optim"]["lr"] == 0.001
    assert spec.space["optim.weight_decay"].values == (0.01, 1.5)
    written = copy.deepcopy(GOOD)
    written["base"]["optim"] = {"lr": "3e-4"}  # what yaml.safe_load makes of `lr: 3e-4`
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(written).replace("'3e-4'", "3e-4"))
    assert "lr: 3e-4" in path.read_text()
    assert load_spec(path).base["optim"]["lr"] == 0.0003
    assert apply_overrides(GOOD, ["base.train.device=cpu"])["base"]["train"]["device"] == "cpu"


def test_bad_override_is_one_line():
    with pytest.raises(SpecError, match=r"^--set: "):
        apply_overrides(GOOD, ["nothing-to-set"])
    with pytest.raises(SpecError, match=r"^--set: .*start with one of"):
        apply_overrides(GOOD, ["model.n_layer=2"])


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(SpecError, match=r"^spec: cannot read"):
        load_spec(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("sweep: [unclosed\n")
    with pytest.raises(SpecError, match=r"^spec: .* is not valid YAML"):
        load_spec(bad)


def test_every_shipped_search_space_validates():
    files = sorted((ROOT / "search_spaces").glob("*.yaml"))
    assert files
    for path in files:
        spec = load_spec(path)
        assert spec.name == path.stem, path


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sweeps.run", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        timeout=120,
    )


@pytest.mark.parametrize(
    ("spec", "args", "expected"),
    [
        (None, ["missing.yaml"], "error: spec: cannot read 'missing.yaml'"),
        ({"space/model.d_model": []}, [], "error: space.model.d_model: expected a non-empty list"),
        ({}, ["--set", "base.model.n_layer=-3"], "error: base.model.n_layer: "),
        (
            {},
            ["--set", "base.train.flops_budget=1e9"],  # GOOD sets train.max_steps too
            "error: base.train.flops_budget: cannot be combined with train.max_steps; ",
        ),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(tmp_path, spec, args, expected):
    if spec is not None:
        raw = copy.deepcopy(GOOD)
        for path, value in spec.items():
            raw = with_change(path, value)
        (tmp_path / "spec.yaml").write_text(yaml.safe_dump(raw))
        args = ["spec.yaml", *args]
    result = _cli(tmp_path, *args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(expected), lines[0]
    assert not (tmp_path / "mlflow.db").exists()
    assert not (tmp_path / "results").exists()


def test_dry_run_shows_each_trials_steps_from_a_flops_budget():
    from arith.training.cost import planned_steps
    from sweeps.runtime.dry_run import dry_run_text
    from sweeps.spec.space import resolve_run_config

    spec = load_spec(
        ROOT / "search_spaces" / "smoke.yaml",
        ["base.train.max_steps=null", "base.train.flops_budget=2e9", "space.train.seed=[0]"],
    )
    lines = dry_run_text(spec).splitlines()
    steps = {}
    for d_model in (16, 32):
        config = resolve_run_config(spec.base, {"model.d_model": d_model}, spec.derived)
        steps[d_model] = planned_steps(config)
        (line,) = [x for x in lines if f"model.d_model={d_model} " in x]
        assert f"steps={steps[d_model]:,} " in line
    assert steps[16] > steps[32] > 1  # compute-matched: the smaller model trains longer


# ---- the selection metric (issue 19): chosen on validation, in the direction it improves ----


@pytest.mark.parametrize(
    "metric", ["test/exact_match", "test/loss", "ood/exact_match", "edge/exact_match"]
)
@pytest.mark.parametrize(
    "search", [{"search": "grid"}, {"search": "optuna"}, {"scheduler": {"name": "asha"}}]
)
def test_selecting_on_a_held_out_set_is_refused(metric, search):
    raw = copy.deepcopy(GOOD)
    raw["sweep"].update(metric=metric, mode="min" if "loss" in metric else "max", **search)
    with pytest.raises(SpecError) as info:
        parse_spec(raw)
    message = str(info.value)
    assert message.startswith(f"sweep.metric: {metric!r} is a held-out metric"), message
    assert f"'val/{metric.split('/', 1)[1]}'" in message


@pytest.mark.parametrize(
    ("metric", "mode", "better"),
    [("val/loss", "max", "min"), ("val/exact_match", "min", "max"), ("train/loss", "max", "min")],
)
def test_mode_against_the_metrics_direction_is_refused(metric, mode, better):
    raw = with_change("sweep/metric", metric)
    raw["sweep"]["mode"] = mode
    with pytest.raises(
        SpecError, match=rf"^sweep\.mode: '{mode}' would pick the worst .*use {better}$"
    ):
        parse_spec(raw)
    raw["sweep"]["mode"] = better
    assert parse_spec(raw).sweep.mode == better


@pytest.mark.parametrize("kind", ["uniform", "loguniform"])
@pytest.mark.parametrize("path", ["model.d_model", "train.batch_size"])
def test_float_draws_on_an_integer_field_are_refused(kind, path):
    raw = with_change(f"space/{path}", {kind: [16, 64]})
    with pytest.raises(SpecError, match=rf"^space\.{path}\.{kind}: draws floats, but .* int; use"):
        parse_spec(raw)


def test_float_draws_on_a_float_field_pass():
    assert parse_spec(with_change("space/optim.lr", {"uniform": [1, 3]})).space["optim.lr"]


def test_grid_repeats_without_a_seed_axis_are_refused():
    raw = with_change("space/optim.lr", None)  # the grid alone: nothing a repeat would redraw
    raw["sweep"]["num_samples"] = 3
    with pytest.raises(
        SpecError, match=r"^sweep\.num_samples: 3 repeats .* sweep\.seeds: \[0, 1, 2\]"
    ):
        parse_spec(raw)
    assert parse_spec(with_change("sweep/num_samples", 3)).sweep.num_samples == 3  # lr redrawn


@pytest.mark.parametrize("seeds", ["space", "sweep"])
def test_grid_repeats_with_a_seed_axis_are_refused(seeds):
    """A seed axis is a grid axis too: each repeat trains the same (config, seed) pairs, so a
    table would count every run three times (smoke: 8 trials of 4 distinct configs)."""
    raw = with_change("space/optim.lr", None)
    raw["sweep"]["num_samples"] = 3
    if seeds == "space":
        raw["space"]["train.seed"] = [0, 1]
    else:
        raw["sweep"]["seeds"] = [0, 1]
    with pytest.raises(
        SpecError, match=r"^sweep\.num_samples: 3 repeats .* sweep\.seeds: \[0, 1, 2, 3, 4, 5\]"
    ):
        parse_spec(raw)


def test_shipped_search_spaces_select_on_validation():
    from sweeps.spec.metrics import is_held_out, metric_direction

    for path in sorted((ROOT / "search_spaces").glob("*.yaml")):
        sweep = load_spec(path).sweep
        assert not is_held_out(sweep.metric), path
        assert sweep.mode == metric_direction(sweep.metric), path


def test_unnamed_tables_get_distinct_names_and_named_ones_must_differ():
    raw = with_change("table", [{"rows": ["model.d_model"]}, {"values": ["n_params"]}])
    assert [t.name for t in parse_spec(raw).tables] == ["table", "table_2"]
    raw["table"] = [{"name": "a"}, {"name": "b"}, {"name": "a", "values": ["n_params"]}]
    with pytest.raises(SpecError, match=r"^table\[2\]\.name: 'a' already names table\[0\]"):
        parse_spec(raw)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"rows": "model.d_model"}, r"^table\.rows: expected a list of names"),
        ({"rows": ["model.width"]}, r"^table\.rows\[0\]: expected a config path"),
        ({"columns": ["model.width"]}, r"^table\.columns\[0\]: expected a config path"),
        ({"fit": {"x": "model.width", "y": "test/loss"}}, r"^table\.fit\.x: expected a config"),
        ({"select": {"over": ["x.y"], "by": "val/loss"}}, r"^table\.select\.over\[0\]: "),
    ],
)
def test_table_block_errors_name_the_field(change, expected):
    raw = copy.deepcopy(GOOD)
    raw["table"] = {**raw["table"], **change}
    with pytest.raises(SpecError, match=expected):
        parse_spec(raw)


@pytest.mark.parametrize("metric", ["nope", "test", "longer"])
def test_a_metric_without_a_set_is_refused_on_one_line_not_a_crash(metric):
    with pytest.raises(SpecError, match=r"^sweep\.metric: "):
        parse_spec(with_change("sweep.metric", metric))


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        (["grace_period=0"], "sweep.scheduler.grace_period: must be >= 1, got 0"),
        (
            ["grace_period=3", "max_t=2"],
            "sweep.scheduler.max_t: must be >= grace_period (3), got 2",
        ),
        (["reduction_factor=1"], "sweep.scheduler.reduction_factor: must be > 1, got 1"),
    ],
)
def test_asha_settings_name_the_bad_value(sets, expected):
    """One line naming the field and its bad value, not the whole scheduler block."""
    sets = ["sweep.scheduler.name=asha", *(f"sweep.scheduler.{s}" for s in sets)]
    with pytest.raises(SpecError) as err:
        load_spec(ROOT / "search_spaces" / "smoke.yaml", sets)
    assert str(err.value).startswith(expected), str(err.value)

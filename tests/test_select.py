"""Best-per-cell selection (``table.select``) on trials frames built by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from sweeps.analysis.table_notes import describe
from sweeps.analysis.tables import build_table, select_trials, summarise, to_markdown
from sweeps.spec.table_block import Selection, TableSpec, table_specs_from_block

VAL, TEST = "val/exact_match", "test/exact_match"
# (d_model, lr) whose validation is best; the other lr is worse on validation but better on test,
# so a table that selected on test would show different numbers.
BEST_LR = {64: 1e-3, 128: 3e-3}


def _trials() -> pd.DataFrame:
    rows = []
    for d_model in (64, 128):
        for n_layer in (1, 2):
            for lr in (1e-3, 3e-3):
                for seed in (0, 1):
                    good = BEST_LR[d_model] == lr
                    rows.append(
                        {
                            "trial_id": f"t{len(rows):02d}",
                            "model.d_model": d_model,
                            "model.n_layer": n_layer,
                            "optim.lr": lr,
                            "train.seed": seed,
                            VAL: (0.9 if good else 0.5) + 0.02 * seed,
                            TEST: (0.8 if good else 0.95) + 0.02 * seed,
                            "val/loss": (0.1 if good else 0.7) + 0.01 * seed,
                        }
                    )
    return pd.DataFrame(rows)


def _spec(**select) -> TableSpec:
    block = {"rows": ["model.d_model"], "columns": ["model.n_layer"], "values": [TEST]}
    block["select"] = {"over": ["optim.lr"], "by": VAL, **select}
    (spec,) = table_specs_from_block(block)
    return spec


def test_selects_best_validation_lr_per_cell_and_reports_its_seeds():
    spec = _spec()
    table = build_table(_trials(), spec)
    for d_model, lr in BEST_LR.items():
        for n_layer in (1, 2):
            assert table.loc[d_model, (n_layer, "optim.lr", "chosen")] == lr
            assert table.loc[d_model, (n_layer, TEST, "mean")] == pytest.approx(0.81)
            assert table.loc[d_model, (n_layer, TEST, "n")] == 2  # the chosen lr's two seeds
    chosen = select_trials(_trials(), spec)
    assert set(zip(chosen["model.d_model"], chosen["optim.lr"], strict=True)) == {
        (64, 1e-3),
        (128, 3e-3),
    }


def test_mode_follows_the_metric_name_and_can_be_given():
    assert Selection(("optim.lr",), "val/loss").direction == "min"
    assert Selection(("optim.lr",), VAL).direction == "max"
    # The worst lr on validation loss (mode max) is the other one.
    table = build_table(_trials(), _spec(by="val/loss", mode="max"))
    assert table.loc[64, (1, "optim.lr", "chosen")] == 3e-3
    table = build_table(_trials(), _spec(by="val/loss"))
    assert table.loc[64, (1, "optim.lr", "chosen")] == 1e-3


def test_markdown_shows_the_chosen_value_and_the_caption_says_validation():
    spec = _spec()
    text = to_markdown(build_table(_trials(), spec), spec)
    header, _, first, second = text.splitlines()
    assert "model.n_layer=1 · optim.lr" in header
    assert "0.001" in first and "0.003" not in first
    assert "0.003" in second and "0.810 ± 0.014 (n=2)" in second
    caption = describe(spec)
    assert "selection is on validation" in caption and "never selected on" in caption
    assert "optim.lr:chosen" in summarise(_trials(), spec).columns


def test_a_cell_without_any_validation_value_is_missing_not_dropped():
    trials = _trials()
    trials.loc[trials["model.d_model"] == 128, VAL] = float("nan")
    spec = TableSpec(rows=("model.d_model",), values=(TEST,), select=Selection(("optim.lr",), VAL))
    lines = to_markdown(build_table(trials, spec), spec).splitlines()
    assert lines[3].replace(" ", "") == "|128|—|—|"


def test_without_row_keys_selects_over_everything():
    spec = TableSpec(values=(TEST,), select=Selection(("optim.lr", "model.d_model"), VAL))
    table = build_table(_trials(), spec)
    assert table.loc["all", ("model.d_model", "chosen")] == 64  # tie on mean: first in order
    assert table.loc["all", (TEST, "n")] == 4


@pytest.mark.parametrize(
    ("select", "message"),
    [
        ({"over": ["optim.lr"], "by": TEST}, r"^table\.select\.by: 'test/exact_match' is a held"),
        ({"over": ["optim.lr"], "by": "ood/loss"}, r"^table\.select\.by: 'ood/loss' is a held"),
        ({"over": ["optim.lr"], "by": "longer/exact_match"}, r"^table\.select\.by: .*held"),
        ({"over": [], "by": VAL}, r"^table\.select\.over: must name at least one key"),
        ({"over": ["optim.lr"]}, r"^table\.select\.by: missing"),
        ({"over": ["optim.lr"], "by": VAL, "mode": "up"}, r"^table\.select\.mode: .*'up'"),
        ({"over": ["optim.lr"], "by": VAL, "moed": "max"}, r"^table\.select\.moed: unknown key"),
        ({"over": ["model.d_model"], "by": VAL}, r"^table\.select\.over: 'model\.d_model' is"),
        ("optim.lr", r"^table\.select: expected a mapping"),
    ],
)
def test_select_errors_name_the_field_and_value(select, message):
    with pytest.raises(ValueError, match=message) as info:
        table_specs_from_block({"rows": ["model.d_model"], "select": select})
    assert "\n" not in str(info.value)


def test_missing_select_column_is_a_value_error():
    spec = TableSpec(rows=("model.d_model",), values=(TEST,), select=Selection(("x.y",), VAL))
    with pytest.raises(ValueError, match=r"no column 'x\.y'"):
        build_table(_trials(), spec)


# ---- the sweep's best trial (issue 19): one place picks it, on validation, ties broken ----


def _ranked(val, loss, ids=None) -> pd.DataFrame:
    n = len(val)
    return pd.DataFrame(
        {
            "trial_id": ids or [f"t_{i:05d}" for i in range(n)],
            "run_id": [f"r{i}" for i in range(n)],
            "model.d_model": [16 * (i + 1) for i in range(n)],
            VAL: val,
            "val/loss": loss,
            TEST: [0.9 + 0.01 * i for i in range(n)],
        }
    )


@pytest.mark.parametrize(
    ("val", "loss", "ids", "expected"),
    [
        ([0.9, 1.0, 1.0], [0.3, 0.2, 0.1], None, "t_00002"),  # tie on val: lower val/loss
        ([1.0, 1.0, 0.5], [0.1, 0.1, 0.0], ["t_00009", "t_00003", "t_00001"], "t_00003"),
        ([1.0, 1.0], [float("nan"), 0.2], None, "t_00001"),  # a reported loss beats none
        ([float("nan"), 0.4, 0.4], [0.0, 0.5, 0.5], None, "t_00001"),  # NaN never chosen
    ],
)
def test_best_trial_breaks_ties_on_val_loss_then_trial_order(val, loss, ids, expected):
    from sweeps.runtime.report import best_trial

    assert best_trial(_ranked(val, loss, ids), VAL, "max")["trial_id"] == expected


def test_best_trial_on_a_loss_takes_the_lowest_and_ties_go_to_the_first_trial():
    from sweeps.runtime.report import best_trial

    trials = _ranked([0.5, 0.9, 0.9], [0.2, 0.1, 0.1], ["t_00002", "t_00001", "t_00000"])
    assert best_trial(trials, "val/loss", "min")["trial_id"] == "t_00000"
    assert best_trial(trials.assign(**{VAL: float("nan")}), VAL, "max") is None


def _seed_trials(steps: dict[str, list[float]], accuracy: float = 0.9) -> pd.DataFrame:
    """Optuna's trials over seeds (rows ``<id>s<seed>``) and each seed's steps to 99 %
    validation exact match in a budget of 1500 steps; NaN: never there (``accuracy``)."""
    rows = [
        {
            "trial_id": f"{config}s{seed}",
            "run_id": f"r{config}{seed}",
            "train.seed": seed,
            "train.threshold": 0.99,
            "train.max_steps": 1500,
            "val/steps_to_threshold": value,
            VAL: accuracy if value != value else 0.995,
            TEST: 0.9 + 0.01 * seed,
        }
        for config, values in steps.items()
        for seed, value in enumerate(values)
    ]
    return pd.DataFrame(rows)


def test_a_config_over_seeds_is_chosen_by_its_worst_seed(tmp_path):
    """The searcher judged each drawn config by its slowest seed (sweeps.spec.seed_trials): the
    sweep's best is the config whose worst seed is fastest, not the luckiest seed, and the
    row shown is that worst seed's, with the config's figure."""
    from sweeps.runtime.report import OVER_SEEDS, _chosen_text, best_trial

    nan = float("nan")
    trials = _seed_trials({"a_00000": [900, 1000, nan], "b_00001": [1200, 1400, 1300]})
    per_seed = best_trial(trials, "val/steps_to_threshold", "min")
    assert per_seed["trial_id"] == "a_00000s0"  # what choosing among seeds would show
    best = best_trial(trials, "val/steps_to_threshold", "min", over_seeds=True)
    assert best["trial_id"] == "b_00001s1"
    assert best["val/steps_to_threshold"] == 1400
    assert best[OVER_SEEDS] == "its config's worst seed"
    assert "steps_to_threshold 1400 (its config's worst seed)" in _chosen_text(
        "val/steps_to_threshold", best
    )
    # a seed short of the threshold counts its budget plus the share it missed: 1500 * 1.1
    slow = _seed_trials({"b_00000": [nan, nan, nan], "a_00001": [900, nan, nan]}, 0.891)
    slow.loc[slow["trial_id"].str.startswith("b"), VAL] = 0.792  # 1500 * 1.2
    chosen = best_trial(slow, "val/steps_to_threshold", "min", over_seeds=True)
    assert chosen["trial_id"] == "a_00001s1"
    assert chosen["val/steps_to_threshold"] == pytest.approx(1650.0)
    # another metric: the mean over seeds the searcher saw; a config missing a seed's is not
    # chosen; the row shown is the chosen config's worst seed
    accuracy = trials.assign(**{VAL: [0.99, 0.98, 0.97, 0.995, 0.99, nan]})
    best_val = best_trial(accuracy, VAL, "max", over_seeds=True)
    assert best_val["trial_id"] == "a_00000s2"
    assert best_val[VAL] == pytest.approx(0.98) and best_val[OVER_SEEDS] == "its config's mean"


def test_best_trial_line_says_it_was_chosen_on_validation(tmp_path):
    from sweeps.runtime.report import _best_lines, best_trial
    from sweeps.spec.sweep_spec import parse_spec

    raw = {"sweep": {"name": "s"}, "space": {"model.d_model": [16, 32]}}
    trials = _ranked([0.9, 1.0, 1.0], [0.3, 0.2, 0.1]).assign(**{"ood/exact_match": 0.25})
    best = best_trial(trials, VAL, "max")
    first = _best_lines(parse_spec(raw), best, ["model.d_model"], "sqlite:///x.db", tmp_path)
    assert first.splitlines()[0] == (
        "best trial:     t_00002 (chosen on val/exact_match 1; ood/exact_match 0.25, "
        "test/exact_match 0.92; model.d_model=48), run r2"
    )


@pytest.mark.parametrize(
    ("metric", "held_out"),
    [
        ("test/exact_match", True),
        ("longer/exact_match/len_9", True),
        ("carry/exact_match", True),
        ("cascade/exact_match", True),
        ("cascade/digit_accuracy/3", True),
        ("longer_val/exact_match", False),  # a validation set of longer operands
        ("val/exact_match", False),
        ("best/val/exact_match", False),
    ],
)
def test_held_out_sets_are_whole_namespaces(metric, held_out):
    from sweeps.spec.metrics import is_held_out

    assert is_held_out(metric) is held_out


def test_digit_accuracy_is_a_fraction_to_maximise():
    from sweeps.spec.metrics import is_fraction, metric_direction

    assert is_fraction("val/digit_accuracy/0")
    assert metric_direction("test/digit_accuracy/4") == "max"

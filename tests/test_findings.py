"""The findings report: claim checks on hand-made trials, and the command on a tiny real sweep."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from matplotlib import image
from mlflow import MlflowClient
from mlflow.entities import Metric, Param
from sweep_procs import fresh_store

from sweeps import findings
from sweeps.analysis import findings_report, plots
from sweeps.analysis.claims import CLAIMS
from sweeps.analysis.store import STATE_FILE


def test_grokking_check_says_which_decay_groks():
    trials = pd.DataFrame(
        {
            "optim.weight_decay": [0.0, 0.0, 1.0, 1.0],
            "val/exact_match": [0.02, 0.03, 0.97, 0.99],
            "val/steps_to_threshold": [None, None, 1500.0, 2500.0],
        }
    )
    sentences = CLAIMS["grokking"].check({"main": trials})
    assert sentences[0].startswith("weight decay 0: 0 of 2 seeds grok")
    assert "2 of 2 seeds grok" in sentences[1]
    assert "2,000 ± 707" in sentences[1]
    assert sentences[-1].endswith("**met**.")


def test_grokking_check_fails_when_a_seed_does_not_grok():
    trials = pd.DataFrame({"optim.weight_decay": [0.0, 1.0], "val/exact_match": [0.0, 0.5]})
    assert CLAIMS["grokking"].check({"main": trials})[-1].endswith("**not met**.")


def test_size_ladder_chooses_the_best_cell_on_validation_and_reports_its_test():
    trials = pd.DataFrame(
        {
            "n_params": [77_000, 250_000, 1_400_000],
            "val/exact_match": [0.1, 0.6, 0.99],
            # the largest test figure sits in a cell validation did not choose
            "test/exact_match": [0.1, 0.995, 0.97],
            "data.test_size": 2000,
        }
    )
    sentences = CLAIMS["model_size"].check({"main": trials})
    assert sentences[0] == (
        "Best cell, chosen on validation (99.0 % val/exact_match): 1,400,000 parameters, "
        "97.0 % test exact match (bar >= 99.0 %: **not met**)."
    )
    assert "(250,000 parameters) reaches 99.5 %, against the seed's 37.6 %" in sentences[2]
    without_val = CLAIMS["model_size"].check({"main": trials.drop(columns="val/exact_match")})
    assert without_val[0] == "Best cell: **not measured** (no val/exact_match to choose it on)."


@pytest.mark.parametrize(
    ("test_size", "middle", "verdict"),
    [
        (2000, 0.930, "**met**."),  # 0.8 points down, 2 standard errors are 1.6 points
        (2000, 0.915, "**not met**."),  # 2.3 points down: outside the resolution
        (200, 0.915, "**met**."),  # the same dip on a tenth of the test set: inside it
        (200, 0.850, "**not met**."),  # 8.8 points down, 2 standard errors are 6.1 points
    ],
)
def test_size_ladder_allows_a_dip_within_two_standard_errors_of_the_test_set(
    test_size, middle, verdict
):
    trials = pd.DataFrame(
        {
            "n_params": [1_000, 2_000, 3_000],
            "test/exact_match": [0.938, middle, 0.99],
            "data.test_size": test_size,
        }
    )
    line = CLAIMS["model_size"].check({"main": trials})[1]
    assert f"more than 2 standard errors of a test set of {test_size:,}: {verdict}" in line


def test_size_ladder_without_a_test_set_size_is_not_measured():
    trials = pd.DataFrame({"n_params": [1_000, 2_000], "test/exact_match": [0.5, 0.9]})
    assert (
        CLAIMS["model_size"]
        .check({"main": trials})[1]
        .endswith("**not measured** (no single data.test_size to take the standard error from).")
    )


def test_width_vs_depth_chooses_the_shape_on_validation():
    trials = pd.DataFrame(
        {
            "model.d_model": [32, 32, 64, 64],
            "model.n_layer": [1, 2, 1, 2],
            "n_params": [1_000, 2_000, 4_000, 8_000],
            "val/exact_match": [0.2, 0.9, 0.5, 0.8],
            "test/exact_match": [0.2, 0.85, 0.5, 0.95],
            "data.test_size": 1000,
        }
    )
    sentences = CLAIMS["width_vs_depth"].check({"main": trials})
    assert sentences[-1] == (
        "The best shape, chosen on validation (90.0 %), is 32 wide x 2 deep: "
        "85.0 % test exact match."
    )


@pytest.mark.parametrize(
    ("decays", "val", "missing"),
    [
        ([0.1, 0.1, 1.0, 1.0], [0.97, 0.99, 0.98, 0.99], "no weight decay 0 group"),
        ([0.0, 0.0], [0.01, 0.02], "no weight decay > 0 group"),
        ([0.0, 1.0], None, "no weight decay > 0 and no weight decay 0 group"),
    ],
)
def test_grokking_contrast_without_one_side_is_not_measured(decays, val, missing):
    trials = pd.DataFrame({"optim.weight_decay": decays})
    if val is not None:
        trials["val/exact_match"] = val
    last = CLAIMS["grokking"].check({"main": trials})[-1]
    assert last == (
        "Every seed with weight decay groks and none without, in the same budget: "
        f"**not measured** ({missing} measured)."
    )


def _arms(*rows: tuple[str, float, float | None]) -> pd.DataFrame:
    """Trials of abacus_length: (model.position, longer/exact_match, longer_val/exact_match)."""
    frame = pd.DataFrame(rows, columns=["model.position", "longer/exact_match", "longer_val"])
    frame = frame.rename(columns={"longer_val": "longer_val/exact_match"})
    return frame.dropna(axis=1, how="all")


def test_abacus_chooses_the_arm_on_validation_lengths_and_reports_the_others():
    trials = _arms(
        ("learned", 0.0, 0.01), ("abacus", 0.97, 0.5), ("abacus_bias", 0.93, 0.99)
    )  # fmt: skip
    sentences = CLAIMS["abacus_length"].check({"main": trials})
    assert "abacus: 97.0 % on longer operands (validation lengths 50.0 %)." in sentences
    assert sentences[-1] == (
        "The best arm, chosen on validation lengths (longer_val/exact_match 99.0 %; "
        "abacus_bias's reach, window and values were chosen on them too), is abacus_bias: 93.0 % "
        "on the reported longer lengths (longer/); >= 99.0 % there on every one of at least 3 "
        "seeds: **not met** (0 of 1)."
    )


def test_abacus_names_the_relative_values_arm_apart_from_the_window_alone():
    trials = _arms(("abacus_bias", 0.97, 0.99), ("abacus_bias", 1.0, 1.0))
    trials["model.abacus_bias_window"] = [True, True]
    trials["model.abacus_bias_values"] = [False, True]
    sentences = CLAIMS["abacus_length"].check({"main": trials})
    assert "abacus_bias_window: 97.0 % on longer operands (validation lengths 99.0 %)." in sentences
    assert any(s.startswith("abacus_bias_window_values: 100.0 % on longer") for s in sentences)
    bars = [s for s in sentences if s.startswith("The Abacus index as an attention bias")]
    assert [b.split(": ")[-1] for b in bars] == ["**met**.", "**met**."]  # each window arm's bar
    assert "(abacus_bias_window_values)" in bars[1]


def test_abacus_tells_the_window_arm_apart_and_needs_every_one_of_three_seeds():
    trials = _arms(
        ("abacus_bias", 0.8, 0.97), ("abacus_bias", 0.995, 1.0), ("abacus_bias", 0.993, 1.0),
        ("abacus_bias", 0.6, 0.96),
    )  # fmt: skip
    trials["model.abacus_bias_window"] = [False, True, True, False]
    sentences = CLAIMS["abacus_length"].check({"main": trials})
    assert (
        "abacus_bias_window: 99.4 % on longer operands (validation lengths 100.0 %)." in sentences
    )
    assert sentences[-1].endswith("every one of at least 3 seeds: **not met** (2 of 2).")
    trials.loc[4] = ["abacus_bias", 0.991, 0.999, True]
    sentences = CLAIMS["abacus_length"].check({"main": trials})
    assert sentences[-1].endswith("every one of at least 3 seeds: **met** (3 of 3).")
    trials.loc[4, "longer/exact_match"] = 0.95
    sentences = CLAIMS["abacus_length"].check({"main": trials})
    assert sentences[-1].endswith("every one of at least 3 seeds: **not met** (2 of 3).")


def test_abacus_counts_the_seeds_that_solve_longer_lengths_and_their_ratios():
    trials = _arms(
        ("abacus_bias", 0.995, 1.0), ("abacus_bias", 0.77, 1.0), ("abacus", 0.0, 0.0),
        ("abacus", 0.0, 0.0),
    )  # fmt: skip
    sentences = CLAIMS["abacus_length"].check({"main": trials})
    assert (
        "Seeds reaching >= 99.0 % on the reported longer lengths: abacus 0 of 2, "
        "abacus_bias 1 of 2."
    ) in sentences
    assert not any(s.startswith("Extrapolation ratio") for s in sentences)  # no grid measured
    trials["lengths/extrapolation_ratio"] = [2.0, 1.5, 0.0, 0.125]
    sentences = CLAIMS["abacus_length"].check({"main": trials})
    assert sentences[-2].endswith("per seed: abacus 0 / 0.125; abacus_bias 2 / 1.5.")


def test_abacus_says_not_measured_for_an_arm_that_did_not_run_and_an_unvalidated_choice():
    sentences = CLAIMS["abacus_length"].check(
        {"main": _arms(("learned", 0.0, None), ("abacus", 0.95, None))}
    )
    assert (
        "The Abacus index as an attention bias (abacus_bias) reaches >= 90.0 % on longer "
        "operands: **not measured** (the arm did not run)."
    ) in sentences
    assert "Learned positions stay near 0 (< 5.0 %): **met**." in sentences
    assert sentences[-1].startswith(
        "The best arm: **not measured** (no longer_val/exact_match): neither the arm nor "
        "abacus_bias's gain and reach could be chosen"
    )


def test_multi_op_check_names_the_hardest_operation_and_the_weighting_effect():
    names = [f"test/exact_match/{op}" for op in ["add", "sub", "mul", "floordiv", "mod"]]
    uniform = ["[1, 1, 1, 1, 1]", 1.0, 0.4, 0.0, 0.8, 0.5]
    hard = ["[1, 1, 2, 2, 2]", 0.9, 0.1, 0.2, 0.8, 0.6]
    trials = pd.DataFrame([uniform, hard], columns=["task.op_weights", *names])
    sentences = CLAIMS["multi_op"].check({"main": trials})
    assert sentences[0].endswith("hardest: mul.") and sentences[1].endswith("hardest: sub.")
    assert sentences[2] == (
        "Weights [1, 1, 2, 2, 2] against [1, 1, 1, 1, 1], in points: "
        "add -10.0, sub -30.0, mul +20.0, floordiv +0.0, mod +10.0."
    )


def test_optuna_check_reads_a_stopped_trial_by_its_last_validation():
    main = pd.DataFrame(
        {"best/val/exact_match": [None, None], "val/exact_match": [0.0, 0.9], "steps": [150, 900]}
    )
    grid = pd.DataFrame({"best/val/exact_match": [0.5, 0.905], "steps": [3000, 3000]})
    sentences = CLAIMS["optuna_lr"].check({"main": main, "optuna_lr_grid": grid})
    assert sentences[0].startswith("Optuna + ASHA: best 90.0 % in 1,050 training steps")
    assert sentences[1] == "Within 0.01 of the grid: **met**; at most half its steps: **met**."


@pytest.mark.parametrize(
    ("dropped", "per_op", "hardest"),
    [
        (["mul"], "add 100.0 %, sub 40.0 %, mul not measured, floordiv 80.0 %, mod 50.0 %", "sub"),
        (["add", "sub", "mul", "floordiv", "mod"], ", ".join(
            f"{op} not measured" for op in ["add", "sub", "mul", "floordiv", "mod"]
        ), "not measured"),
    ],
)  # fmt: skip
def test_multi_op_check_says_not_measured_for_a_missing_operation(dropped, per_op, hardest):
    names = [f"test/exact_match/{op}" for op in ["add", "sub", "mul", "floordiv", "mod"]]
    uniform = ["[1, 1, 1, 1, 1]", 1.0, 0.4, 0.0, 0.8, 0.5]
    hard = ["[1, 1, 2, 2, 2]", 0.9, 0.1, 0.2, 0.8, 0.6]
    trials = pd.DataFrame([uniform, hard], columns=["task.op_weights", *names])
    trials = trials.drop(columns=[f"test/exact_match/{op}" for op in dropped])
    sentences = CLAIMS["multi_op"].check({"main": trials})
    assert sentences[0] == f"op weights [1, 1, 1, 1, 1]: {per_op}; hardest: {hardest}."
    assert all(f"{op} not measured" in sentences[2] for op in dropped)


def test_addition_k4_reports_the_cascade_set_per_format():
    trials = pd.DataFrame(
        {"format.name": ["plain", "reversed"], "cascade/exact_match": [0.83, 1.0]}
    )
    sentences = CLAIMS["addition_k4"].check({"main": trials})
    assert sum("cascade set" in s for s in sentences) == 2
    assert any(
        s.startswith("plain answers on the cascade set") and "83.0 %" in s for s in sentences
    )


def test_addition_k4_bar_without_a_test_figure_is_not_measured():
    trials = pd.DataFrame({"format.name": ["plain"], "val/exact_match": [0.99]})
    sentences = CLAIMS["addition_k4"].check({"main": trials})
    assert sentences[0] == (
        "plain answers: in-distribution test not measured (bar >= 99 %: **not measured**)."
    )


@pytest.mark.slow
def test_findings_command_runs_a_space_and_rebuilds_the_report_from_mlflow(tmp_path):
    uri = fresh_store(tmp_path / "mlflow.db")
    common = ["smoke", "--results", str(tmp_path / "results"), "--tracking-uri", uri]
    out = tmp_path / "docs"
    tiny = ["--set", "base.train.max_steps=10", "--set", "space.model.d_model=[16]"]
    assert findings.main([*common, "--run", *tiny, "--out", str(out)]) == 0
    report = (out / "findings.md").read_text()
    assert "## smoke" in report
    # Running one space leaves the other spaces' sections in the report (here: not run yet).
    assert "## grokking" in report and "## abacus_length" in report
    assert (
        "Command: `python -m sweeps.run search_spaces/smoke.yaml --set base.train.max_steps=10"
        in report
    )
    assert "| 16 " in report and "val/exact_match" in report
    # the section's plot is the sweep's figure, written at the report's dpi: a marker at the
    # cell's parameters and mean validation exact match over its two seeds
    trials, _, _, figure = findings_report.collect_sweep("smoke", tmp_path / "results", uri)
    height, width = image.imread(out / "findings" / "smoke.png").shape[:2]
    assert (width, height) == tuple(np.round(figure.get_size_inches() * 110).astype(int))
    ax = figure.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("parameters (n_params)", "val/exact_match")
    (marker,) = [line for line in ax.get_lines() if line.get_marker() in plots.MARKERS]
    cell = (trials["n_params"].mean(), trials["val/exact_match"].mean())
    np.testing.assert_allclose(marker.get_xydata(), [cell])
    # Without --run the same report comes back from MLflow and the run record alone.
    again = tmp_path / "again"
    assert findings.main([*common, "--out", str(again)]) == 0
    assert (again / "findings.md").read_text() == report


def test_findings_names_a_missing_space(tmp_path, capsys):
    # A store holding another space's runs but no state file for them: the misspelt name is
    # what is refused, before any space is read or run.
    uri, _, _ = _two_parents(tmp_path)
    capsys.readouterr()  # MLflow's own set-up log
    args = ["smoke", "nonesuch", "--run", "--results", str(tmp_path / "results")]
    code = findings.main([*args, "--tracking-uri", uri, "--out", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert err == "error: space 'nonesuch': no file search_spaces/nonesuch.yaml\n"
    assert not (tmp_path / "results").exists()  # nothing ran


def test_batch_lr_check_tells_a_target_stop_from_never():
    main = pd.DataFrame(
        {
            "train.batch_size": [512, 1024, 128],
            "optim.lr": [0.004, 0.0057, 0.002],
            "train/steps_to_100pct": [None, 1800, None],
            "val/steps_to_threshold": [4000, 1800, None],
            "stopped_reason": ["target_reached", "target_reached", "max_steps"],
        }
    )
    sentences = CLAIMS["batch_lr"].check({"main": main})
    assert "batch 128 (lr 0.002): threshold never, 100 % train never" in sentences[0]
    assert (
        "batch 512 (lr 0.004): threshold at 4,000, 100 % train not before the validation"
        in (sentences[0])
    )
    assert sentences[1] == "Every batch size reaches the threshold: **not met**."


def _two_parents(tmp_path) -> tuple[str, str, str]:
    """A real SQLite store holding two parent runs of sweep "smoke", one trial each (d_model
    32 in the older, 64 in the newer); (tracking URI, older id, newer id)."""
    uri = fresh_store(tmp_path / "mlflow.db")
    client = MlflowClient(uri)
    experiment = client.create_experiment("smoke", artifact_location=str(tmp_path / "art"))
    ids = []
    for start, d_model in ((1_000, 32), (2_000, 64)):
        parent = client.create_run(experiment, start, {"sweep.role": "parent"}).info.run_id
        tags = {"mlflow.parentRunId": parent, "sweep.trial_id": "t0000", "sweep.role": "trial",
                "sweep.status": "TERMINATED", "sweep.stopped_reason": "max_steps"}  # fmt: skip
        child = client.create_run(experiment, start + 1, tags).info.run_id
        client.log_batch(
            child,
            metrics=[Metric("test/exact_match", 0.5, start, 10)],
            params=[Param("model.d_model", str(d_model))],
        )
        for run in (child, parent):
            client.set_terminated(run, "FINISHED", start + 5)
        ids.append(parent)
    return uri, ids[0], ids[1]


def _state(results, parent_id: str) -> None:
    (results / "smoke").mkdir(parents=True)
    (results / "smoke" / STATE_FILE).write_text(json.dumps({"parent_run_id": parent_id}))


def test_report_reads_the_parent_the_state_file_names_not_the_newest(tmp_path):
    uri, older, _ = _two_parents(tmp_path)
    _state(tmp_path / "results", older)
    trials, *_ = findings_report.collect_sweep("smoke", tmp_path / "results", uri)
    assert trials["model.d_model"].tolist() == [32]


@pytest.mark.parametrize("state", [None, "0123456789abcdef"])
def test_report_refuses_to_guess_a_parent(tmp_path, capsys, state):
    uri, _, _ = _two_parents(tmp_path)
    results = tmp_path / "results"
    if state is not None:
        _state(results, state)
    args = ["smoke", "--results", str(results), "--tracking-uri", uri, "--out", str(tmp_path)]
    assert findings.main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (err,) = [line for line in err.splitlines() if line.startswith("error: ")]  # MLflow logs too
    if state is None:
        assert f"no {results / 'smoke' / STATE_FILE}, so which parent run" in err
    else:
        assert f"names no MLflow run with id '{state}'" in err
    assert not (tmp_path / "findings.md").exists()


def test_report_says_its_bests_are_chosen_on_validation(tmp_path):
    uri, older, _ = _two_parents(tmp_path)
    _state(tmp_path / "results", older)
    args = ["smoke", "--results", str(tmp_path / "results"), "--tracking-uri", uri]
    assert findings.main([*args, "--out", str(tmp_path / "docs")]) == 0
    report = (tmp_path / "docs" / "findings.md").read_text()
    assert "Every best cell, shape or arm is chosen on validation (val/exact_match" in report
    assert f"(parent run {older})" in report  # the state file's parent, not the newest


def test_a_space_not_in_this_store_keeps_its_earlier_section_marked_as_kept(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    earlier = (
        "# Findings\n\nheader\n\n## grokking\n\n**Seed 003, claimed:** groks.\n\n"
        "- weight decay 1: 3 of 3 seeds grok.\n\nMeasured: 596 s.\n\n"
        "## batch_lr\n\n**Seed 003, claimed:** x.\n\n_Not run yet: `...`._\n"
    )
    (docs / "findings.md").write_text(earlier)
    args = ["--results", str(tmp_path / "results"), "--tracking-uri", f"sqlite:///{tmp_path}/m.db"]
    assert findings.main([*args, "--out", str(docs)]) == 0
    report = (docs / "findings.md").read_text()
    grokking = report.split("\n## grokking\n")[1].split("\n## ")[0]
    assert "- weight decay 1: 3 of 3 seeds grok." in grokking  # the earlier figures, unchanged
    assert "Measured: 596 s." in grokking
    assert grokking.count("_Kept from the previous report") == 1
    # A section that was never measured stays "not run", and keeping twice marks once.
    assert "_Kept" not in report.split("\n## batch_lr\n")[1].split("\n## ")[0]
    assert findings.main([*args, "--out", str(docs)]) == 0
    assert (docs / "findings.md").read_text().count("_Kept from the previous report") == 1


def test_multi_op_check_reads_the_size_ladder_and_the_one_model_bar():
    names = [f"test/exact_match/{op}" for op in ["add", "sub", "mul", "floordiv", "mod"]]
    rows = [
        [30_000, 0.5, 1.0, 0.6, 0.0, 0.9, 0.8],
        [100_000, 0.8, 1.0, 0.995, 0.55, 0.99, 0.991],
        [400_000, 0.7, 1.0, 0.999, 0.9, 0.999, 0.999],  # better on test, worse on validation
    ]
    trials = pd.DataFrame(rows, columns=["n_params", "val/exact_match", *names])
    sentences = CLAIMS["multi_op"].check({"main": trials})
    assert sentences[0] == (
        "30,000 parameters: add 100.0 %, sub 60.0 %, mul 0.0 %, floordiv 90.0 %, mod 80.0 %."
    )
    assert sentences[3] == "* reaches 50.0 % first at 100,000 parameters."
    # chosen on validation: the 100K model, whose test figures all clear 99 %
    assert sentences[4].startswith("The best trial on validation (100,000 parameters)")
    assert "each of + - // % >= 99.0 %: **met**." in sentences[4]
    assert sentences[4].endswith("With * (55.0 %), all five >= 99.0 %: **not met**.")
    trials.loc[1, "test/exact_match/sub"] = 0.98
    trials["test/exact_match/mul"] = 0.1
    sentences = CLAIMS["multi_op"].check({"main": trials})
    assert sentences[3] == "* stays below 50.0 % up to 400,000 parameters (the ladder's top)."
    assert "each of + - // % >= 99.0 %: **not met**." in sentences[4]
    trials["test/exact_match/mul"] = 0.995
    trials.loc[1, "test/exact_match/sub"] = 0.995
    sentences = CLAIMS["multi_op"].check({"main": trials})
    assert sentences[4].endswith("With * (99.5 %), all five >= 99.0 %: **met**.")
    assert sentences[5] == "With format.mul_trace (the companion sweep multi_op_mul): **not run**."


def test_multi_op_check_reads_the_mul_trace_companion_against_the_all_five_bar():
    """The companion's best trial on validation against 99 % on each of the five, with what it
    took (steps, training seconds)."""
    names = [f"test/exact_match/{op}" for op in ["add", "sub", "mul", "floordiv", "mod"]]
    ladder = pd.DataFrame(
        [[30_000, 0.5, 1.0, 0.6, 0.0, 0.9, 0.8], [400_000, 0.9, 1.0, 0.999, 0.06, 0.999, 0.999]],
        columns=["n_params", "val/exact_match", *names],
    )
    companion = pd.DataFrame(
        [[441_344, 1.0, 6000, 1945.0, 1.0, 1.0, 1.0, 0.9967, 1.0]],
        columns=["n_params", "val/exact_match", "steps", "wall_time_s", *names],
    )
    frames = {"main": ladder, "multi_op_mul": companion}
    assert CLAIMS["multi_op"].check(frames)[-1] == (
        "With format.mul_trace (multi_op_mul, 441,344 parameters, 6,000 steps, 1945 s of "
        "training): add 100.0 %, sub 100.0 %, mul 100.0 %, floordiv 99.7 %, mod 100.0 %; "
        "all five >= 99.0 %: **met**."
    )
    companion.loc[0, "test/exact_match/floordiv"] = 0.9867
    assert CLAIMS["multi_op"].check(frames)[-1].endswith("all five >= 99.0 %: **not met**.")


def test_grokfast_check_reads_the_speed_up_against_its_bar():
    """Steps to 95 % validation per arm; met at 5x and more, not met below or when a seed with
    the filter never grokked; an arm cut by its budget makes the ratio a lower bound."""
    trials = pd.DataFrame(
        {
            "optim.grad_filter": ["none"] * 3 + ["ema"] * 3,
            "val/exact_match": [0.99] * 6,
            "val/steps_to_threshold": [2200, None, 2000, 300, 400, 500],
            "steps": [3000, 3200, 2900, 500, 600, 700],
        }
    )
    check = CLAIMS["grokfast"].check
    assert check({"main": trials})[-2].endswith("**met** (at least 6.2x).")
    slower = trials.assign(**{"val/steps_to_threshold": [2200, 2400, 2000, 900, 800, 700]})
    assert check({"main": slower})[-2].endswith("**not met** (2.8x).")
    lost = trials.assign(**{"val/steps_to_threshold": [2200, 2400, 2000, 300, 400, None]})
    assert "**not met** (not every seed grokked" in check({"main": lost})[-2]
    # the paper's own setting, a companion sweep: said after the space's own, or not run
    paper = "In Grokfast's own setting (the companion sweep grokfast_paper)"
    assert check({"main": trials})[-1] == f"{paper}: **not run**."
    both = check({"main": trials, "grokfast_paper": slower})
    assert len(both) == 6 and both[2].endswith("**met** (at least 6.2x).")
    assert both[4].startswith(f"{paper}, grad_filter ema: 3 of 3 seeds reach 95 %")
    assert both[-1] == f"{paper}, at least 5x fewer steps to 95 % validation with the filter: " + (
        "**not met** (2.8x)."
    )


def test_grokfast_check_says_why_from_the_steps_to_fit_the_training_pairs():
    """The reason the bar is missed, measured: the plateau without the filter (95 % validation
    after every training pair is right), and whether the filter fitted later or not at all."""
    trials = pd.DataFrame(
        {
            "optim.grad_filter": ["none"] * 3 + ["ema"] * 3,
            "val/exact_match": [1.0] * 3 + [0.02] * 3,
            "val/steps_to_threshold": [2200, 2400, 2200, None, None, None],
            "train/steps_to_100pct": [400, 600, 500, 2600, None, None],
            "steps": [2200, 2400, 2200, 3200, 3200, 3200],
        }
    )
    check = CLAIMS["grokfast"].check({"main": trials})
    assert check[2].endswith("**not met** (not every seed grokked with the filter).")
    assert check[3] == (
        "Why, measured: without the filter 95 % validation came 1,767 steps after every training "
        "pair was right (step 500, mean over 3 seeds): a plateau for the filter to shorten."
    )
    assert check[4] == (
        "With the filter 1 of 3 seeds got every training pair right (step 2,600), against 3 of 3 "
        "without: the filter slowed fitting itself."
    )
    # the paper's setting: generalisation comes as the pairs are fitted, nothing to shorten
    paper = trials.assign(**{"val/steps_to_threshold": [450, 650, 600, None, None, None]})
    why = next(s for s in CLAIMS["grokfast"].check({"main": paper}) if s.startswith("Why"))
    assert why.endswith(
        "came 67 steps after every training pair was right (step 500, mean over 3 seeds): "
        "little plateau for the filter to shorten."
    )


def test_abacus_reports_the_probe_per_seed_and_judges_10x_on_the_best_global_arm():
    trials = _arms(*[("abacus_bias", 1.0, 1.0)] * 6)
    trials["model.abacus_bias_window"] = [True] * 3 + [False] * 3
    trials["probe/extrapolation_ratio"] = [25.0, 25.0, 12.0, 10.0, 12.5, 6.0]
    trials["probe/broke_at"] = [0.0, 0.0, 128.0, 100.0, 128.0, 64.0]
    trials["probe/edge_ratio"] = [0.0, 0.0, 0.0, 10.0, 12.5, 6.0]
    sentences = CLAIMS["abacus_length"].check({"main": trials})
    local = next(s for s in sentences if s.startswith("Length probe, abacus_bias_window"))
    assert "(locality prior" in local and "25 (held to the probe's end)" in local
    assert "12 (broke at 128 digits)" in local
    glob = next(s for s in sentences if s.startswith("Length probe, abacus_bias (global"))
    assert "carry edge cases right up to 10 / 12.5 / 6x" in glob
    assert sentences[-1].startswith("An arm with global attention holds >= 99.0 % at 10x")
    assert sentences[-1].endswith(
        "**not met** (the best, abacus_bias, chosen on validation: 10 / 12.5 / 6)."
    )
    trials.loc[5, "probe/extrapolation_ratio"] = 16.0
    sentences = CLAIMS["abacus_length"].check({"main": trials})
    assert "**met**" in sentences[-1]

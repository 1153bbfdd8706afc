"""Learning phases (sweeps.analysis.phases): the rule on synthetic curves, one per phase, the
majority over seeds, the phase map and the findings check on hand-built frames; then the
shipped phase space at a tiny size, packed, through the real command (Ray, MLflow)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient
from sweep_procs import ROOT, children, fresh_store, start_sweep

from sweeps.analysis.claims_training import grokking_phases
from sweeps.analysis.phases import (
    COMPREHENSION,
    CONFUSION,
    GROKKING,
    MEMORISATION,
    PHASES,
    classify_phase,
    first_step_at,
    majority_phase,
    with_phase,
)
from sweeps.analysis.plots import plots_for

STEPS = np.arange(0, 2001, 100)


def _curve(jump_at: float | None, low: float = 0.02) -> np.ndarray:
    """Exact match at STEPS: ``low`` until ``jump_at``, 1 from there (never without one)."""
    jump = math.inf if jump_at is None else jump_at
    return np.where(jump <= STEPS, 1.0, low)


# (phase, the step training jumps to 1, the step validation does)
SYNTHETIC = [
    (COMPREHENSION, 300, 500),  # validation right behind training
    (GROKKING, 300, 1500),  # validation long after training is fitted
    (MEMORISATION, 200, None),  # training fitted, validation never
    (CONFUSION, None, None),  # not even training
]


def _sweep(cases=SYNTHETIC, threshold: float = 0.9) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Trials and curves as MLflow gives them back: ``val/steps_to_threshold`` is omitted
    (NaN) where validation never reached the threshold."""
    rows, curves = [], []
    for i, (_, train_jump, val_jump) in enumerate(cases):
        trial = f"t_{i:05d}"
        val = _curve(val_jump)
        reached = STEPS[val >= threshold]
        rows.append(
            {
                "trial_id": trial,
                "status": "TERMINATED",
                "optim.lr": [1e-3, 3e-3][i % 2],
                "optim.weight_decay": [0.0, 1.0][i // 2 % 2],
                "train.threshold": threshold,
                "val/steps_to_threshold": reached[0] if len(reached) else math.nan,
            }
        )
        for metric, values in (("train/exact_match", _curve(train_jump)), ("val/exact_match", val)):
            pairs = zip(STEPS, values, strict=True)
            curves += [(trial, metric, int(s), float(v)) for s, v in pairs]
    return pd.DataFrame(rows), pd.DataFrame(curves, columns=["trial_id", "metric", "step", "value"])


def test_each_synthetic_curve_gets_its_phase():
    trials, curves = _sweep()
    labelled = with_phase(trials, curves)
    assert labelled["phase"].tolist() == [case[0] for case in SYNTHETIC]
    assert labelled["train/steps_to_threshold"].tolist()[:3] == [300, 300, 200]
    assert math.isnan(labelled["train/steps_to_threshold"].iloc[3])


@pytest.mark.parametrize(
    ("train_step", "val_step", "phase"),
    [
        (400, 800, COMPREHENSION),  # exactly twice as long: not yet grokking
        (400, 900, GROKKING),
        (400, 200, COMPREHENSION),  # validation first
        (0, 100, GROKKING),  # a threshold at step 0 counts as one step
        (400, None, MEMORISATION),
        (400, math.nan, MEMORISATION),
        (None, 300, CONFUSION),  # validation without training is not learning the task
    ],
)
def test_the_rule_at_its_edges(train_step, val_step, phase):
    assert classify_phase(train_step, val_step) == phase


def test_the_threshold_comes_from_each_trial():
    history = [(0, 0.1), (100, 0.85), (200, 0.97)]
    assert first_step_at(history, 0.8) == 100
    assert first_step_at(history, 0.95) == 200
    assert math.isnan(first_step_at(history, 0.99))
    trials, curves = _sweep([(GROKKING, 300, 1500)], threshold=1.01)  # unreachable
    assert with_phase(trials, curves)["phase"].tolist() == [CONFUSION]


def test_a_trial_cut_short_or_without_curves_has_no_phase():
    trials, curves = _sweep(SYNTHETIC[2:])  # memorisation, confusion
    trials.loc[0, "status"] = "ERROR"
    labelled = with_phase(trials, curves[curves["trial_id"] != "t_00001"])
    assert labelled["phase"].isna().all()
    # stopped before its budget: "never" is a guess, but thresholds it reached still count
    trials, curves = _sweep(SYNTHETIC)
    trials["stopped_reason"] = ["scheduler", "early_stopping", "time_budget", "diverged"]
    phases = with_phase(trials, curves)["phase"]
    assert phases.fillna("none").tolist() == [COMPREHENSION, GROKKING, "none", CONFUSION]
    no_train_curves = curves[curves["metric"] != "train/exact_match"]
    assert "phase" not in with_phase(trials, no_train_curves).columns


def test_majority_over_seeds_and_its_ties():
    assert majority_phase([GROKKING, COMPREHENSION, GROKKING]) == (GROKKING, 2)
    assert majority_phase([MEMORISATION, GROKKING, None]) == (GROKKING, 1)  # PHASES order
    assert majority_phase([None, math.nan]) == (None, 0)


def test_the_phase_map_colours_every_cell_by_its_phase():
    trials, curves = _sweep()
    labelled = with_phase(trials, curves)
    figures = plots_for(labelled, curves, "val/exact_match")
    assert "phase_map" in figures
    ax = figures["phase_map"].axes[0]
    codes = ax.images[0].get_array()
    # rows: weight decay 0, 1; columns: lr 1e-3, 3e-3 (SYNTHETIC in that order)
    assert codes.tolist() == [[0, 1], [2, 3]]
    assert ax.get_title() == "learning phase (train / val: steps to 90% exact match)"
    texts = [t.get_text() for t in ax.texts]
    assert "grokking\ntrain 300\nval 1,500" in texts
    assert "confusion\ntrain —\nval —" in texts
    assert "phase_map" not in plots_for(labelled.drop(columns="phase"), curves)
    drawn = labelled.assign(**{"optim.lr": np.geomspace(1e-4, 1e-2, 4)})
    assert "phase_map" in plots_for(drawn, curves)
    drawn = pd.concat([drawn] * 3, ignore_index=True)  # a random search: a new lr per trial
    drawn["optim.lr"] = np.geomspace(1e-4, 1e-2, len(drawn))
    assert "phase_map" not in plots_for(drawn, curves)
    seeds = pd.concat([labelled, labelled.assign(phase=COMPREHENSION)], ignore_index=True)
    seeded = plots_for(seeds, curves, "val/exact_match")["phase_map"].axes[0]
    # a tie of seeds goes to the phase first in PHASES
    assert "comprehension 1/2\ntrain 300\nval 1,500" in [t.get_text() for t in seeded.texts]


def test_the_findings_check_lists_the_phases_it_found():
    trials, curves = _sweep()
    lines = grokking_phases({"main": with_phase(trials, curves)})
    assert "weight decay 1: lr 0.001 memorisation, lr 0.003 confusion" in lines[0]
    assert lines[1] == "Grid points by phase: " + ", ".join(f"{p} 1" for p in PHASES) + "."
    assert lines[2] == "All four phases appear: **met**."
    three = with_phase(*_sweep(SYNTHETIC[:3]))
    assert grokking_phases({"main": three})[2] == "All four phases appear: **not met**."
    assert "not measured" in grokking_phases({"main": trials})[0]


def test_the_goldilocks_check_reads_each_learning_rate_by_growing_weight_decay():
    # one learning rate, weight decay growing: memorisation, grokking, confusion in order
    cases = [(MEMORISATION, 200, None), (GROKKING, 300, 1500), (CONFUSION, None, None)]
    trials, curves = _sweep(cases)
    trials["optim.lr"], trials["optim.weight_decay"] = 1e-3, [0.1, 1.0, 10.0]
    assert grokking_phases({"main": with_phase(trials, curves)})[3].endswith(
        "**met** (1 of 1 learning rates)."
    )
    trials["optim.weight_decay"] = [10.0, 1.0, 0.1]  # confusion below memorisation
    assert grokking_phases({"main": with_phase(trials, curves)})[3].endswith(
        "**not met** (0 of 1 learning rates)."
    )


# The shipped space at a tiny size: 4 trials (2 learning rates x 2 weight decays) in one pack.
TINY = [
    "base.task.modulus=11",
    "base.model.d_model=16",
    "base.train.max_steps=40",
    "base.train.eval_every=20",
    "base.train.batch_size=32",
    "base.train.train_eval_size=32",
    "space.optim.lr=[0.001,0.01]",
    "space.optim.weight_decay=[0.1,1.0]",
    "sweep.pack=4",
]


@pytest.mark.slow
def test_a_packed_phase_sweep_labels_every_trial_and_draws_the_map(tmp_path):
    uri = fresh_store(tmp_path / "mlflow.db")
    spec = ROOT / "search_spaces" / "grokking_phases.yaml"
    code = start_sweep(tmp_path, uri, TINY, spec=spec).wait(timeout=300)
    assert code == 0, (tmp_path / "run.err").read_text()[-3000:]

    out = tmp_path / "out" / "grokking_phases"
    trials = pd.read_csv(out / "trials.csv")
    assert len(trials) == 4
    assert set(trials["phase"]) <= set(PHASES) and trials["phase"].notna().all()
    assert (out / "phase_map.png").stat().st_size > 0
    parents, runs = children(uri, "grokking_phases")
    assert len(runs) == 4
    plots = MlflowClient(uri).list_artifacts(parents[0].info.run_id, "plots")
    assert "plots/phase_map.png" in {a.path for a in plots}

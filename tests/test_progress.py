"""The progress line: its best is the figure the sweep chooses on, and a resumed sweep's line
counts what the resume took over. Tune's trials are stood in for by plain objects with the
attributes the line reads (status, config, trial_id, last_result)."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pandas as pd

from sweeps.runtime.progress import ProgressLine
from sweeps.runtime.report import best_trial


def trial(trial_id: str, status: str = "RUNNING", **more) -> SimpleNamespace:
    return SimpleNamespace(trial_id=trial_id, status=status, config={}, **more)


def test_the_best_is_the_latest_figure_the_sweep_chooses_on_not_a_peak():
    # The main job's case: 128 x 1 peaked at 0.994 and ended at 0.988; 64 x 2 ended at 0.990,
    # the trial the sweep chose. The line showed the peak, 0.994.
    line = ProgressLine("s", 2, "val/exact_match", "max", stream=io.StringIO())
    wide, deep = trial("a_00000"), trial("a_00001")
    for t, value in [(wide, 0.994), (deep, 0.990), (wide, 0.988)]:
        line.on_trial_result(0, [wide, deep], t, {"val/exact_match": value})
    chosen = best_trial(
        pd.DataFrame({"trial_id": ["a_00000", "a_00001"], "val/exact_match": [0.988, 0.990]}),
        "val/exact_match",
        "max",
    )
    assert line.best == chosen["val/exact_match"] == 0.990
    assert "best val/exact_match 0.99 ·" in line.line([wide, deep])


def test_the_best_of_a_loss_is_the_lowest_latest_value_and_packs_count_members():
    line = ProgressLine("s", 2, "val/loss", "min", stream=io.StringIO(), pack_sizes=[2])
    pack = SimpleNamespace(trial_id="p_00000", status="RUNNING", config={"pack": 0})
    line.on_trial_result(0, [pack], pack, {"members": {"0": {"val/loss": 0.1}, "1": {}}})
    line.on_trial_result(0, [pack], pack, {"members": {"0": {"val/loss": 0.5}}})
    line.on_trial_result(0, [pack], pack, {"members": {"1": {"val/loss": 0.3}}})
    assert line.best == 0.3  # member 0 ended at 0.5: its 0.1 is a peak the sweep never uses


def test_over_seeds_the_best_is_a_configs_figure_not_its_luckiest_seed():
    # recipe_addition's line showed "best val/steps_to_threshold 1500": one seed's step, where
    # its config's figure (two seeds short of 99 %) was worse and the searcher saw that one
    line = ProgressLine("s", 3, "val/steps_to_threshold", "min", stream=io.StringIO(),
                        pack_sizes=3, over_seeds=True)  # fmt: skip
    config = trial("a_00000")
    seeds = {"0": {"val/steps_to_threshold": 1500}, "1": {}, "2": {}}
    line.on_trial_result(0, [config], config, {"val/steps_to_threshold": 1573, "members": seeds})
    assert line.best == 1573


def test_a_resumed_line_counts_the_trials_it_took_over():
    # A Ctrl-C left one trial finished and two with checkpoints; the resume's first line said
    # 0/4 done with no word of them, and its best started from nothing.
    line = ProgressLine("s", 4, "val/exact_match", "max", stream=io.StringIO(), resumed=True)
    finished = trial("a_00000", "TERMINATED", last_result={"val/exact_match": 0.5})
    stopped = [trial(f"a_0000{i}", "PENDING", last_result={}) for i in (1, 2)]
    trials = [finished, *stopped, trial("a_00003", "PENDING")]
    line.on_step_end(0, trials)
    for t in stopped:
        t.latest_checkpoint_result = SimpleNamespace(metrics={"step": 10})
        t.status = "RUNNING"
        line.on_trial_start(0, trials, t)
    text = line.line(trials)
    assert text.startswith("s  1/4 done · 2 running · 1 pending · 0 errored · resumed: 1 done, 2 "
                           "from checkpoints · best val/exact_match 0.5 ·"), text  # fmt: skip


def test_a_fresh_sweep_says_nothing_of_a_resume():
    line = ProgressLine("s", 1, "val/exact_match", "max", stream=io.StringIO())
    t = trial("a_00000", latest_checkpoint_result=SimpleNamespace(metrics={}))  # a retry
    line.on_step_end(0, [t])
    line.on_trial_start(0, [t], t)
    assert "resumed" not in line.line([t])

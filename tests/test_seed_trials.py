"""Optuna's trials over seeds (``sweeps.spec.seed_trials``): each drawn config trains once per
seed, packed; MLflow and the tables hold every seed as a trial, and the searcher and ASHA see
the config's figure (the worst seed's steps to its threshold)."""

from __future__ import annotations

import pytest
import yaml
from sweep_procs import SMOKE, children, fresh_store, start_sweep

from sweeps.spec.seed_trials import (
    STEPS_KEY,
    SeedsFigure,
    drawn_trial_id,
    seed_trial_id,
    uses_seed_trials,
)
from sweeps.spec.sweep_spec import SpecError, load_spec


def optuna_over_seeds(folder, *sets: str):
    """The smoke sweep as Optuna over the learning rate, three configs of three seeds each,
    choosing on the worst seed's steps to 2 % validation exact match."""
    raw = yaml.safe_load(SMOKE.read_text())
    raw["sweep"].update(
        search="optuna", seeds=[0, 1, 2], num_samples=3, metric="val/steps_to_threshold",
        mode="min",
    )  # fmt: skip
    raw["space"] = {"optim.lr": {"loguniform": [1.0e-3, 1.0e-2]}}
    raw["base"]["train"]["threshold"] = 0.02
    raw["table"] = {"name": "smoke", "rows": ["optim.lr"], "values": ["val/exact_match"]}
    path = folder / "optuna_seeds.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path, load_spec(path, list(sets))


def test_the_figure_is_the_worst_seeds_steps_to_its_threshold():
    figure = SeedsFigure([0.9, 0.9], [100, 100])
    early = figure.update(
        {0: {"step": 10, "val/exact_match": 0.5}, 1: {"step": 10, "val/exact_match": 0.0}}
    )
    # neither seed there yet: the budget plus the share of the threshold still missing
    assert early[STEPS_KEY] == pytest.approx(200.0)  # seed 1 misses all of it
    assert early["val/exact_match"] == pytest.approx(0.25)  # the seeds' mean
    later = figure.update(
        {0: {"step": 20, "val/exact_match": 0.95}, 1: {"step": 20, "val/exact_match": 0.45}}
    )
    assert later[STEPS_KEY] == pytest.approx(150.0)  # seed 0 at step 20; seed 1 half way
    last = figure.update({1: {"step": 30, "val/exact_match": 0.9}})  # seed 0 stopped early
    assert last[STEPS_KEY] == 30.0
    # a summary's own count wins: the seed that reached it before a restore keeps it
    restored = SeedsFigure([0.9, 0.9], [100, 100])
    summary = restored.update({0: {STEPS_KEY: 20, "val/exact_match": 0.95}, 1: {STEPS_KEY: 30}})
    assert summary[STEPS_KEY] == 30.0


def test_a_seed_trials_id_leads_back_to_its_drawn_config():
    assert seed_trial_id("abcde_00013", 2) == "abcde_00013s2"
    assert drawn_trial_id("abcde_00013s2") == "abcde_00013"
    assert drawn_trial_id("abcde_00013s12") == "abcde_00013"


def test_optuna_takes_seeds_as_trials_of_their_seeds(tmp_path):
    from sweeps.spec.space import n_trials

    _, spec = optuna_over_seeds(tmp_path)
    assert uses_seed_trials(spec.sweep)
    assert n_trials(spec) == 9  # three drawn configs, three seeds each
    with pytest.raises(SpecError, match=r"^sweep\.pack: 2: Optuna's trials over seeds"):
        optuna_over_seeds(tmp_path, "sweep.pack=2")


@pytest.mark.slow
def test_an_optuna_sweep_over_seeds_records_every_seed(tmp_path):
    """The real command, with ASHA: every drawn config's three seeds end as child runs that
    differ in train.seed alone, and trials.csv and the table hold all of them."""
    uri = fresh_store(tmp_path / "mlflow.db")
    sets = ["sweep.scheduler={name: asha, grace_period: 1, max_t: 5}"]
    sets += ["base.train.max_steps=30", "sweep.checkpoint_every_s=10"]
    spec, _ = optuna_over_seeds(tmp_path, *sets)
    proc = start_sweep(tmp_path, uri, sets, spec=spec)
    assert proc.wait(timeout=400) == 0, (tmp_path / "run.err").read_text()[-3000:]
    _, runs = children(uri, "smoke")
    assert len(runs) == 9
    by_config: dict[str, set[int]] = {}
    for run in runs:
        params = run.data.params
        by_config.setdefault(params["optim.lr"], set()).add(int(params["train.seed"]))
        assert run.info.status == "FINISHED"
    assert list(by_config.values()) == [{0, 1, 2}] * 3
    trials = (tmp_path / "out" / "smoke" / "trials.csv").read_text().strip().splitlines()
    assert len(trials) == 1 + 9
    assert "9/9 done" in (tmp_path / "run.err").read_text()
    # the best is a drawn config, judged as the searcher judged it: by its worst seed
    assert "(its config's worst seed)" in (tmp_path / "run.out").read_text()
    saved = yaml.safe_load((tmp_path / "out" / "smoke" / "spec.yaml").read_text())
    assert saved["sweep"]["seeds"] == [0, 1, 2]

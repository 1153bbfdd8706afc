"""arith.training.diagnostics on real data and real training: the data's overlaps and histograms,
the
embedding snapshots (one per evaluation, kept through a resume, one file per pack member), and
the figures sweeps.analysis.plot_diagnostics draws from them."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from arith.config import from_dict
from arith.data.dataset import DataConfig, build_dataset
from arith.problems import carries
from arith.problems.tasks import TaskConfig
from arith.text.formats import FormatConfig
from arith.training import diagnostics
from arith.training.trainer import build_model, train, train_pack
from sweeps.analysis.plot_diagnostics import write_diagnostics

TINY = {
    "task": {"name": "addition", "n_digits": 2},
    "data": {"val_size": 100, "test_size": 100, "edge_cases": False},
    "model": {"n_layer": 1, "d_model": 16, "n_head": 2},
    "train": {"max_steps": 30, "eval_every": 10, "batch_size": 16, "train_eval_size": 32},
}


def test_no_set_shares_a_problem_and_every_histogram_counts_its_set():
    task = TaskConfig(name="addition", n_digits=3)
    data = DataConfig(
        train_size=5000, val_size=300, test_size=300, ood_spacing=True, carry_size=20,
        longer_n_digits=(4, 5), longer_size=100,
    )  # fmt: skip
    dataset = build_dataset(task, FormatConfig(name="plain"), data, seed=0)
    found = diagnostics.data_diagnostics(dataset, dataset.train_pool)
    assert set(found["overlap"]) == {"val", "test", "ood", "longer", "carry", "cascade", "edge"}
    assert found["overlap"]["test"] == {"train": 0, "val": 0}
    assert all(n == 0 for pair in found["overlap"].values() for n in pair.values())
    assert diagnostics.overlap_metrics(found) == {"data/test/val_overlap": 0}
    sets = {"train": dataset.train_pool, **dataset.eval_sets}
    assert list(found["sets"]) == list(sets)
    for name, problems in sets.items():
        hist = found["sets"][name]
        assert hist["size"] == len(problems)
        for key in ("answer_length", "carry_chain"):
            assert sum(hist[key].values()) == len(problems), (name, key)
        assert sum(hist["answer_value"]) == len(problems), name
    # the carry set holds 20 of each longest chain 0..3; longer answers reach 6 digits
    assert found["sets"]["carry"]["carry_chain"] == {str(c): 20 for c in range(4)}
    assert max(int(n) for n in found["sets"]["longer"]["answer_length"]) == 6
    chains = carries.longest_chain(dataset.train_pool, ("+",))
    assert found["sets"]["train"]["carry_chain"]["3"] == int((chains == 3).sum())


def test_a_shared_problem_is_counted():
    task = TaskConfig(name="addition", n_digits=2)
    dataset = build_dataset(task, FormatConfig(), DataConfig(val_size=50, test_size=50), seed=1)
    dataset.eval_sets["test"] = dataset.eval_sets["val"]  # a broken split, on purpose
    found = diagnostics.data_diagnostics(dataset, dataset.train_pool)
    assert found["overlap"]["test"]["val"] == 50


def test_one_snapshot_per_evaluation_kept_through_a_resume(tmp_path):
    config = from_dict(TINY)

    def stop_at_20(metrics):
        if metrics["step"] == 20:
            raise KeyboardInterrupt  # as a killed trial: its checkpoint at step 20 stays

    with pytest.raises(KeyboardInterrupt):
        train(config, stop_at_20, checkpoint_dir=tmp_path / "first")
    saved = torch.load(tmp_path / "first" / diagnostics.FILE, weights_only=True)
    vocab = len(saved["tokens"])
    assert saved["steps"] == [0, 10, 20]
    assert saved["embeddings"].shape == (3, vocab, 16)

    train(config, checkpoint_dir=tmp_path / "second", resume_from=tmp_path / "first")
    resumed = torch.load(tmp_path / "second" / diagnostics.FILE, weights_only=True)
    assert resumed["steps"] == [0, 10, 20, 30]
    assert torch.equal(resumed["embeddings"][:3], saved["embeddings"])
    assert not torch.equal(resumed["embeddings"][3], saved["embeddings"][2])  # it trained on

    written = write_diagnostics(tmp_path / "second", tmp_path / "out")
    names = {p.relative_to(tmp_path / "out").as_posix() for p in written}
    assert names == {
        "diagnostics/data.json",
        "diagnostics/answers.png",
        "diagnostics/carries.png",
        "embeddings.json",
        "embeddings.png",
    }
    track = json.loads((tmp_path / "out" / "embeddings.json").read_text())
    assert track["steps"] == [0, 10, 20, 30]
    assert np.asarray(track["coords"]).shape == (vocab, 4, 2)
    tokens = [track["tokens"][i] for i in track["used"]]
    assert set("0123456789+=") <= set(tokens) and "<pad>" not in tokens


def test_each_pack_member_keeps_its_own_track(tmp_path):
    configs = [from_dict(TINY), from_dict({**TINY, "optim": {"lr": 3e-3}})]
    configs[1] = replace(configs[1], train=replace(configs[1].train, seed=1))
    train_pack(configs, checkpoint_dir=tmp_path)
    tracks = [
        torch.load(tmp_path / f"member-{i}" / diagnostics.FILE, weights_only=True) for i in range(2)
    ]
    assert [t["steps"] for t in tracks] == [[0, 10, 20, 30]] * 2
    assert not torch.equal(tracks[0]["embeddings"], tracks[1]["embeddings"])
    exported = diagnostics.export(tmp_path, tmp_path / "out-1", member=1)
    track = json.loads(exported[1].read_text())
    expected = diagnostics.trajectories([0, 10, 20, 30], tracks[1]["embeddings"], track["used"])
    assert track["coords"] == expected["coords"]


def test_a_long_run_keeps_a_bounded_evenly_spread_track():
    config = from_dict(TINY)
    task, fmt = config.task, config.format
    dataset = build_dataset(task, fmt, config.data, seed=0)
    model = build_model(config, dataset)
    run = diagnostics.RunDiagnostics.build(dataset, dataset.train_pool)
    for step in range(0, 1000, 10):
        run.record(step, model, None)
    assert len(run.steps) <= diagnostics.MAX_SNAPSHOTS and len(run.snapshots) == len(run.steps)
    assert run.steps[0] == 0 and run.steps[-1] == 990
    gaps = set(np.diff(run.steps[:-1]).tolist())
    assert len(gaps) == 1  # evenly spread, the last point aside


def test_every_diagnostic_figure_names_its_trial_and_each_panel_has_a_legend(tmp_path):
    from sweeps.analysis.plot_diagnostics import diagnostic_figures, trial_title

    train(from_dict(TINY), checkpoint_dir=tmp_path / "run")
    numbers = diagnostics.export(tmp_path / "run", tmp_path / "out")
    title = trial_title("smoke", "3acb0_00002", from_dict(TINY).flat())
    assert title == "smoke · trial 3acb0_00002 · 2-digit addition, plain digits"
    figures = diagnostic_figures(numbers, title)
    assert set(figures) == {"diagnostics/answers.png", "diagnostics/carries.png", "embeddings.png"}
    for name, figure in figures.items():
        assert figure.get_suptitle().startswith(title), name
    # The answer lengths' panel had no legend: which bar was which set was left to guess.
    value_panel, length_panel = figures["diagnostics/answers.png"].axes
    for panel in (value_panel, length_panel):
        assert panel.get_legend() is not None
    names = [t.get_text() for t in length_panel.get_legend().texts]
    assert names[0] == "train" and "test" in names, names

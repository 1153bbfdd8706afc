"""The length probe (arith.evaluation.length_probe): its ladder, its edge cases, where a model's
context ends, where it stops, and its run inside training."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from arith import config as config_lib
from arith.data.length_probe import (
    BROKE_KEY,
    CONTEXT_KEY,
    EDGE_RATIO_KEY,
    RATIO_KEY,
    edge_problems,
    rungs,
)
from arith.errors import ConfigError
from arith.evaluation import length_probe
from arith.evaluation.length_probe import context_digits
from arith.model.gpt import GPT, ModelConfig
from arith.problems.tasks import TaskConfig
from arith.text.formats import FormatConfig, build_format
from arith.training.reported import reported_metrics
from arith.training.trainer import train
from sweeps.analysis.plots import plots_for

ADDITION = TaskConfig(name="addition", n_digits=8)


def test_the_ladder_climbs_geometrically_past_the_trained_length_to_its_end():
    assert rungs(8, 200) == [12, 16, 24, 32, 48, 64, 80, 100, 128, 160, 200]
    assert rungs(8, 70) == [12, 16, 24, 32, 48, 64, 70]  # the context's own length ends it
    assert rungs(8, 10) == [10]
    assert rungs(8, 8) == []
    assert 10 * 8 in rungs(8, 200)  # 10x is a rung


@pytest.mark.parametrize("length", [2, 12, 57, 200])
def test_edge_cases_are_the_longest_chains_and_the_overflowing_digit(length):
    problems = edge_problems(ADDITION, length, np.random.default_rng(0))
    a, b = (_ints(problems.operands[:, j]) for j in (0, 1))
    answers = _ints(problems.answer)
    assert answers == [x + y for x, y in zip(a, b, strict=True)]
    assert max(problems.operand_len.max(axis=1)) == length
    nines = 10**length - 1
    assert [nines, 1] in [[x, y] for x, y in zip(a, b, strict=True)]
    assert [nines, nines] in [[x, y] for x, y in zip(a, b, strict=True)]
    # the mixed-digit chain: L-digit operands whose sum carries through every column
    chain = [(x, y) for x, y in zip(a, b, strict=True) if x + y == 10**length and 1 not in (x, y)]
    assert chain and all(len(str(x)) == len(str(y)) == length for x, y in chain)
    assert sum(len(str(n)) == length + 1 for n in answers) >= 4  # the leading digit overflows


def _ints(digits: np.ndarray) -> list[int]:
    """Python ints from rows of digits, most significant first."""
    return [int("".join(map(str, row.tolist()))) for row in digits]


def _model(position: str, n_digits: int, **kw) -> tuple[GPT, object]:
    task = TaskConfig(name="addition", n_digits=n_digits)
    fmt = build_format(FormatConfig(name="reversed"), task)
    cfg = ModelConfig(n_layer=1, d_model=16, n_head=2, position=position, **kw)
    return GPT(cfg, len(fmt.vocab), fmt.max_seq_len(), fmt.digit_ids), fmt


def test_the_context_ends_where_the_models_position_table_ends():
    learned, fmt = _model("learned", 8)
    assert context_digits(learned, fmt, ADDITION, 200) == 8  # built for 8 digits, no more
    abacus, fmt = _model("abacus", 8, abacus_max_k=30)
    assert context_digits(abacus, fmt, ADDITION, 200) == 29  # a 29-digit sum writes 30 digits
    relative, fmt = _model("abacus_bias", 8)
    assert context_digits(relative, fmt, ADDITION, 200) == 200  # nothing but the probe's end


def test_it_stops_at_the_first_rung_below_the_bar(monkeypatch):
    scores = {12: 1.0, 16: 0.995, 24: 0.98, 32: 1.0}
    edges = {12: 1.0, 16: 0.8, 24: 1.0, 32: 1.0}
    asked = []

    def scripted(model, fmt, problems, device):
        length = int(problems.operand_len.max())
        asked.append(length)
        edge = len(problems) < 10  # the edge cases are five problems
        return (edges if edge else scores)[length]

    monkeypatch.setattr(length_probe, "_exact", scripted)
    model, fmt = _model("abacus_bias", 8)
    out = length_probe.probe(model, fmt, ADDITION, 200, 20, 0, torch.device("cpu"))
    assert sorted(set(asked)) == [12, 16, 24]  # nothing past the rung that broke
    assert out[RATIO_KEY] == 16 / 8 and out[BROKE_KEY] == 24
    assert out[EDGE_RATIO_KEY] == 12 / 8  # the edge cases missed one at 16
    assert out["probe/exact_match/24"] == 0.98 and "probe/exact_match/32" not in out
    assert out[CONTEXT_KEY] == 200


def test_a_run_reports_the_probe_and_declares_its_metrics():
    sets = [
        "task.n_digits=2",
        "train.max_steps=20",
        "train.eval_every=10",
        "train.batch_size=16",
        "model.d_model=16",
        "model.n_layer=1",
        "model.position=abacus_bias",
        "data.length_probe_max=6",
        "data.length_probe_size=8",
        "data.length_grid_max=3",
        "data.length_grid_size=2",
    ]
    config = config_lib.load(None, sets)
    summary = train(config)
    assert summary[CONTEXT_KEY] == 6
    assert summary[BROKE_KEY] == 3  # an untrained model misses the first rung
    assert summary[RATIO_KEY] == 0.0
    assert 0.0 <= summary["probe/exact_match/3"] <= 1.0 and "probe/edge/3" in summary
    assert {k for k in summary if k.startswith("probe/")} <= reported_metrics(config)
    # the findings figure draws the probe under the grid's heatmaps, a line per trial
    rows = [{**summary, "task.n_digits": 2, "train.seed": seed} for seed in (0, 1)]
    figure = plots_for(pd.DataFrame(rows), pd.DataFrame())["length_heatmap"]
    probe_axes = [ax for ax in figure.get_axes() if ax.get_title().startswith("length probe")]
    assert len(probe_axes) == 1 and len(probe_axes[0].get_lines()) == 2 + 1  # + the 99 % bar


@pytest.mark.parametrize(
    "sets, field",
    [
        (["data.length_probe_max=1001"], "data.length_probe_max"),
        (["data.length_probe_max=3", "task.n_digits=3"], "data.length_probe_max"),
        (["data.length_probe_size=0"], "data.length_probe_size"),
        (["data.length_probe_max=9", "task.name=modular"], "data.length_probe_max"),
    ],
)
def test_bad_probe_settings_name_their_field(sets, field):
    with pytest.raises(ConfigError, match=field):
        config_lib.load(None, sets)

"""Splits never share a problem; batches cover the training set; evaluation sets are built."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from arith import config as config_lib
from arith.data.batches import BatchSource
from arith.data.dataset import DataConfig, build_dataset, split_of
from arith.errors import ConfigError
from arith.problems import tasks
from arith.problems.tasks import TaskConfig
from arith.text.formats import FormatConfig
from arith.training.reported import reported_metrics
from arith.training.trainer import train


def _keys(problems) -> set[int]:
    return set(problems.keys().tolist())


def test_enumerated_space_is_cut_into_exact_disjoint_fractions():
    task = TaskConfig(name="modular", modulus=11, operation="add")
    data = DataConfig(val_size=10_000, test_size=10_000)
    ds = build_dataset(task, FormatConfig(), data, seed=0)
    train, val, test = ds.train_pool, ds.eval_sets["val"], ds.eval_sets["test"]
    assert (len(train), len(val), len(test)) == (85, 18, 18)  # 121 pairs, 70/15/15
    assert not (_keys(train) & _keys(val)) and not (_keys(train) & _keys(test))
    assert not (_keys(val) & _keys(test))
    assert len(_keys(train) | _keys(val) | _keys(test)) == 121


def test_huge_space_splits_by_hash_and_training_batches_stay_in_train():
    task = TaskConfig(name="addition", n_digits=20, operand_lengths="bucketed")
    data = DataConfig(val_size=500, test_size=500)
    ds = build_dataset(task, FormatConfig(name="reversed"), data, seed=3)
    assert ds.train_pool is None  # fresh problems every step
    val, test = ds.eval_sets["val"], ds.eval_sets["test"]
    assert not (_keys(val) & _keys(test))
    source = BatchSource(ds, data, batch_size=256, seed=3)
    seen = np.concatenate([source.next_problems().keys() for _ in range(8)])
    assert (split_of(seen, ds.split_salt, data.val_fraction, data.test_fraction) == 0).all()
    assert not (set(seen.tolist()) & (_keys(val) | _keys(test)))


def test_split_depends_on_the_problem_not_on_the_sample():
    keys = np.arange(100_000, dtype=np.uint64)
    a = split_of(keys, 7, 0.15, 0.15)
    b = split_of(keys[::-1].copy(), 7, 0.15, 0.15)[::-1]
    assert (a == b).all()
    shares = np.bincount(a, minlength=3) / len(a)
    assert np.allclose(shares, [0.7, 0.15, 0.15], atol=0.01)


def test_an_epoch_visits_every_training_problem_once():
    task = TaskConfig(name="addition", n_digits=1)
    data = DataConfig()
    ds = build_dataset(task, FormatConfig(), data, seed=0)
    n = len(ds.train_pool)
    source = BatchSource(ds, data, batch_size=n, seed=0)
    assert sorted(source.next_problems().keys().tolist()) == sorted(ds.train_pool.keys().tolist())


def test_batch_source_state_round_trips():
    task = TaskConfig(name="addition", n_digits=2)
    data = DataConfig()
    ds = build_dataset(task, FormatConfig(), data, seed=0)
    a = BatchSource(ds, data, batch_size=64, seed=1)
    a.next_batch(torch.device("cpu"))
    b = BatchSource(ds, data, batch_size=64, seed=1)
    b.load_state_dict(a.state_dict())
    for _ in range(3):
        x, y = a.next_batch(torch.device("cpu")), b.next_batch(torch.device("cpu"))
        assert all(torch.equal(u, v) for u, v in zip(x, y, strict=True))


def test_a_saved_batch_source_holds_no_order_and_continues_across_epochs():
    """The epoch's order is saved as the RNG state that drew it (a million-problem pool was
    8 MB of order per member in every checkpoint), and drawn again on load: a restored source
    gives the same batches, into the next epochs; a checkpoint holding the order loads too."""
    task = TaskConfig(name="addition", n_digits=1)
    data = DataConfig()
    ds = build_dataset(task, FormatConfig(), data, seed=0)
    batch = len(ds.train_pool) // 3 + 1  # epochs end inside batches
    a = BatchSource(ds, data, batch_size=batch, seed=1)
    for _ in range(4):  # into the second epoch
        a.next_problems()
    state = a.state_dict()
    assert not any(isinstance(v, (np.ndarray, torch.Tensor)) for v in state.values())
    b = BatchSource(ds, data, batch_size=batch, seed=1)
    b.load_state_dict(state)
    old = BatchSource(ds, data, batch_size=batch, seed=1)
    old.load_state_dict({**state, "order": torch.from_numpy(a.order.copy())})
    for _ in range(7):  # through two more epochs
        keys = a.next_problems().keys()
        assert np.array_equal(keys, b.next_problems().keys())
        assert np.array_equal(keys, old.next_problems().keys())


def test_operation_weights_shape_batches_from_an_enumerated_pool():
    # multi_op on 1-digit operands is a small enumerated space: batches come from a fixed pool,
    # where epochs alone would give each operation its share of the pool whatever its weight
    ops = ("+", "-", "*", "//", "%")
    shares = {}
    for weights in [(1, 1, 1, 1, 1), (1, 1, 8, 1, 1)]:
        task = TaskConfig(name="multi_op", n_digits=1, ops=ops, op_weights=weights)
        data = DataConfig()
        ds = build_dataset(task, FormatConfig(name="carry_trace"), data, seed=0)
        assert ds.train_pool is not None
        source = BatchSource(ds, data, batch_size=512, seed=1)
        drawn = np.concatenate([source.next_problems().op for _ in range(20)])
        shares[weights] = np.bincount(drawn, minlength=5) / len(drawn)
        train = _keys(ds.train_pool)
        assert _keys(source.next_problems()) <= train  # still training problems only
    assert abs(shares[(1, 1, 8, 1, 1)][2] - 8 / 12) < 0.03
    assert np.allclose(shares[(1, 1, 1, 1, 1)], 0.2, atol=0.03)


def test_extra_evaluation_sets():
    task = TaskConfig(name="addition", n_digits=4, operand_lengths="fixed")
    data = DataConfig(ood_spacing=True, val_size=50, test_size=50)
    ds = build_dataset(task, FormatConfig(name="plain"), data, seed=0)
    assert set(ds.eval_sets) == {"val", "test", "ood", "edge"}
    assert ds.format_of("ood").config.name == "spaced"
    longer = build_dataset(
        TaskConfig(name="addition", n_digits=5, operand_lengths="bucketed"),
        FormatConfig(name="reversed"),
        DataConfig(longer_n_digits=(8, 10), longer_size=64),
        seed=0,
    ).eval_sets["longer"]
    assert longer.operand_len.min() >= 8 and longer.operand_len.max() <= 10


def _training_problem(ds, data: DataConfig, problems, pool_keys: set[int]) -> np.ndarray:
    """Independent of ``Dataset.is_training``: a pool member, or a key of trained lengths that
    hashes to the training split."""
    keys = problems.keys()
    if ds.train_pool is not None and ds.enumerated:
        return np.array([k in pool_keys for k in keys.tolist()], dtype=bool)
    trained = problems.operand_len.max(axis=1) <= ds.task.n_digits
    return trained & (split_of(keys, ds.split_salt, data.val_fraction, data.test_fraction) == 0)


@pytest.mark.parametrize(
    ("task", "seed"),
    [
        *[(TaskConfig(name="addition", n_digits=3), seed) for seed in (0, 1, 2)],
        (TaskConfig(name="addition", n_digits=10), 0),
        (TaskConfig(name="multi_op", n_digits=2, ops=("+", "-", "*")), 0),
    ],
    ids=["enum3-seed0", "enum3-seed1", "enum3-seed2", "hash10", "multi_op2"],
)
def test_every_evaluation_set_is_disjoint_from_training_and_reports_its_size(task, seed):
    longer = (task.n_digits + 1, task.n_digits + 2) if task.name == "addition" else None
    data = DataConfig(
        val_size=200,
        test_size=200,
        ood_spacing=True,
        longer_n_digits=longer,
        longer_size=50,
        carry_size=5 if task.name == "addition" else 0,
    )
    ds = build_dataset(task, FormatConfig(), data, seed=seed)
    pool_keys = _keys(ds.train_pool) if ds.train_pool is not None else set()
    expected = {"val", "test", "ood"} | ({"longer", "carry"} if longer else set())
    assert expected <= set(ds.eval_sets)
    for name, problems in ds.eval_sets.items():
        assert not _training_problem(ds, data, problems, pool_keys).any(), name
        record = ds.records[name]
        assert (record.size, record.train_overlap) == (len(problems), 0), name
        assert record.before - record.dropped == record.size
    edge = tasks.edge_cases(task)
    dropped = _training_problem(ds, data, edge, pool_keys).sum()
    assert dropped > 0  # the unfiltered edge cases hold training problems at these seeds
    assert ds.records["edge"].dropped == dropped
    metrics = ds.data_metrics()
    assert metrics["data/edge/size"] == len(edge) - dropped
    assert metrics["data/val/train_overlap"] == 0 and metrics["data/edge/train_overlap"] == 0


def test_an_edge_set_of_training_problems_only_is_left_out_with_a_note():
    # 1-digit sums with 98 % of the space in training: all seven edge cases are training ones
    task = TaskConfig(name="addition", n_digits=1)
    data = DataConfig(val_fraction=0.01, test_fraction=0.01)
    with pytest.warns(UserWarning, match="edge set is left out"):
        ds = build_dataset(task, FormatConfig(), data, seed=0)
    assert "edge" not in ds.eval_sets
    assert ds.data_metrics()["data/edge/size"] == 0
    assert ds.data_metrics()["data/edge/dropped"] == len(tasks.edge_cases(task))
    assert any("edge" in note for note in ds.notes)


def test_longer_validation_set_is_longer_than_training_and_apart_from_longer():
    task = TaskConfig(name="addition", n_digits=4, operand_lengths="bucketed")
    data = DataConfig(longer_n_digits=(7, 8), longer_val_n_digits=(5, 6), longer_val_size=80)
    ds = build_dataset(task, FormatConfig(name="reversed"), data, seed=0)
    longer_val = ds.eval_sets["longer_val"]
    assert len(longer_val) == 80
    assert set(longer_val.operand_len.max(axis=1).tolist()) == {5, 6}
    assert not (_keys(longer_val) & _keys(ds.eval_sets["longer"]))
    assert ds.records["longer_val"].train_overlap == 0
    # its own stream: adding it leaves every other set as it was
    without = build_dataset(
        task, FormatConfig(name="reversed"), replace(data, longer_val_n_digits=None), seed=0
    )
    for name, problems in without.eval_sets.items():
        assert np.array_equal(problems.keys(), ds.eval_sets[name].keys()), name


@pytest.mark.parametrize(
    ("overrides", "path", "shows"),
    [
        (["task.n_digits=5", "data.longer_n_digits=[5, 8]"], "data.longer_n_digits", "above"),
        (["task.n_digits=5", "data.longer_n_digits=[3, 8]"], "data.longer_n_digits", "[3, 8]"),
        (
            ["task.n_digits=5", "data.longer_val_n_digits=[4, 6]"],
            "data.longer_val_n_digits",
            "above",
        ),
        (
            ["task.n_digits=5", "data.longer_n_digits=[8, 9]", "data.longer_val_n_digits=[6, 8]"],
            "data.longer_val_n_digits",
            "must not overlap",
        ),
        (["data.longer_val_size=0"], "data.longer_val_size", ">= 1"),
    ],
)
def test_a_longer_range_that_meets_training_or_the_reported_set_is_refused(overrides, path, shows):
    with pytest.raises(ConfigError) as err:
        config_lib.load(None, overrides)
    assert err.value.path == path
    assert shows in str(err.value) and "\n" not in str(err.value)


def test_a_run_reports_each_sets_size_and_training_overlap():
    cfg = config_lib.load(
        None,
        [
            "task.n_digits=2",
            "format.name=reversed",
            "data.val_size=40",
            "data.test_size=40",
            "data.carry_size=5",
            "data.longer_n_digits=[4, 4]",
            "data.longer_size=16",
            "data.longer_val_n_digits=[3, 3]",
            "data.longer_val_size=16",
            "model.d_model=16",
            "model.n_layer=1",
            "train.max_steps=2",
            "train.eval_every=2",
        ],
    )
    summary = train(cfg)
    declared = reported_metrics(cfg)
    for name in ("val", "test", "longer", "longer_val", "carry", "edge"):
        assert summary[f"data/{name}/train_overlap"] == 0, name
        assert f"data/{name}/size" in declared
    assert summary["data/longer_val/size"] == 16
    assert "longer_val/exact_match" in summary and "longer_val/exact_match" in declared
    assert {k for k in summary if k.startswith(("data/", "longer_val/"))} <= declared


@pytest.mark.parametrize("search", ["grid", "random"])
def test_a_sweep_can_choose_on_the_longer_validation_set(search):
    from sweeps.spec.sweep_spec import SpecError, parse_spec

    raw = {
        "sweep": {"name": "t", "metric": "longer_val/exact_match", "mode": "max"},
        "base": {
            "task": {"name": "addition", "n_digits": 2},
            "data": {"longer_n_digits": [5, 6], "longer_val_n_digits": [3, 4]},
            "train": {"max_steps": 10},
        },
        "space": {"model.d_model": [16, 32]},
        "table": {"rows": ["model.d_model"], "values": ["longer_val/exact_match/len_4"]},
    }
    raw["sweep"]["search"] = search
    assert parse_spec(raw).sweep.metric == "longer_val/exact_match"
    del raw["base"]["data"]["longer_val_n_digits"]  # not configured: not reported
    with pytest.raises(SpecError, match=r"longer_val/exact_match"):
        parse_spec(raw)

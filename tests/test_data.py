"""Splits never share a problem; batches cover the training set; evaluation sets are built."""

from __future__ import annotations

import numpy as np
import torch

from arith.data import BatchSource, DataConfig, build_dataset, split_of
from arith.formats import FormatConfig
from arith.tasks import TaskConfig


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

"""Training batches with long carry chains (``data.carry_chains``): the built problems, their
share of a batch, and the settings refused."""

from __future__ import annotations

import numpy as np
import pytest

from arith import config as config_lib
from arith.data.batches import BatchSource
from arith.data.dataset import build_dataset
from arith.errors import ConfigError
from arith.problems import carries, tasks
from arith.training.trainer import train

ADD8 = tasks.TaskConfig(name="addition", n_digits=8, operand_lengths="bucketed")


def test_chains_of_equal_lengths_are_uniform_up_to_the_top_digit():
    n, k = 8000, 8
    lens = np.full((n, 2), k)
    problems = tasks.from_operands(ADD8, carries.chain_operands(lens, k, np.random.default_rng(0)))
    assert (problems.operand_len == k).all()  # the leading digits are not 0
    chains = carries.longest_chain(problems, ("+",))
    counts = np.bincount(chains, minlength=k + 1)
    assert counts[0] == 0 and (np.abs(counts[1:] - n / k) < 0.2 * n / k).all(), counts
    # a chain through all k columns carries out: the answer is one digit longer
    assert (problems.answer_len[chains == k] == k + 1).all()
    # about half of them repeat one digit pair in every column (9999 + 9999, 5555 + 6666)
    through = problems.operands[chains == k]
    alike = (through == through[:, :, :1]).all(axis=(1, 2))
    assert 0.3 < alike.mean() < 0.5, alike.mean()
    assert (through[alike] == 9).all(axis=(1, 2)).any()  # 99999999 + 99999999 among them


def test_a_chain_runs_through_the_longer_operand_s_lone_nines():
    """``99999999 + 1``-like problems: past the short operand, a chain needs a 9 in each column."""
    n, k = 4000, 8
    lens = np.tile([[k, 1]], (n, 1))
    problems = tasks.from_operands(ADD8, carries.chain_operands(lens, k, np.random.default_rng(1)))
    chains = carries.longest_chain(problems, ("+",))
    assert set(np.unique(chains)) == set(range(1, k + 1))
    a = problems.operands[:, 0].astype(np.int64) @ 10 ** np.arange(k - 1, -1, -1)
    b = problems.operands[:, 1].astype(np.int64) @ 10 ** np.arange(k - 1, -1, -1)
    through = chains == k
    assert (a[through] // 10 == 10 ** (k - 1) - 1).all()  # 9999999x + y with x + y >= 10
    assert (a[through] % 10 + b[through] >= 10).all()
    answers = problems.answer.astype(np.int64) @ 10 ** np.arange(problems.answer.shape[1])[::-1]
    assert (answers == a + b).all()


def test_a_batch_takes_its_share_of_built_problems_from_the_training_split():
    cfg = config_lib.load(None, ["task.n_digits=8", "data.carry_chains=0.5"])
    dataset = build_dataset(cfg.task, cfg.format, cfg.data, seed=0)
    plain = BatchSource(dataset, config_lib.load(None, ["task.n_digits=8"]).data, 512, seed=0)
    mixed = BatchSource(dataset, cfg.data, 512, seed=0)
    with_chains, without = mixed.next_problems(), plain.next_problems()
    assert len(with_chains) == 512 and dataset.is_training(with_chains).all()
    long = [(carries.longest_chain(p, ("+",)) >= 7).mean() for p in (with_chains, without)]
    # random 8-digit sums hold a chain of 7 or 8 about 2 % of the time, built ones a quarter
    assert long[0] > 0.1 and long[0] > 3 * long[1], long
    # the state is the RNG: a restored source goes on with the same batches
    again = BatchSource(dataset, cfg.data, 512, seed=0)
    again.load_state_dict(mixed.state_dict())
    assert (again.next_problems().keys() == mixed.next_problems().keys()).all()


@pytest.mark.parametrize(
    ("sets", "says"),
    [
        (["task.n_digits=8", "data.carry_chains=1.5"], "must be in [0, 1], but got 1.5"),
        (["task.name=modular", "data.carry_chains=0.2"], "task.name=modular"),
        (["task.n_digits=3", "data.carry_chains=0.2"], "task.n_digits=3"),
        (["task.n_digits=8", "data.train_size=100", "data.carry_chains=0.2"], "train_size=100"),
    ],
)
def test_carry_chains_only_where_fresh_additions_are_drawn(sets, says):
    with pytest.raises(ConfigError, match=r"data\.carry_chains") as error:
        config_lib.load(None, sets)
    assert says in str(error.value)


def test_a_run_trains_on_chains():
    cfg = config_lib.load(
        None,
        [
            "task.n_digits=4",
            "data.carry_chains=0.3",
            "data.val_size=20",
            "data.test_size=20",
            "model.d_model=16",
            "model.n_layer=1",
            "train.batch_size=16",
            "train.max_steps=4",
            "train.eval_every=4",
        ],
    )
    summary = train(cfg)
    assert summary["step"] == 4 and np.isfinite(summary["train/loss"])

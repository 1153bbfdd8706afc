"""The ``carry`` and ``cascade`` evaluation sets: built by construction
(arith.problems.carries), since random operands rarely hold long carry chains or cascades, and
kept apart from training.

``carry_set``: ``data.carry_size`` problems for each longest carry chain 0..k. ``cascade_set``:
k-digit additions whose carry runs from the ones digit through the top one
(``1166 + 9834 = 11000``). Both drop every candidate training can draw
(``Dataset.is_training``) and draw again, so neither tests memorisation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from arith.errors import require
from arith.problems import carries, tasks
from arith.problems.tasks import Problems, TaskConfig


class Dataset(Protocol):
    """What these sets read of ``arith.data.dataset.Dataset`` (named here, not imported, so the
    dataset, which builds them, and this module do not import each other)."""

    task: TaskConfig

    def is_training(self, problems: Problems) -> np.ndarray: ...

    def note(self, message: str) -> None: ...


def carry_set(dataset: Dataset, carry_size: int, rng: np.random.Generator) -> Problems:
    """``carry_size`` held-out additions per longest carry chain 0..k (arith.problems.carries).

    A small space may not hold enough held-out problems of a chain (1-digit sums: 100
    problems in all): the set then comes back short, with a note.
    """
    task = dataset.task
    per_chain = _held_out(
        dataset,
        lambda n: tasks.from_operands(task, carries.stratified_operands(task.n_digits, n, rng)),
        lambda batch: carries.longest_chain(batch, ("+",)),
        {c: carry_size for c in range(task.n_digits + 1)},
    )
    got = {c: len(problems) for c, problems in per_chain.items()}
    short = {c: n for c, n in got.items() if n < carry_size}
    if short:
        dataset.note(
            f"the carry set holds fewer than data.carry_size={carry_size} problems for "
            f"carry chains {sorted(short)} ({short}): the other problems are training ones"
        )
    return Problems.concat(list(per_chain.values()))


def cascade_set(dataset: Dataset, size: int, rng: np.random.Generator) -> Problems:
    """``size`` held-out k-digit additions that cascade (arith.problems.carries.cascade_operands);
    short, with a note, where training holds the others (2-digit sums have 2,385 cascades)."""
    task = dataset.task
    (problems,) = _held_out(
        dataset,
        lambda n: tasks.from_operands(task, carries.cascade_operands(task.n_digits, n, rng)),
        lambda batch: np.zeros(len(batch), dtype=np.int64),  # one class: every one cascades
        {0: size},
    ).values()
    if len(problems) < size:
        dataset.note(
            f"the cascade set holds {len(problems)} of its {size} problems: the other "
            f"{task.n_digits}-digit cascades are training ones"
        )
    return problems


def _held_out(
    dataset: Dataset,
    draw: Callable[[int], Problems],
    classify: Callable[[Problems], np.ndarray],
    want: dict[int, int],
) -> dict[int, Problems]:
    """Up to ``want[c]`` distinct held-out problems of each class c, from batches built by
    ``draw(n)`` (about n per class) and labelled by ``classify``.

    Candidates that are training problems are dropped (``Dataset.is_training``), so a set
    built this way never tests memorisation. A few rounds: each keeps about 70 % or more of
    its candidates; a small space may run out first.
    """
    found: dict[int, list[Problems]] = {c: [] for c in want}
    seen: set[int] = set()
    for _ in range(100):
        missing = {c: n - sum(map(len, found[c])) for c, n in want.items()}
        if max(missing.values()) <= 0:
            break
        batch = draw(max(missing.values()) * 2)
        keys = batch.keys()
        held_out = ~dataset.is_training(batch)
        fresh = np.zeros(len(keys), dtype=bool)  # each problem once (small spaces repeat)
        fresh[np.unique(keys, return_index=True)[1]] = True
        fresh &= ~np.isin(keys, np.fromiter(seen, np.uint64, len(seen)))
        label = classify(batch)
        for c, need in missing.items():
            rows = np.flatnonzero(held_out & fresh & (label == c))[: max(need, 0)]
            found[c].append(batch.take(rows))
            seen.update(keys[rows].tolist())
    return {c: Problems.concat(parts) for c, parts in found.items()}


def check_chain_share(share: float, task: TaskConfig, train_size: int | None) -> None:
    """ConfigError unless ``data.carry_chains`` is a share that this task's training can take:
    built problems join fresh batches, so only an addition too large to enumerate, with no
    fixed ``data.train_size`` pool."""
    require(0.0 <= share <= 1.0, "data.carry_chains", f"must be in [0, 1], but got {share}")
    fresh = task.name == "addition" and tasks.space_size(task) is None and train_size is None
    require(
        share == 0.0 or fresh,
        "data.carry_chains",
        f"needs fresh training problems of an addition too large to enumerate (task.name "
        f"addition, task.n_digits >= 4, data.train_size null), but got task.name={task.name}, "
        f"task.n_digits={task.n_digits}, data.train_size={train_size}",
    )

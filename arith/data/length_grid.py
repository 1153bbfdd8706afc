"""The length grid: exact match over (digits of a) x (digits of b), and how far it holds.

Length generalisation is read off accuracy per operand length (Zhou et al. 2024, "Transformers
Can Achieve Length Generalization But Not Robustly"; McLeish et al. 2024 draw the same grid as a
heatmap up to 100 x 100 digits). The grid holds ``data.length_grid_size`` problems for every
pair of lengths in ``grid_lengths`` (1..``data.length_grid_max``, every
``data.length_grid_step``-th length), none of them a training problem (arith.data.dataset). Its
metrics:

- ``lengths/exact_match/<la>x<lb>``: exact match of the cell, ``12x4`` a 12-digit a plus a
  4-digit b;
- ``lengths/extrapolation_ratio``: the longest length L such that every grid length up to L
  scores >= 99 % (a length's score pools the cells whose longer operand has that many digits,
  as ``exact_match/len_<n>`` does), over the trained length ``task.n_digits``; 0 when even the
  shortest length misses. A dip in the middle ends the run there, whatever comes after.

Beside the grid, ``longer/success`` is 1 where the reported longer set (``data.longer_n_digits``)
scores >= 99 %, else 0: its mean over seeds is the share of seeds that generalise, which a mean
exact match hides (Zhou et al. 2024: the same recipe succeeds for some seeds only).

numpy only: the decoding is arith.evaluation.evaluate's, called from arith.training.member_run.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from arith.errors import require
from arith.problems import _digits, tasks
from arith.problems.tasks import Problems, TaskConfig

CELL_KEY = "lengths/exact_match/{}x{}"
RATIO_KEY = "lengths/extrapolation_ratio"
SUCCESS_KEY = "longer/success"
SUCCESS = 0.99
"""Exact match a length must reach to count as solved (Zhou et al. 2024's bar)."""
DRAWS = 6
"""Candidates drawn per problem a cell keeps: training holds about 70 % of the trained lengths'
problems, so six leave about 14 held-out ones for every 8 asked."""
TASKS = ("addition", "multiplication")
"""The tasks of two operands whose lengths the grid can set apart."""


def check_settings(max_len: int, size: int, step: int) -> None:
    """ConfigError naming the ``data.length_grid_*`` field that is out of range."""
    require(
        0 <= max_len <= tasks.MAX_DIGITS,
        "data.length_grid_max",
        f"must be 0 (off) or a length in 1..{tasks.MAX_DIGITS}, but got {max_len}",
    )
    require(size >= 1, "data.length_grid_size", f"must be >= 1, but got {size}")
    require(step >= 1, "data.length_grid_step", f"must be >= 1, but got {step}")


def grid_lengths(max_len: int, step: int) -> list[int]:
    """The operand lengths of the grid: 1, every ``step``-th length and ``max_len``.

    ``grid_lengths(48, 4)`` -> 1, 4, 8, ..., 48; ``grid_lengths(5, 1)`` -> 1..5.
    """
    if max_len < 1:
        return []
    return sorted({1, max_len, *range(step, max_len + 1, step)})


def grid_problems(
    task: TaskConfig,
    lengths: list[int],
    per_cell: int,
    rng: np.random.Generator,
    is_training: Callable[[Problems], np.ndarray],
) -> Problems:
    """``per_cell`` random problems for every (la, lb) pair of ``lengths`` (each operand exactly
    its cell's length), none of them one ``is_training`` flags, in cell order (``la`` major).

    Each cell draws ``DRAWS`` times its size and keeps its first held-out problems: inside the
    trained lengths, where training holds most problems, a cell still fills. A cell of a tiny
    space (1 x 1 digits: 100 problems) may come back short.
    """
    la, lb = np.meshgrid(lengths, lengths, indexing="ij")
    cells = np.stack([la.ravel(), lb.ravel()], axis=1)
    lens = np.repeat(cells, per_cell * DRAWS, axis=0)
    drawn = tasks.from_operands(task, _digits.sample_exact_length(rng, lens, max(lengths)))
    held_out = np.flatnonzero(~is_training(drawn))
    cell = np.repeat(np.arange(len(cells)), per_cell * DRAWS)[held_out]
    rank = np.arange(len(held_out)) - np.searchsorted(cell, cell)  # place within its cell
    return drawn.take(held_out[rank < per_cell])


def cell_metrics(problems: Problems, exact: np.ndarray, trained: int) -> dict[str, float]:
    """``lengths/exact_match/<la>x<lb>`` of every cell the grid holds and the extrapolation
    ratio over ``trained`` digits, from the grid's problems and which were answered exactly."""
    la, lb = problems.operand_len[:, 0], problems.operand_len[:, 1]
    out: dict[str, float] = {}
    for a, b in sorted(set(zip(la.tolist(), lb.tolist(), strict=True))):
        out[CELL_KEY.format(a, b)] = float(exact[(la == a) & (lb == b)].mean())
    longest = np.maximum(la, lb)
    per_length = {int(n): float(exact[longest == n].mean()) for n in np.unique(longest)}
    out[RATIO_KEY] = extrapolation_ratio(per_length, trained)
    return out


def extrapolation_ratio(per_length: dict[int, float], trained: int) -> float:
    """The longest length L with exact match >= ``SUCCESS`` at every length of ``per_length``
    up to L, over ``trained``; 0 when the shortest length misses.

    ``{1: 1.0, 8: 1.0, 12: 0.5, 16: 1.0}`` trained on 8 -> 1.0 (the dip at 12 ends it).
    """
    reached = 0
    for length in sorted(per_length):
        if per_length[length] < SUCCESS:
            break
        reached = length
    return reached / trained


def success_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """``longer/success`` from a run's final ``metrics``, where they hold ``longer/exact_match``."""
    if "longer/exact_match" not in metrics:
        return {}
    return {SUCCESS_KEY: float(metrics["longer/exact_match"] >= SUCCESS)}


def metric_names(max_len: int, step: int) -> set[str]:
    """Every key ``cell_metrics`` can return for a grid of these settings (a superset: a cell
    left empty by the training filter reports nothing)."""
    lengths = grid_lengths(max_len, step)
    if not lengths:
        return set()
    return {RATIO_KEY} | {CELL_KEY.format(a, b) for a in lengths for b in lengths}

"""The length probe's ladder and problems: operand lengths past the trained one on a geometric
ladder, random problems with both operands that long, and carry edge cases at each length; the
metric names. The measuring (greedy decoding, where it stops, where a model's context ends) is
arith.evaluation.length_probe, which documents the probe.

numpy only, like arith.data.length_grid.
"""

from __future__ import annotations

import numpy as np

from arith.errors import require
from arith.problems import _digits, tasks
from arith.problems.tasks import Problems, TaskConfig

RATIOS = (1.5, 2, 3, 4, 6, 8, 10, 12.5, 16, 20, 25, 32, 40, 50)
"""Rungs as multiples of the trained length: about 1.25-1.5x apart, 10x among them."""
TASKS = ("addition",)
"""Tasks whose carry edge cases the probe knows (the random rungs would suit any two-operand
task; addition is where length generalisation is studied)."""
MAX_DIGITS = 1000
"""The longest rung a probe may ask for (a 1000-digit sum decodes in about two minutes per 100
problems on 2 CPU cores for a 2-layer 64-wide model)."""
EXACT_KEY, EDGE_KEY = "probe/exact_match/{}", "probe/edge/{}"
RATIO_KEY, EDGE_RATIO_KEY = "probe/extrapolation_ratio", "probe/edge_ratio"
BROKE_KEY, CONTEXT_KEY = "probe/broke_at", "probe/context"


def check_settings(max_len: int, size: int, trained: int = 0) -> None:
    """ConfigError naming the ``data.length_probe_*`` field that is out of range (``trained``:
    the digits training reaches, which the probe must start above)."""
    require(
        max_len == 0 or trained < max_len <= MAX_DIGITS,
        "data.length_probe_max",
        f"must be 0 (off) or a length in {trained + 1}..{MAX_DIGITS}"
        + (f" (above the {trained} digits training reaches)" if trained else "")
        + f", but got {max_len}",
    )
    require(size >= 1, "data.length_probe_size", f"must be >= 1, but got {size}")


def rungs(trained: int, longest: int) -> list[int]:
    """The ladder's operand lengths past ``trained``, up to ``longest`` (which ends it).

    ``rungs(8, 200)`` -> 12, 16, 24, 32, 48, 64, 80, 100, 128, 160, 200; ``rungs(8, 70)`` ends
    with 64, 70: the context's own length is the last rung.
    """
    ladder = sorted({round(trained * r) for r in RATIOS if round(trained * r) < longest})
    return [n for n in ladder if n > trained] + ([longest] if longest > trained else [])


def random_problems(task: TaskConfig, length: int, size: int, rng: np.random.Generator):
    """``size`` problems whose operands both have exactly ``length`` digits."""
    lens = np.full((size, 2), length)
    return tasks.from_operands(task, _digits.sample_exact_length(rng, lens, length))


def edge_problems(task: TaskConfig, length: int, rng: np.random.Generator) -> Problems:
    """Carry edge cases at ``length`` digits: the longest chains and the overflowing digit."""
    nines, half = 10**length - 1, 5 * 10 ** (length - 1)
    # a chain through every column with mixed digits: a + (10^L - a) = 10^L, a led by 1..8 so
    # that both operands keep L digits
    lead = int(rng.integers(1, 9))
    rest = "".join(map(str, rng.integers(0, 10, length - 1))) if length > 1 else ""
    a = int(f"{lead}{rest}") if length > 1 else lead
    rows = [[nines, 1], [1, nines], [nines, nines], [half, half], [a, 10**length - a]]
    return tasks.from_ints(task, [r for r in rows if len(str(r[1])) <= length])


def metric_names(trained: int, longest: int) -> set[str]:
    """Every key ``probe`` can return with these lengths (a superset: it stops where it breaks,
    and a shorter context ends it sooner, at a length this cannot know)."""
    lengths = range(trained + 1, longest + 1)  # every rung of any context is one of them
    names = {RATIO_KEY, EDGE_RATIO_KEY, BROKE_KEY, CONTEXT_KEY}
    return names | {key.format(n) for n in lengths for key in (EXACT_KEY, EDGE_KEY)}

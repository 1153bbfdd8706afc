"""What filtering one evaluation set against training did: its ``data/<set>/...`` metrics."""

from __future__ import annotations

from dataclasses import dataclass

DATA_METRICS = ("size", "dropped", "train_overlap")
"""The ``SetRecord`` fields each set reports as ``data/<set>/<field>``."""


@dataclass(frozen=True)
class SetRecord:
    """What filtering one evaluation set against training did (``data/<set>/...`` metrics)."""

    before: int
    """Problems drawn (``carry``, ``cascade``, ``length_grid``: asked for, their size per chain
    or cell)."""
    dropped: int
    """Problems left out as training problems (``carry``, ``cascade``, ``length_grid``: short of
    the ask)."""
    size: int
    """Problems the set holds."""
    train_overlap: int
    """Problems of the set training can draw, counted again after filtering: 0 unless the
    filter is wrong."""

"""Data: disjoint splits, the evaluation sets, batches and the length grid.

Imports only ``arith.problems`` and ``arith.text``. The dataset's names are handed on here, so
``from arith.data import build_dataset`` reads as it always has.
"""

from arith.data.dataset import DataConfig, Dataset, SetRecord, build_dataset, sample_split, split_of

__all__ = ["DataConfig", "Dataset", "SetRecord", "build_dataset", "sample_split", "split_of"]

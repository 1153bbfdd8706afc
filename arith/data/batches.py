"""Training batches as tensors: epochs over a fixed pool, or a fresh stream of problems."""

from __future__ import annotations

import numpy as np
import torch

from arith.data.dataset import STREAM_BATCHES, DataConfig, Dataset, sample_split
from arith.problems import carries
from arith.problems.tasks import Problems
from arith.text.formats import Encoded


class BatchSource:
    """Training batches as tensors: epochs over a fixed pool, or a fresh stream of problems.

    Its whole state is an RNG and a cursor, saved in checkpoints so a resumed run sees the same
    batches. The epoch's order over a pool is saved as the RNG state that drew it, not as the
    order itself: a pool of a million problems is 8 MB of order per member per checkpoint.
    """

    def __init__(self, dataset: Dataset, data: DataConfig, batch_size: int, seed: int) -> None:
        self.dataset, self.data, self.batch_size = dataset, data, batch_size
        self.rng = np.random.default_rng([seed, STREAM_BATCHES])
        self.order: np.ndarray | None = None
        self.order_drawn_by: dict | None = None  # the RNG's state where it drew ``order``
        self.cursor = 0
        self._by_op: list[np.ndarray] | None = None  # pool rows of each operation (op_weights)

    def next_problems(self) -> Problems:
        pool = self.dataset.train_pool
        if pool is not None:
            return pool.take(self.next_rows())
        task, salt = self.dataset.task, self.dataset.split_salt
        chains = round(self.batch_size * self.data.carry_chains)
        if not chains:
            return sample_split(task, self.data, salt, 0, self.batch_size, self.rng)
        built = sample_split(task, self.data, salt, 0, chains, self.rng, carries.chain_problems)
        if chains == self.batch_size:
            return built
        fresh = sample_split(task, self.data, salt, 0, self.batch_size - chains, self.rng)
        return Problems.concat([fresh, built])

    def next_rows(self) -> np.ndarray:
        """Rows of the training pool that make the next batch (a fixed pool only)."""
        pool = self.dataset.train_pool
        if self.dataset.task.name == "multi_op" and self.dataset.task.op_weights is not None:
            return self._weighted_draw(pool)
        index = []
        need = self.batch_size
        while need > 0:
            if self.order is None or self.cursor >= len(self.order):
                self.order_drawn_by = self.rng.bit_generator.state
                self.order, self.cursor = self.rng.permutation(len(pool)), 0
            chunk = self.order[self.cursor : self.cursor + need]
            self.cursor += len(chunk)
            need -= len(chunk)
            index.append(chunk)
        return np.concatenate(index)

    def _weighted_draw(self, pool: Problems) -> np.ndarray:
        """Pool indices with each operation drawn in proportion to ``task.op_weights`` (as when
        problems are sampled fresh), then a problem of it uniformly: epochs over a pool would
        give each operation its share of the pool whatever its weight."""
        if self._by_op is None:
            self._by_op = [np.flatnonzero(pool.op == i) for i in range(len(self.dataset.task.ops))]
        weights = np.array(self.dataset.task.op_weights, dtype=np.float64)
        weights[[len(rows) == 0 for rows in self._by_op]] = 0.0
        ops = self.rng.choice(len(weights), size=self.batch_size, p=weights / weights.sum())
        index = np.empty(self.batch_size, dtype=np.int64)
        for op, rows in enumerate(self._by_op):
            chosen = np.flatnonzero(ops == op)
            index[chosen] = rows[self.rng.integers(0, len(rows), size=len(chosen))]
        return index

    def next_batch(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(inputs, targets, loss_mask)`` on ``device``; targets are inputs shifted by one."""
        encoded = self.dataset.format.encode(self.next_problems())
        return to_tensors(encoded, self.dataset.format.config.mask_first_n, device)

    def state_dict(self) -> dict:
        return {
            "rng": self.rng.bit_generator.state,
            "order_drawn_by": self.order_drawn_by,
            "cursor": self.cursor,
        }

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.order_drawn_by = state.get("order_drawn_by")
        if state.get("order") is not None:  # a checkpoint from before order_drawn_by
            self.order = state["order"].numpy()
        elif self.order_drawn_by is None:
            self.order = None
        else:  # the same draw again: the RNG's state then, the same pool
            drawer = np.random.default_rng()
            drawer.bit_generator.state = self.order_drawn_by
            self.order = drawer.permutation(len(self.dataset.train_pool))
        self.cursor = int(state["cursor"])


def pack_batch(
    sources: list[BatchSource], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The next batches of a pack's members as one ``(inputs, targets, loss_mask)``, member 0's
    rows first, each member's rows as its own source would give them (padded to the widest).

    Encoded once for the whole pack; members that share one training pool (one dataset) are
    gathered from it in one indexing op.
    """
    first = sources[0].dataset
    if first.train_pool is not None and all(s.dataset is first for s in sources):
        problems = first.train_pool.take(np.concatenate([s.next_rows() for s in sources]))
    else:
        problems = Problems.concat([s.next_problems() for s in sources])
    return to_tensors(first.format.encode(problems), first.format.config.mask_first_n, device)


def to_tensors(
    encoded: Encoded, mask_first_n: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    tokens = torch.from_numpy(encoded.tokens).to(device, non_blocking=True)
    mask = torch.from_numpy(encoded.loss_mask(mask_first_n)).to(device, non_blocking=True)
    return tokens[:, :-1], tokens[:, 1:], mask

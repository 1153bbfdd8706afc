"""Splits that never share a problem, training batches, and the evaluation sets.

Small problem spaces (modular arithmetic, 3-digit multi-op, addition up to k=3) are enumerated
and every problem is assigned to exactly one split. Huge spaces (20-digit addition) are sampled,
and a problem is kept for a split only if its key hashes there, so no problem can reach two
splits whatever the sample sizes.

The extra sets (``edge``, ``longer``, ``longer_val``, ``ood``, ``carry``, ``cascade``,
``length_grid``) are drawn apart from the splits and filtered against training: per set,
``Dataset.records`` keeps its size, what was dropped and its overlap with training measured on
what was kept (``data/<set>/...``). Carry and cascade sets are built (arith.data.carry_sets).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from arith.data import carry_sets, length_grid, length_probe
from arith.data.set_records import DATA_METRICS, SetRecord
from arith.errors import require
from arith.problems import tasks
from arith.problems._sampling import mix64
from arith.problems.tasks import Problems, TaskConfig
from arith.text.formats import Format, FormatConfig, build_format


@dataclass(frozen=True)
class DataConfig:
    """Which problems a run trains and evaluates on."""

    train_size: int | None = None
    """A fixed training set of this many problems; ``None``: the whole training split of a small
    space, or fresh problems every step for a huge one."""
    val_size: int = 1000
    """Validation problems (evaluated every ``train.eval_every`` steps); capped by the split."""
    test_size: int = 2000
    """Held-out test problems, evaluated once at the end; capped by the split."""
    val_fraction: float = 0.15
    """Share of the problem space held out for validation (seed 003: 70/15/15)."""
    test_fraction: float = 0.15
    """Share of the problem space held out for testing."""
    ood_spacing: bool = False
    """Also evaluate on test problems in the spaced format, ``"1 234 + 5 678="`` (seed 000)."""
    longer_n_digits: tuple[int, ...] | None = None
    """``[lo, hi]``: also evaluate on operands of lo..hi digits, longer than trained (seed 001)."""
    longer_size: int = 500
    """Problems in the longer-operand set."""
    longer_val_n_digits: tuple[int, ...] | None = None
    """``[lo, hi]``: a validation set of longer operands, ``longer_val/`` metrics, for choosing
    a method's hyperparameters on lengths other than the reported ``longer`` ones; its range
    must not overlap ``longer_n_digits``."""
    longer_val_size: int = 500
    """Problems in the longer-operand validation set."""
    edge_cases: bool = True
    """Also evaluate on carry edge cases such as ``999999 + 1`` where the task has them."""
    carry_size: int = 0
    """Also evaluate on a ``carry`` set of full-width additions with this many problems for each
    longest carry chain 0..n_digits (arith.problems.carries), none of them a training problem; 0:
    off."""
    length_grid_max: int = 0
    """Also measure exact match on a grid of operand lengths (la, lb) up to this many digits,
    once at the end (arith.data.length_grid: ``lengths/`` metrics); 0: off."""
    length_grid_size: int = 8
    """Problems per cell of the length grid, none of them a training problem."""
    length_grid_step: int = 1
    """The grid's lengths: 1, every this-many-th length and ``length_grid_max``."""
    length_probe_max: int = 0
    """Also climb a ladder of operand lengths past the trained one, up to this many digits,
    until exact match falls below 99 % or the model's context ends, once at the end
    (arith.evaluation.length_probe: ``probe/`` metrics); 0: off."""
    length_probe_size: int = 100
    """Random problems per rung of the length probe (beside its carry edge cases)."""
    carry_chains: float = 0.0
    """Share of fresh training batches built to hold a carry chain (carries.chain_problems)."""
    cascade_size: int | None = None
    """Also evaluate on a ``cascade`` set of this many full-width additions whose carry runs
    from the ones digit through the top one (``1166 + 9834 = 11000``;
    arith.problems.carries.cascades), none of them a training problem; ``None``: as many as
    ``carry_size``, so a carry-aware evaluation has both; 0: off. Needs task.n_digits >= 2."""
    seed: int | None = None
    """Seed of the split and the evaluation sets; ``None`` follows ``train.seed``."""

    def __post_init__(self) -> None:
        require(
            self.train_size is None or self.train_size >= 1,
            "data.train_size",
            f"must be >= 1 or null, but got {self.train_size}",
        )
        require(self.val_size >= 1, "data.val_size", f"must be >= 1, but got {self.val_size}")
        require(self.test_size >= 1, "data.test_size", f"must be >= 1, but got {self.test_size}")
        for name in ("val_fraction", "test_fraction"):
            value = getattr(self, name)
            require(0.0 < value < 1.0, f"data.{name}", f"must be in (0, 1), but got {value}")
        require(
            self.val_fraction + self.test_fraction < 1.0,
            "data.test_fraction",
            f"val_fraction + test_fraction must leave room for training, "
            f"but they add up to {self.val_fraction + self.test_fraction}",
        )
        for name in ("longer_n_digits", "longer_val_n_digits"):
            lo_hi = getattr(self, name)
            require(
                lo_hi is None or (len(lo_hi) == 2 and 1 <= lo_hi[0] <= lo_hi[1] <= 200),
                f"data.{name}",
                f"expected [lo, hi] with 1 <= lo <= hi <= 200, but got {list(lo_hi or ())}",
            )
        require(self.longer_size >= 1, "data.longer_size", f"must be >= 1, got {self.longer_size}")
        require(
            self.longer_val_size >= 1,
            "data.longer_val_size",
            f"must be >= 1, got {self.longer_val_size}",
        )
        if self.longer_n_digits and self.longer_val_n_digits:
            (lo, hi), (vlo, vhi) = self.longer_n_digits, self.longer_val_n_digits
            require(
                vhi < lo or vlo > hi,
                "data.longer_val_n_digits",
                f"must not overlap the reported data.longer_n_digits={[lo, hi]}, "
                f"but got {[vlo, vhi]}",
            )
        require(self.carry_size >= 0, "data.carry_size", f"must be >= 0, got {self.carry_size}")
        require(
            self.cascade_size is None or self.cascade_size >= 0,
            "data.cascade_size",
            f"must be >= 0 or null, got {self.cascade_size}",
        )
        length_grid.check_settings(
            self.length_grid_max, self.length_grid_size, self.length_grid_step
        )
        length_probe.check_settings(self.length_probe_max, self.length_probe_size)

    def check_task(self, task: TaskConfig) -> None:
        """ConfigError unless every longer set is longer than any trained operand."""
        trained = tasks.operand_width(task)
        for name in ("longer_n_digits", "longer_val_n_digits"):
            lo_hi = getattr(self, name)
            require(
                lo_hi is None or lo_hi[0] > trained,
                f"data.{name}",
                f"must start above the {trained} digits training reaches "
                f"(task.n_digits), but got {list(lo_hi or ())}",
            )
        length_probe.check_settings(self.length_probe_max, self.length_probe_size, trained)
        carry_sets.check_chain_share(self.carry_chains, task, self.train_size)

    def resolved_seed(self, run_seed: int) -> int:
        """The seed of the sets: ``data.seed``, else the run's ``train.seed``."""
        return run_seed if self.seed is None else self.seed

    def cascade_problems(self, task: TaskConfig) -> int:
        """Problems the ``cascade`` set asks for: ``cascade_size``, else ``carry_size``; 0 for
        a task other than addition or of 1 digit (no carry can travel)."""
        size = self.carry_size if self.cascade_size is None else self.cascade_size
        return size if task.name == "addition" and task.n_digits >= 2 else 0

    def longest_operand(self, task: TaskConfig) -> int:
        """Digits of the longest operand any set holds (training or evaluation)."""
        ranges = [r for r in (self.longer_n_digits, self.longer_val_n_digits) if r is not None]
        widest = [tasks.operand_width(task), self.length_grid_max, *(hi for _, hi in ranges)]
        return max(widest)


# Every consumer of randomness draws from a numpy stream of its own, default_rng([seed, id]),
# so adding or changing one leaves the others' draws as they were. The ids are part of what a
# seed means: changing one changes every run's data.
STREAM_SETS = 1
"""The training pool and the evaluation sets (``build_dataset``)."""
STREAM_SPLIT_SALT = 2
"""The salt of the hash that assigns a problem to a split."""
STREAM_BATCHES = 3
"""Training batches (arith.data.batches; seeded with ``train.seed``)."""
STREAM_TRAIN_SAMPLE = 4
"""The training problems decoded for train exact match (arith.training.trainer; ``train.seed``)."""
STREAM_LONGER_VAL = 5
"""The ``longer_val`` set, apart so that adding it changes no other set."""
STREAM_LENGTH_GRID = 6
"""The length grid (arith.data.length_grid), apart so that adding it changes no other set."""
STREAM_CASCADE = 7
"""The ``cascade`` set, apart so that adding it changes no other set."""

OVERSAMPLE, MIN_DRAW = 1.2, 16
"""``sample_split`` draws 20 % more than the split's share should yield, and at least a few, so
one round of rejection usually suffices; a short round just draws again."""


@dataclass
class Dataset:
    """The problems of one run: a training source and named evaluation sets."""

    task: TaskConfig
    format: Format
    train_pool: Problems | None
    """Fixed training problems, or ``None`` when training draws fresh problems each step."""
    eval_sets: dict[str, Problems] = field(default_factory=dict)
    """``val``, ``test`` and the extra sets named in the module docstring."""
    eval_formats: dict[str, Format] = field(default_factory=dict)
    """A set's own format where it differs from the training one (``ood`` is spaced)."""
    split_salt: int = 0
    split_fractions: tuple[float, float] = (0.15, 0.15)
    """``data.val_fraction`` and ``data.test_fraction``: where a key hashes to (``split_of``)."""
    enumerated: bool = False
    """The training pool is a whole enumerated split (else training problems hash to split 0)."""
    length_grid: Problems | None = None
    """The length grid's problems (arith.data.length_grid), measured apart from ``eval_sets``: its
    metrics are per cell, not the breakdowns of a set."""
    records: dict[str, SetRecord] = field(default_factory=dict)
    """Per evaluation set: its size, what filtering dropped, its overlap with training."""
    notes: list[str] = field(default_factory=list)
    """What a reader should know about the sets (a set left out, a set short of its size)."""
    _pool_keys: tuple[Problems, np.ndarray] | None = field(default=None, init=False, repr=False)

    def format_of(self, name: str) -> Format:
        return self.eval_formats.get(name, self.format)

    def train_seq_len(self) -> int:
        """Longest training sequence: the positions a learned table trains."""
        return self.format.max_seq_len()

    def max_seq_len(self) -> int:
        """Longest sequence any set can produce: the model's context length."""
        lengths = [self.train_seq_len()]
        if self.length_grid is not None:
            widest = int(self.length_grid.operand_len.max())
            lengths.append(self.format.max_seq_len(max(widest, self.task.n_digits)))
        for name, problems in self.eval_sets.items():
            widest = int(problems.operand_len.max()) if len(problems) else 1
            lengths.append(self.format_of(name).max_seq_len(max(widest, self.task.n_digits)))
        return max(lengths)

    def is_training(self, problems: Problems) -> np.ndarray:
        """(N,) True where training can draw the problem: a member of an enumerated pool, or
        a problem of trained operand lengths whose key hashes to the training split."""
        keys = problems.keys()
        if self.enumerated:
            pool = self._sorted_pool_keys()
            at = np.searchsorted(pool, keys).clip(max=len(pool) - 1)  # a pool is never empty
            return pool[at] == keys
        within = problems.operand_len.max(axis=1) <= tasks.operand_width(self.task)
        return within & (split_of(keys, self.split_salt, *self.split_fractions) == 0)

    def _sorted_pool_keys(self) -> np.ndarray:
        """The training pool's keys, sorted once (hashing a big pool takes a while)."""
        if self._pool_keys is None or self._pool_keys[0] is not self.train_pool:
            self._pool_keys = (self.train_pool, np.sort(self.train_pool.keys()))
        return self._pool_keys[1]

    def add_set(self, name: str, problems: Problems, before: int | None = None) -> None:
        """Add evaluation set ``name`` without its training problems (``held_out``)."""
        kept = self.held_out(name, problems, before)
        if kept is not None:
            self.eval_sets[name] = kept

    def held_out(self, name: str, problems: Problems, before: int | None = None) -> Problems | None:
        """``problems`` without training problems, recording what that dropped as set
        ``name``; None, with a note, when none is left. ``before``: the size asked for, if the
        set may come back short of it."""
        kept = problems.take(np.flatnonzero(~self.is_training(problems)))
        before = len(problems) if before is None else before
        overlap = int(self.is_training(kept).sum())
        self.records[name] = SetRecord(before, before - len(kept), len(kept), overlap)
        if len(kept) == 0:
            self.note(f"the {name} set is left out: all {before} of its problems are training ones")
            return None
        return kept

    def note(self, text: str) -> None:
        """Keep ``text`` and warn with it, so a run's log (a trial's, under a sweep) shows it."""
        self.notes.append(text)
        warnings.warn(text, stacklevel=3)

    def data_metrics(self) -> dict[str, int]:
        """``data/<set>/<key>`` for each key of ``DATA_METRICS``."""
        out: dict[str, int] = {}
        for name, record in self.records.items():
            for key in DATA_METRICS:
                out[f"data/{name}/{key}"] = getattr(record, key)
        return out


def split_of(keys: np.ndarray, salt: int, val_fraction: float, test_fraction: float) -> np.ndarray:
    """Split index (0 train, 1 val, 2 test) of each problem key, a pure function of key and salt."""
    h = mix64(keys.astype(np.uint64) ^ np.uint64(salt & 0xFFFFFFFFFFFFFFFF))
    u = (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    return np.where(
        u < 1.0 - val_fraction - test_fraction, 0, np.where(u < 1.0 - test_fraction, 1, 2)
    )


def dataset_key(task: TaskConfig, fmt: FormatConfig, data: DataConfig, seed: int) -> tuple:
    """What ``build_dataset`` depends on: runs with equal keys get equal datasets."""
    return task, fmt, data, data.resolved_seed(seed)


def build_dataset(task: TaskConfig, fmt: FormatConfig, data: DataConfig, seed: int) -> Dataset:
    """Splits and evaluation sets, deterministic in ``data.seed`` (or the run's ``seed``)."""
    data_seed = data.resolved_seed(seed)
    rng = np.random.default_rng([data_seed, STREAM_SETS])
    salt = int(np.random.default_rng([data_seed, STREAM_SPLIT_SALT]).integers(0, 2**63))
    dataset = Dataset(
        task=task,
        format=build_format(fmt, task),
        train_pool=None,
        split_salt=salt,
        split_fractions=(data.val_fraction, data.test_fraction),
        enumerated=tasks.space_size(task) is not None,
    )
    if dataset.enumerated:
        splits = _enumerated_splits(task, data, rng)
        train = splits["train"]
        if data.train_size is not None and data.train_size < len(train):
            train = train.take(rng.permutation(len(train))[: data.train_size])
        dataset.train_pool = train
        for name, size in (("val", data.val_size), ("test", data.test_size)):
            dataset.add_set(name, splits[name].take(tasks.set_rows(task, splits[name].op, size)))
    else:
        if data.train_size is not None:
            dataset.train_pool = sample_split(task, data, salt, 0, data.train_size, rng)
        dataset.add_set("val", sample_split(task, data, salt, 1, data.val_size, rng))
        dataset.add_set("test", sample_split(task, data, salt, 2, data.test_size, rng))
    _add_extra_sets(dataset, data, rng, data_seed)
    if data.length_grid_max:
        lengths = length_grid.grid_lengths(data.length_grid_max, data.length_grid_step)
        own_rng = np.random.default_rng([data_seed, STREAM_LENGTH_GRID])
        size = data.length_grid_size
        grid = length_grid.grid_problems(task, lengths, size, own_rng, dataset.is_training)
        dataset.length_grid = dataset.held_out("length_grid", grid, len(lengths) ** 2 * size)
    return dataset


def _add_extra_sets(
    dataset: Dataset, data: DataConfig, rng: np.random.Generator, data_seed: int
) -> None:
    """``ood``, ``longer``, ``carry``, ``edge``, ``longer_val`` and ``cascade``, each without
    training problems. ``longer_val`` and ``cascade`` draw from streams of their own, so adding
    them changes no other set."""
    task = dataset.task
    if data.ood_spacing:
        dataset.add_set("ood", dataset.eval_sets["test"])
        dataset.eval_formats["ood"] = build_format(FormatConfig(name="spaced"), task)
    if data.longer_n_digits is not None:
        lo, hi = data.longer_n_digits
        dataset.add_set("longer", tasks.sample(task, data.longer_size, rng, n_digits=(lo, hi)))
    if data.carry_size:
        dataset.add_set(
            "carry",
            carry_sets.carry_set(dataset, data.carry_size, rng),
            data.carry_size * (task.n_digits + 1),
        )
    edge = tasks.edge_cases(task) if data.edge_cases else None
    if edge is not None and len(edge):
        dataset.add_set("edge", edge)
    if data.longer_val_n_digits is not None:
        lo, hi = data.longer_val_n_digits
        own_rng = np.random.default_rng([data_seed, STREAM_LONGER_VAL])
        dataset.add_set("longer_val", tasks.sample(task, data.longer_val_size, own_rng, (lo, hi)))
    cascade_size = data.cascade_problems(task)
    if cascade_size:
        own_rng = np.random.default_rng([data_seed, STREAM_CASCADE])
        cascade = carry_sets.cascade_set(dataset, cascade_size, own_rng)
        dataset.add_set("cascade", cascade, cascade_size)


def sample_split(
    task: TaskConfig,
    data: DataConfig,
    salt: int,
    split: int,
    n: int,
    rng: np.random.Generator,
    draw=tasks.sample,
) -> Problems:
    """``n`` problems of ``draw(task, n, rng)`` whose keys hash to ``split``, by rejection."""
    share = (1.0 - data.val_fraction - data.test_fraction, data.val_fraction, data.test_fraction)
    parts, have = [], 0
    while have < n:
        count = int((n - have) / share[split] * OVERSAMPLE) + MIN_DRAW
        batch = draw(task, count, rng)
        keep = split_of(batch.keys(), salt, data.val_fraction, data.test_fraction) == split
        parts.append(batch.take(np.flatnonzero(keep)))
        have += int(keep.sum())
    return Problems.concat(parts).take(np.arange(n))


def _enumerated_splits(
    task: TaskConfig, data: DataConfig, rng: np.random.Generator
) -> dict[str, Problems]:
    """Every problem of a small space, shuffled and cut into exact fractions."""
    everything = tasks.enumerate_all(task)
    order = rng.permutation(len(everything))
    n_val = round(len(order) * data.val_fraction)
    n_test = round(len(order) * data.test_fraction)
    n_train = len(order) - n_val - n_test
    return {
        "train": everything.take(order[:n_train]),
        "val": everything.take(order[n_train : n_train + n_val]),
        "test": everything.take(order[n_train + n_val :]),
    }

"""The ``sweep:`` block of a search-space file: what is searched, how, and how much runs at once
(``SweepSettings``, with its scheduler and per-trial resources), and the checks of its values
that need no other block. ``arith.dataconf.from_dict`` reads the block into these dataclasses
(types and unknown keys); ``check_settings`` then says, in one line naming the dotted path and
the bad value, which value is out of range or does not go with another."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Literal

from arith.errors import ConfigError, require

MAX_NAME = 100
_NAME = re.compile(rf"[A-Za-z0-9_.-]{{1,{MAX_NAME}}}")


@dataclass(frozen=True)
class SchedulerSpec:
    """Early stopping of trials (``fifo``: none; ``asha``: Li et al. 2020), in units of reports."""

    name: Literal["fifo", "asha"] = "fifo"
    grace_period: int = 1
    reduction_factor: float = 3.0
    max_t: int = 100


@dataclass(frozen=True)
class ResourcesSpec:
    """What one trial holds; ``gpu`` may be a fraction so small trials share a device, or
    ``auto``: a share decided on the driver once the cluster is known
    (``sweeps.runtime.placement.GPU_AUTO_RULE``)."""

    cpu: float = 1.0
    gpu: float | Literal["auto"] = 0.0


@dataclass(frozen=True)
class SweepSettings:
    """The ``sweep:`` block: what is searched, how, and how much runs at once."""

    name: str
    metric: str = "val/exact_match"
    mode: Literal["max", "min"] = "max"
    search: Literal["grid", "random", "optuna"] = "grid"
    seed: int = 0
    num_samples: int = 1
    seeds: tuple[int, ...] | None = None
    scheduler: SchedulerSpec = field(default_factory=SchedulerSpec)
    max_concurrent: int | None = None
    resources: ResourcesSpec = field(default_factory=ResourcesSpec)
    max_failures: int = 1
    time_budget_s: float | None = None
    # Seconds between the checkpoints a trial hands Tune (its last report always carries one).
    # Each costs a copy into storage; 0 checkpoints at every evaluation.
    checkpoint_every_s: float = 10.0
    # Trials that share every shape-determining key train up to this many at once, as one
    # stacked model in one Tune trial (sweeps.spec.packing); each is still its own trial in MLflow.
    # "auto": as many as fit the trial's memory (sweeps.spec.packing.auto_pack_size).
    pack: int | Literal["auto"] = 1


def check_settings(s: SweepSettings) -> None:
    """Every value of the ``sweep:`` block in range, and the ones that go together agreeing;
    raises ConfigError naming the first bad one."""
    # The name is a folder under --out that --overwrite deletes: one path component, never
    # "." or "..", which would name --out itself or the folder above it.
    require(
        bool(_NAME.fullmatch(s.name)) and s.name not in (".", ".."),
        "sweep.name",
        f"expected 1 to {MAX_NAME} letters, digits or ._- (not . or ..), but got {s.name!r}",
    )
    _check_selection_metric(s)
    require(s.num_samples >= 1, "sweep.num_samples", f"must be >= 1, but got {s.num_samples}")
    require(s.max_failures >= 0, "sweep.max_failures", f"must be >= 0, but got {s.max_failures}")
    require(
        0 <= s.checkpoint_every_s < math.inf,
        "sweep.checkpoint_every_s",
        f"must be >= 0, but got {s.checkpoint_every_s}",
    )
    require(
        s.max_concurrent is None or s.max_concurrent >= 1,
        "sweep.max_concurrent",
        f"must be >= 1 or null, but got {s.max_concurrent}",
    )
    for key in ("cpu", "gpu"):  # finite: Ray cannot schedule an infinite share
        value = getattr(s.resources, key)
        if key == "gpu" and value == "auto":
            continue
        require(0 <= value < math.inf, f"sweep.resources.{key}", f"must be >= 0, got {value}")
    require(
        s.time_budget_s is None or 0 < s.time_budget_s < math.inf,
        "sweep.time_budget_s",
        f"must be > 0 or null, but got {s.time_budget_s}",
    )
    _check_seeds(s)
    _check_pack(s)
    _check_scheduler(s.scheduler)


def _check_seeds(s: SweepSettings) -> None:
    if s.seeds is not None:
        require(len(s.seeds) > 0, "sweep.seeds", "expected a non-empty list, but got []")
        require(
            len(set(s.seeds)) == len(s.seeds),
            "sweep.seeds",
            f"expected each seed once, but got {list(s.seeds)}",
        )
        # With Optuna, each drawn config trains its seeds as one pack (sweeps.spec.seed_trials).
        require(
            s.search != "optuna" or len(s.seeds) == 1 or s.pack == 1,
            "sweep.pack",
            f"{s.pack}: Optuna's trials over seeds are packs of their seeds already (use 1)",
        )


def _check_pack(s: SweepSettings) -> None:
    require(s.pack == "auto" or s.pack >= 1, "sweep.pack", f"must be >= 1 or auto, got {s.pack}")
    if s.pack != 1:  # members of a pack are drawn up front and decided on together
        require(
            s.search != "optuna",
            "sweep.pack",
            f"{s.pack} needs search grid or random, but got search optuna (use sweep.pack: 1)",
        )
        require(
            s.scheduler.name == "fifo",
            "sweep.pack",
            f"{s.pack} needs scheduler fifo, but got {s.scheduler.name} (use sweep.pack: 1)",
        )


def _check_scheduler(sch: SchedulerSpec) -> None:
    if sch.name == "asha":
        require(
            sch.grace_period >= 1,
            "sweep.scheduler.grace_period",
            f"must be >= 1, got {sch.grace_period}",
        )
        require(
            sch.max_t >= sch.grace_period,
            "sweep.scheduler.max_t",
            f"must be >= grace_period ({sch.grace_period}), got {sch.max_t}",
        )
        require(
            sch.reduction_factor > 1,
            "sweep.scheduler.reduction_factor",
            f"must be > 1, got {sch.reduction_factor}",
        )


def _check_selection_metric(s: SweepSettings) -> None:
    """``sweep.metric`` chooses the best trial (and drives Optuna and ASHA): a validation or
    training metric, in the direction its name says is better."""
    from sweeps.spec.metrics import held_out_message, is_held_out, metric_direction

    if is_held_out(s.metric):  # the message reads the name after the set
        raise ConfigError("sweep.metric", held_out_message(s.metric))
    better = metric_direction(s.metric)
    lower = "lower" if better == "min" else "higher"
    require(
        better is None or s.mode == better,
        "sweep.mode",
        f"{s.mode!r} would pick the worst {s.metric}, which is better when {lower}; use {better}",
    )

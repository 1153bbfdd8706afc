"""What the spec means to Ray Tune: its param space, searcher and scheduler, and the packs of
a packed sweep (``sweep.pack``), which follow the draws of Tune's own variant generator.

``sweeps.spec`` holds the spec as validated data and imports no Ray; this module turns it into
Tune's objects for the Tuner (``sweeps.runtime.tuner``) and the dry run.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from sweeps.spec.packing import PACK_KEY, Member
from sweeps.spec.seed_trials import uses_seed_trials

# What `sweep.pack: auto` may fill: per CPU trial, and per whole GPU of a trial's share. The
# driver cannot see the workers' devices, so it plans for the smallest accelerator a sweep is
# likely to meet (16 GiB: T4, V100) and leaves a fifth for the allocator and evaluation.
AUTO_CPU_BYTES = 2 * 2**30
AUTO_GPU_BYTES = int(0.8 * 16 * 2**30)


def param_space(spec) -> dict[str, Any]:
    """Tune's param space: flat dotted keys -> grid_search / sampling domains."""
    from ray import tune

    space: dict[str, Any] = {}
    grid = spec.sweep.search == "grid"
    for key, dim in spec.space.items():
        values = list(dim.values)
        if dim.kind == "grid":
            space[key] = tune.grid_search(values) if grid else tune.choice(values)
        elif dim.kind == "choice":
            space[key] = tune.choice(values)
        else:
            space[key] = getattr(tune, dim.kind)(*values)
    # Optuna's trials over seeds train their seeds inside the trial (sweeps.spec.seed_trials).
    if spec.sweep.seeds is not None and not uses_seed_trials(spec.sweep):
        seeds = list(spec.sweep.seeds)
        space["train.seed"] = tune.grid_search(seeds) if len(seeds) > 1 else seeds[0]
    return space


def search_algorithm(spec):
    """Optuna's TPE (seeded) for ``search: optuna``; Tune's variant generator otherwise."""
    s = spec.sweep
    if s.search == "optuna":
        import optuna
        from ray.tune.search.optuna import OptunaSearch

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        # Optuna warns of a list choice (Adam's betas, a coupled pair) that its persistent
        # storages could not keep; Tune's searcher keeps its study in memory, where it can.
        warnings.filterwarnings("ignore", "Choices for a categorical distribution", UserWarning)
        sampler = optuna.samplers.TPESampler(seed=s.seed)
        return OptunaSearch(metric=s.metric, mode=s.mode, sampler=sampler)
    from ray.tune.search import BasicVariantGenerator

    # No max_concurrent: every trial is made up front (sweeps.runtime.tuning says why).
    return BasicVariantGenerator(random_state=s.seed)


def scheduler(spec):
    """ASHA (Li et al. 2020) over reports, or Tune's FIFO."""
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    s = spec.sweep
    if s.scheduler.name == "asha":
        return ASHAScheduler(
            metric=s.metric,
            mode=s.mode,
            time_attr="training_iteration",
            grace_period=s.scheduler.grace_period,
            reduction_factor=s.scheduler.reduction_factor,
            max_t=s.scheduler.max_t,
        )
    return FIFOScheduler()


def trial_points(spec) -> list[dict[str, Any]]:
    """Every trial's flat config, in the order and with the random draws of Tune's variant
    generator for the same param space and ``sweep.seed``: trial i here is the trial whose id
    ends in ``_{i:05d}`` in an unpacked sweep."""
    import numpy as np
    from ray.tune.search.variant_generator import generate_variants

    # The generator Tune's variant generator draws from, given the same seed.
    rng = np.random.default_rng(spec.sweep.seed)
    points = []
    for _ in range(spec.sweep.num_samples):  # Tune draws num_samples passes over the grid
        for _, resolved in generate_variants({"config": param_space(spec)}, random_state=rng):
            points.append(dict(resolved["config"]))
    return points


def build_packs(spec, gpu: float = 0.0) -> list[list[Member]]:
    """The sweep's packs, in the order of their first member; members in trial order. ``gpu``:
    the GPU share a pack trains on (the sweep's placement, ``sweeps.runtime.placement``)."""
    from arith.training.packing import pack_key
    from sweeps.spec.space import resolve_run_config

    groups: dict[tuple, list[Member]] = {}
    for index, point in enumerate(trial_points(spec)):
        key = pack_key(resolve_run_config(spec.base, point, spec.derived))
        groups.setdefault(key, []).append(Member(index, point))
    packs = []
    for members in groups.values():
        size = spec.sweep.pack
        if size == "auto":
            config = resolve_run_config(spec.base, members[0].point, spec.derived)
            size = auto_pack_size(spec, config, len(members), gpu)
        packs += [members[i : i + size] for i in range(0, len(members), size)]
    return sorted(packs, key=lambda pack: pack[0].index)


def auto_pack_size(spec, config, n_members: int, gpu: float = 0.0) -> int:
    """``sweep.pack: auto`` for a group of ``n_members`` same-shape trials: as many as fit the
    trial's memory (``arith.training.cost.training_bytes``; on a GPU, its ``gpu`` share of one),
    and no more than keeps every concurrent slot busy when ``sweep.max_concurrent`` is set (one
    pack uses one slot)."""
    from arith.training.cost import describe

    budget = AUTO_GPU_BYTES * gpu if gpu > 0 else AUTO_CPU_BYTES
    size = min(n_members, max(1, int(budget // describe(config)["train_bytes"])))
    if spec.sweep.max_concurrent:
        size = min(size, math.ceil(n_members / spec.sweep.max_concurrent))
    return size


def pack_param_space(packs: list[list[Member]]) -> dict[str, Any]:
    """Tune's param space of a packed sweep: one grid point per pack."""
    from ray import tune

    return {PACK_KEY: tune.grid_search(list(range(len(packs))))}

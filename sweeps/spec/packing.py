"""Packed trials (``sweep.pack: N``): same-shape trials trained together in one Tune trial.

The driver draws every trial's config itself, in the order (and with the random draws) of
Tune's variant generator, groups configs that ``arith.training.packing.pack_key`` says may share one
stacked model, and cuts each group into packs of at most N. Tune then runs one trial per pack
(config ``{"pack": k}``); the trainable trains its members with
``arith.training.trainer.train_pack``.

Each member keeps the trial id it would have had unpacked (``<experiment>_<index>``: its index
among all trials, as the dry run numbers them), so MLflow, ``trials.csv`` and the tables read
the same as for an unpacked sweep. Packing and numbering are pure functions of the spec, so a
resumed driver rebuilds the same table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

PACK_KEY = "pack"  # the one key of a pack trial's Tune config

# What `sweep.pack: auto` may fill: per CPU trial, and per whole GPU of a trial's share. The
# driver cannot see the workers' devices, so it plans for the smallest accelerator a sweep is
# likely to meet (16 GiB: T4, V100) and leaves a fifth for the allocator and evaluation.
AUTO_CPU_BYTES = 2 * 2**30
AUTO_GPU_BYTES = int(0.8 * 16 * 2**30)


@dataclass(frozen=True)
class Member:
    """One trial inside a pack: its index among all trials and its flat Tune config."""

    index: int
    point: dict[str, Any]


def trial_points(spec) -> list[dict[str, Any]]:
    """Every trial's flat config, in the order and with the random draws of Tune's variant
    generator for the same param space and ``sweep.seed``: trial i here is the trial whose id
    ends in ``_{i:05d}`` in an unpacked sweep."""
    import numpy as np
    from ray.tune.search.variant_generator import generate_variants

    from sweeps.spec.space import param_space

    # The generator Tune's variant generator draws from, given the same seed.
    rng = np.random.default_rng(spec.sweep.seed)
    points = []
    for _ in range(spec.sweep.num_samples):  # Tune draws num_samples passes over the grid
        for _, resolved in generate_variants({"config": param_space(spec)}, random_state=rng):
            points.append(dict(resolved["config"]))
    return points


def build_packs(spec) -> list[list[Member]]:
    """The sweep's packs, in the order of their first member; members in trial order."""
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
            size = auto_pack_size(spec, config, len(members))
        packs += [members[i : i + size] for i in range(0, len(members), size)]
    return sorted(packs, key=lambda pack: pack[0].index)


def auto_pack_size(spec, config, n_members: int) -> int:
    """``sweep.pack: auto`` for a group of ``n_members`` same-shape trials: as many as fit the
    trial's memory (``arith.training.cost.training_bytes``), and no more than keeps every concurrent
    slot busy when ``sweep.max_concurrent`` is set (one pack uses one slot)."""
    from arith.training.cost import describe

    resources = spec.sweep.resources
    budget = AUTO_GPU_BYTES * resources.gpu if resources.gpu > 0 else AUTO_CPU_BYTES
    size = min(n_members, max(1, int(budget // describe(config)["train_bytes"])))
    if spec.sweep.max_concurrent:
        size = min(size, math.ceil(n_members / spec.sweep.max_concurrent))
    return size


def pack_param_space(packs: list[list[Member]]) -> dict[str, Any]:
    """Tune's param space of a packed sweep: one grid point per pack."""
    from ray import tune

    return {PACK_KEY: tune.grid_search(list(range(len(packs))))}


def member_trial_id(pack_trial_id: str, member: Member) -> str:
    """``abcde_00001`` (the pack's Tune id) and member 6 -> ``abcde_00006``."""
    prefix = pack_trial_id.rsplit("_", 1)[0]
    return f"{prefix}_{member.index:05d}"

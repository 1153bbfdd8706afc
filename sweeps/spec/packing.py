"""Packed trials (``sweep.pack: N``): same-shape trials trained together in one Tune trial.

The driver draws every trial's config itself, in the order (and with the random draws) of
Tune's variant generator, groups configs that ``arith.training.packing.pack_key`` says may share
one stacked model, and cuts each group into packs of at most N (``sweeps.runtime.tune_space``,
which holds what needs Ray). Tune then runs one trial per pack (config ``{"pack": k}``); the
trainable trains its members with ``arith.training.trainer.train_pack``.

Each member keeps the trial id it would have had unpacked (``<experiment>_<index>``: its index
among all trials, as the dry run numbers them), so MLflow, ``trials.csv`` and the tables read
the same as for an unpacked sweep. Packing and numbering are pure functions of the spec, so a
resumed driver rebuilds the same table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PACK_KEY = "pack"  # the one key of a pack trial's Tune config


@dataclass(frozen=True)
class Member:
    """One trial inside a pack: its index among all trials and its flat Tune config."""

    index: int
    point: dict[str, Any]


def member_trial_id(pack_trial_id: str, member: Member) -> str:
    """``abcde_00001`` (the pack's Tune id) and member 6 -> ``abcde_00006``."""
    prefix = pack_trial_id.rsplit("_", 1)[0]
    return f"{prefix}_{member.index:05d}"

"""Which runs may train together as one packed model (arith.model.members)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arith.dataconf import flatten
from arith.errors import require

if TYPE_CHECKING:
    from arith.config import RunConfig

# What may differ between the members of a pack: everything else fixes the shapes of the
# stacked parameters and batches (model shape, task, format, data sizes, batch size) or is one
# setting of the shared process (device, precision, compile). Dropout rates may differ, but
# the members draw their masks from one RNG, so with dropout a member matches its run alone
# in distribution, not bit for bit.
PACK_FREE = (
    "optim.",
    "model.init_std",
    "model.dropout",
    "data.seed",
    "train.seed",
    "train.max_steps",
    "train.epochs",
    "train.flops_budget",
    "train.tokens_budget",
    "train.eval_every",
    "train.train_eval_size",
    "train.monitor",
    "train.patience",
    "train.min_delta",
    "train.target",
    "train.min_steps",
    "train.threshold",
    "train.time_budget_s",
)


def pack_key(config: RunConfig) -> tuple:
    """What configs must share to train in one pack: every setting outside ``PACK_FREE``."""
    flat = flatten(config.to_dict())
    shared = {k: v for k, v in flat.items() if not k.startswith(PACK_FREE)}
    return tuple(sorted((k, repr(v)) for k, v in shared.items()))


def check_packable(configs: list[RunConfig]) -> None:
    """ConfigError naming the first setting that two members of a pack do not share."""
    require(len(configs) >= 1, "pack", "needs at least one run config")
    first = dict(pack_key(configs[0]))
    for index, config in enumerate(configs[1:], start=1):
        for key, value in pack_key(config):
            require(
                first[key] == value,
                key,
                f"must be the same for every member of a pack, but member 0 has {first[key]} "
                f"and member {index} has {value}",
            )

"""What a metric's name says: which way is better, and whether it belongs to a held-out set
(never selected on). The one rule the spec's checks, table selection and the convergence
labels read."""

from __future__ import annotations

# Sets reported once, at the end, and never chosen on: a trial selected on one of them would
# make its figure the maximum of noise, not a held-out estimate. Whole namespaces ("longer/"),
# so a validation set such as longer_val/ stays selectable.
HELD_OUT_PREFIXES = ("test/", "ood/", "longer/", "edge/", "carry/")


def metric_direction(metric: str) -> str | None:
    """The better direction a metric's name implies: ``min`` for a loss, an error or a number
    of steps to a target, ``max`` for exact match or accuracy, None when the name does not
    say (``val/exact_match/len_5``: max)."""
    name = metric.split("/", 1)[-1]
    if any(word in name for word in ("loss", "error", "steps_to")):
        return "min"
    if "exact_match" in name or "accuracy" in name:
        return "max"
    return None


def is_held_out(metric: str) -> bool:
    """Whether ``metric`` belongs to a held-out set (HELD_OUT_PREFIXES), never selected on."""
    return metric.startswith(HELD_OUT_PREFIXES)


def held_out_message(metric: str) -> str:
    """Why a held-out metric cannot select, and the validation metric to use instead."""
    name = metric.split("/", 1)[-1]
    return (
        f"{metric!r} is a held-out metric; select on validation (e.g. 'val/{name}') and the "
        "held-out sets are reported for the trial chosen there"
    )

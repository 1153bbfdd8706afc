"""What a metric's name says: which way is better, whether it is a fraction of right answers,
and whether it belongs to a held-out set (never selected on). The one rule the spec's checks,
table selection and fits, the convergence labels and the plots read."""

from __future__ import annotations

# Sets reported once, at the end, and never chosen on: a trial selected on one of them would
# make its figure the maximum of noise, not a held-out estimate. Whole namespaces ("longer/"),
# so a validation set such as longer_val/ stays selectable.
HELD_OUT_PREFIXES = ("test/", "ood/", "longer/", "edge/", "carry/", "cascade/", "lengths/")
# The namespaces a trial measures once, at its end (its data's sizes and overlaps among them):
# single values, which a child run keeps as tags of those names, so that MLflow shows them as
# values and its charts keep to the curves (train/, val/, perf/, time/).
FINAL_NAMESPACES = (
    "best", "carry", "cascade", "data", "edge", "lengths", "longer", "longer_val", "ood",
    "probe", "test",
)  # fmt: skip
# The names of a share of answers (or answer tokens) that are right, whatever set or slice
# they are of: ``test/exact_match/len_5``, ``ood/normalised_match``, ``train/token_accuracy``,
# ``test/digit_accuracy/0`` (the ones digit).
FRACTION_WORDS = ("exact_match", "normalised_match", "accuracy")


def metric_direction(metric: str) -> str | None:
    """The better direction a metric's name implies: ``min`` for a loss, an error or a number
    of steps to a target, ``max`` for a fraction of right answers (``is_fraction``: exact
    match, normalised match, accuracy), None when the name does not say
    (``val/exact_match/len_5``: max)."""
    name = metric.split("/", 1)[-1]
    if any(word in name for word in ("loss", "error", "steps_to")):
        return "min"
    if is_fraction(name):
        return "max"
    return None


def is_fraction(metric: str) -> bool:
    """Whether ``metric`` is a fraction of right answers: a number in [0, 1] that rises to 1 as
    the model learns (FRACTION_WORDS). Such a metric is drawn on a linear 0-1 axis (and a 0-1
    colour scale), fitted as its error ``1 - value`` (which falls with scale, as the law
    does), and counts as still improving by percentage points rather than by a share of its
    own value. A share that falls as the model learns (``short_answers``) is not one."""
    return any(word in metric for word in FRACTION_WORDS)


def is_held_out(metric: str) -> bool:
    """Whether ``metric`` belongs to a held-out set (HELD_OUT_PREFIXES), never selected on."""
    return metric.startswith(HELD_OUT_PREFIXES)


def is_final_figure(metric: str) -> bool:
    """Whether ``metric`` is measured once, at a trial's end (FINAL_NAMESPACES)."""
    namespace, slash, _ = metric.partition("/")
    return bool(slash) and namespace in FINAL_NAMESPACES


def held_out_message(metric: str) -> str:
    """Why a held-out metric cannot select, and the validation metric to use instead."""
    name = metric.split("/", 1)[-1]
    return (
        f"{metric!r} is a held-out metric; select on validation (e.g. 'val/{name}') and the "
        "held-out sets are reported for the trial chosen there"
    )

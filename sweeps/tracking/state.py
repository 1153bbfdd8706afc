"""What the tracker knows of one trial's child run (``TrialState``), and which summary a child
run holds.

The tracker, the writer and the journal's replay all read and update the same ``TrialState``:
MLflow is the truth, and this is the part of it a write must check (the last step logged of
each metric, whether the setup and the summary went out) so that nothing is logged twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Which summary a child run holds: train()'s own, or a stand-in (sizes from the config, the
# steps trained) for a trial that ended without one. An errored trial may yet be restarted by
# a resume; its real summary must then replace the stand-in, never be taken for logged.
SUMMARY_TAG = "sweep.summary"
REAL, STAND_IN = "train", "stand-in"


@dataclass
class TrialState:
    """One trial's child run as far as MLflow holds it (or will, once the outbox delivers)."""

    run_id: str | None = None
    # metric key -> the last step logged: a result's metrics go out only for later steps.
    steps: dict[str, int] = field(default_factory=dict)
    # time/elapsed_s at the last step logged, for the training seconds a restore redoes.
    elapsed: float | None = None
    # train()'s summary went out (a stand-in does not count: the real one replaces it).
    summary: bool = False
    stopped_reason: str | None = None
    status: str | None = "RUNNING"  # the run's sweep.status tag
    # Params go after the config artifact: with params, the setup was complete.
    params: bool = False
    # Its child run was asked for: a retry looks for it before creating another.
    created: bool = False
    # The final status the summary's write set, so that the end need not set it again.
    status_logged: str | None = None

    def last_step(self, default: int) -> int:
        """The highest step logged of any metric, or ``default`` when none is."""
        return max(self.steps.values(), default=default)

    def not_logged(self, metrics: dict[str, float], step: int) -> dict[str, float]:
        """The metrics MLflow does not hold at ``step`` yet (marked as logged now). A summary
        needs this as much as a result: MLflow's SQL store commits a batch's metrics and its
        tags in separate transactions, so a driver killed between them leaves a summary's
        metrics without the tag that marks it logged."""
        new = {k: v for k, v in metrics.items() if self.steps.get(k, -1) < step}
        self.steps.update(dict.fromkeys(new, step))
        return new


def is_real_summary(tags: dict[str, str]) -> bool:
    """Whether a child run's (or a summary write's) tags are those of train()'s summary; runs
    logged before SUMMARY_TAG existed count a summary with a stopped_reason as real."""
    return "sweep.stopped_reason" in tags and tags.get(SUMMARY_TAG, REAL) != STAND_IN

"""Trials Tune ended in ERROR before their retries were spent, and the rounds that give them back.

With actor reuse (``sweeps.runtime.tuning.REUSE_ACTORS``) a trial waits for a finished trial's
worker to be reset for it. While it waits Tune counts it PENDING, and Tune retries only RUNNING
trials: a worker lost in that reset ends the waiting trial in ERROR at its first failure,
whatever ``sweep.max_failures`` allows (a chaos run lost one of eight trials that way).
``LostTrials`` notes such trials from Tune's public hook (a trial's ``num_failures`` at its
error); ``fit`` then restores the experiment with ``resume_errored``, as ``--resume`` would, so
they get their retries in the same command. A trial that errored after all its retries is
restarted once more only in a round that another trial's loss started.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from ray.tune import Callback

# Rounds of restoring lost trials before the sweep ends with them in ERROR (each round needs a
# worker lost in a reset again to start the next).
MAX_ROUNDS = 3


class LostTrials(Callback):
    """The ids of trials that errored with their retries unspent (see the module docstring)."""

    def __init__(self, max_failures: int) -> None:
        self.max_failures = max_failures
        self.ids: set[str] = set()

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        # Tune recovers a failed trial while num_failures <= max_failures (Trial.should_recover):
        # one that errored within that budget was never given its retry.
        if trial.num_failures <= self.max_failures:
            self.ids.add(trial.trial_id)


def fit(tuner, restore: Callable[[], object], lost: LostTrials, rounds: int = MAX_ROUNDS):
    """``tuner.fit()``, then while trials were lost (at most ``rounds`` times) the Tuner from
    ``restore()`` (Tune's state restored with ``resume_errored``) fitted again; the last
    ResultGrid, which holds every trial."""
    from sweeps.runtime import interrupt

    lost.ids.clear()
    results = tuner.fit()
    for _ in range(rounds):
        if not lost.ids or interrupt.stopping():  # a Ctrl-C stopped the sweep: no new round
            break
        print(
            f"note: {len(lost.ids)} trials lost their worker while Tune reset it for them; "
            "restarting them",
            file=sys.stderr,
        )
        lost.ids.clear()
        results = restore().fit()
    return results

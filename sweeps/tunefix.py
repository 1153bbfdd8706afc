"""A fix for a Ray Tune behaviour that loses a trial, applied in the driver before a sweep runs.

With ``reuse_actors``, a trial that follows a finished one on the same actor is PENDING until the
actor's ``reset`` returns. Tune (2.60) retries a failed trial only when it is RUNNING, so a worker
that dies during that reset (killed, out of memory, its node lost) ends the trial in ERROR for
good, with every retry of ``max_failures`` left and before any callback heard of it: a chaos run
(tests/test_chaos.py, seed 7) finished with one trial of eight missing. Here such a trial counts
as started, so Tune retries it as it retries any trial whose worker died.

In the driver process only: through Ray Client (``ray://``) Tune's loop runs on the cluster's
head and keeps Tune's own behaviour.
"""

from __future__ import annotations


def retry_failed_resets() -> None:
    """Patch ``TuneController._process_trial_failure`` once per process (idempotent)."""
    from ray.tune.execution.tune_controller import TuneController
    from ray.tune.experiment import Trial

    original = TuneController._process_trial_failure
    if getattr(original, "retries_failed_resets", False):
        return

    def process_trial_failure(self, trial, exception):
        if trial.status == Trial.PENDING and trial in self._resetting_trials:
            # As Tune treats an actor that fails to start (_actor_failed): RUNNING for the
            # retry path, unstaged if it was staged (an actor handed on when a trial stopped
            # was not: a chaos run met Tune's "this trial was lost" there); and out of
            # _resetting_trials, or it would never be scheduled again
            # (_maybe_reuse_cached_actor takes it for a reset in progress).
            self._resetting_trials.discard(trial)
            self._set_trial_status(trial, Trial.RUNNING)
            if trial in self._staged_trials:
                self._unstage_trial_with_resources(trial)
        return original(self, trial, exception)

    process_trial_failure.retries_failed_resets = True
    TuneController._process_trial_failure = process_trial_failure

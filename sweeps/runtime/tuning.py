"""Tune's settings for a sweep, in one place, each chosen so that Tune's own fault tolerance
loses no trial and nothing needs patching (``sweeps.cluster.tunefix`` holds the one thing that
does):

- Actors reused (``REUSE_ACTORS``): a fresh worker per trial costs its start and torch's import,
  about 2.5 s a trial on 2 cores (``python -m sweeps.bench``; docs/resume.md). Tune retries a
  failed trial only while it is RUNNING, and a trial waiting for a reused actor's reset is
  PENDING, so a worker lost in a reset ends that trial in ERROR with its retries unspent: the
  sweep's Tuner restores such trials in the same command (``sweeps.runtime.lost``).
- Grid and random search make every trial up front: Tune's variant generator gets no
  ``max_concurrent``. With one it makes trials as others finish, and saves itself apart from the
  trial list; a driver killed between the two saves would leave a generator that lost a trial
  or, on --resume, waited forever. ``sweep.max_concurrent`` is kept by resources instead
  (``TRIAL_SLOT``); Optuna's limit stays Tune's ``max_concurrent_trials``, which wraps it.
- Enough checkpoints kept (``checkpoints_to_keep``) that none a snapshot of the experiment
  names is gone when a killed driver's sweep resumes.
"""

from __future__ import annotations

import json
import math
from typing import Any

# Tune's actor reuse: on (see the module docstring); ``python -m sweeps.bench --reuse-actors``.
REUSE_ACTORS = True


# A resource of the local Ray this driver starts, one unit per running trial: how
# sweep.max_concurrent caps grid and random search (not in Tune's searcher: see above).
TRIAL_SLOT = "sweep_trial_slot"


def trial_resources(spec, placement, slots: bool):
    """What one trial (or pack) holds: the spec's CPUs, its GPU share (the sweep's placement,
    ``sweeps.runtime.placement``) and, with ``slots``, one TRIAL_SLOT. A dict; on a cluster of
    GPU nodes and nodes without, Tune's function of a trial's config, by its class."""
    from sweeps.spec.packing import PACK_KEY

    def resources(gpu: float) -> dict[str, float]:
        held = {"cpu": spec.sweep.resources.cpu, "gpu": gpu}
        if slots:
            held[TRIAL_SLOT] = 1
        return held

    if placement.cpu_slots == 0:
        return resources(placement.gpu)

    def by_class(config: dict) -> dict[str, float]:
        key = str(config[PACK_KEY]) if PACK_KEY in config else json.dumps(config, default=str)
        return resources(placement.trial_gpu(key))

    return by_class


def uses_slots(spec, starts_local_ray: bool) -> bool:
    """Whether sweep.max_concurrent is kept by TRIAL_SLOT resources: grid and random search
    on a local Ray this driver starts. On a cluster, its resources decide (Optuna's limit is
    Tune's, ``tune_config``)."""
    s = spec.sweep
    return starts_local_ray and s.max_concurrent is not None and s.search != "optuna"


def tune_config(spec, num_samples: int, *, reuse_actors: bool = REUSE_ACTORS):
    """The sweep's ``TuneConfig`` (see the module docstring)."""
    from ray import tune

    from sweeps.runtime import tune_space

    s = spec.sweep
    return tune.TuneConfig(
        search_alg=tune_space.search_algorithm(spec),
        scheduler=tune_space.scheduler(spec),
        num_samples=num_samples,
        max_concurrent_trials=s.max_concurrent if s.search == "optuna" else None,
        reuse_actors=reuse_actors,
        time_budget_s=s.time_budget_s,
    )


# How long a trial's checkpoint is kept after a newer one arrives: six times Tune's shortest
# period between snapshots of the experiment (10 s, its "auto" setting's floor).
KEEP_CHECKPOINTS_S = 60.0


def checkpoints_to_keep(checkpoint_every_s: float) -> int | None:
    """Tune's ``num_to_keep`` for trials that checkpoint at most every ``checkpoint_every_s``.

    Tune deletes a trial's oldest checkpoint when one past ``num_to_keep`` arrives, whether or
    not a snapshot of the experiment has named a newer one yet; with two kept and a checkpoint
    at every evaluation, a driver killed then left a snapshot naming a deleted checkpoint, and
    the trial failed on --resume. Kept here: enough that a checkpoint goes only
    KEEP_CHECKPOINTS_S after it was the newest, by when Tune has snapshot a newer one; all of
    them (None) when trials checkpoint at every evaluation (``checkpoint_every_s: 0``, short
    runs such as the tests'). docs/resume.md gives the disk this takes."""
    if checkpoint_every_s <= 0:
        return None
    return max(2, math.ceil(KEEP_CHECKPOINTS_S / checkpoint_every_s))


def run_config(spec, storage_path: str, callbacks: list[Any], name: str | None = None):
    """The sweep's ``RunConfig`` (checkpoints kept: ``checkpoints_to_keep``); ``name``: the Tune
    experiment's, the sweep's unless an --extend round's (``sweeps.runtime.state.tune_name``)."""
    from ray import tune

    s = spec.sweep
    return tune.RunConfig(
        name=name or spec.name,
        storage_path=storage_path,
        failure_config=tune.FailureConfig(max_failures=s.max_failures),
        checkpoint_config=tune.CheckpointConfig(
            num_to_keep=checkpoints_to_keep(s.checkpoint_every_s)
        ),
        callbacks=callbacks,
        verbose=0,
    )

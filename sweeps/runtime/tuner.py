"""The Tuner of a sweep and the MLflow tracker its callbacks feed: the trainable (one trial per
point, or one per pack of trials trained as one stacked model), its resources and Tune's
settings, or for ``--resume`` Tune's saved state restored from the output folder."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweeps.runtime import tuning
from sweeps.spec.sweep_spec import SweepSpec

if TYPE_CHECKING:
    from sweeps.runtime.lost import LostTrials

# MLflow writes waiting for an unreachable tracking server (sweeps.tracking.outbox), beside the
# outputs.
JOURNAL_FILE = "mlflow_outbox.jsonl"


def build_tuner(
    spec: SweepSpec,
    out_dir: Path,
    tracking_uri: str,
    *,
    resume: bool = False,
    storage: str | None = None,
    reuse_actors: bool = tuning.REUSE_ACTORS,
    slots: bool = False,
    points: list[dict] | None = None,
    placement=None,
):
    """The Tuner of a sweep (a ``SweepTuner``) and its MLflow callback (whose parent run the
    caller starts or, with ``resume``, attaches to). A resumed Tuner restores Tune's state from
    the output folder; MLflow, not Tune's copy, says what is logged. ``slots``: cap concurrency
    with TRIAL_SLOT resources (``sweeps.runtime.tuning.uses_slots``). ``points``: the trials an
    --extend trains (``sweeps.runtime.extend``, whose round ``sweep.json`` names); with none,
    no Tuner (None). ``placement``: the sweep's (``sweeps.runtime.placement``; by default
    resolved on this machine)."""
    from ray import tune
    from ray.tune.logger import JsonLoggerCallback

    from sweeps.runtime import placement as placing
    from sweeps.runtime import state as saved
    from sweeps.runtime import tune_space
    from sweeps.runtime.callbacks import bind as bind_callbacks
    from sweeps.runtime.cluster_view import this_machine
    from sweeps.runtime.lost import LostTrials
    from sweeps.runtime.progress import ProgressLine
    from sweeps.spec import space
    from sweeps.spec.seed_trials import uses_seed_trials

    s = spec.sweep
    placement = placement or placing.resolve(spec, this_machine())
    state = saved.read_state(out_dir)
    extended = "extend_round" in state  # an --extend's Tune experiment, its points alone
    # Packed: Tune runs one trial per pack, over a grid of pack numbers (sweeps.spec.packing).
    packs = tune_space.build_packs(spec, placement.gpu) if s.pack != 1 else None
    trainable, param_space, num_samples = _trainable(spec, packs, extended, points)
    tracker = _tracker(spec, out_dir, tracking_uri, packs, state.get("extend_round", 0))
    if points == []:
        return None, tracker
    pack_sizes = None if packs is None else [len(pack) for pack in packs]
    if uses_seed_trials(s):  # every trial trains its seeds
        pack_sizes = len(s.seeds)
    total = state["extend_trials"] if extended else space.n_trials(spec)
    progress = ProgressLine(
        spec.name, total, s.metric, s.mode, pack_sizes=pack_sizes, resumed=resume,
        over_seeds=uses_seed_trials(s),
    )  # fmt: skip
    trainable = tune.with_resources(trainable, tuning.trial_resources(spec, placement, slots))
    lost = LostTrials(s.max_failures)
    callbacks = [bind_callbacks(spec.name, [tracker, progress, lost]), JsonLoggerCallback()]
    name = saved.tune_name(spec, out_dir)

    def restore():
        # Tune restores its own settings, and the callbacks it pickled, which ProcessCallbacks
        # binds to this process's tracker (sweeps.runtime.callbacks); an --extend's trials
        # keep their points in Tune's state.
        return tune.Tuner.restore(
            f"{storage or out_dir / 'ray'}/{name}",
            trainable=trainable,
            resume_unfinished=True,
            resume_errored=True,
            param_space=param_space,
        )

    if resume:
        return SweepTuner(restore(), restore, lost), tracker
    tuner = tune.Tuner(
        trainable,
        param_space=param_space,
        tune_config=tuning.tune_config(spec, num_samples, reuse_actors=reuse_actors),
        run_config=tuning.run_config(spec, storage or str(out_dir / "ray"), callbacks, name),
    )
    return SweepTuner(tuner, restore, lost), tracker


@dataclass
class SweepTuner:
    """A sweep's Tuner, whose ``fit`` gives trials lost in an actor's reset their retries
    (``sweeps.runtime.lost``) by ``restore``-ing Tune's state."""

    tuner: Any
    restore: Callable[[], Any]
    lost: LostTrials

    def fit(self):
        from sweeps.runtime import lost

        return lost.fit(self.tuner, self.restore, self.lost)


def _trainable(
    spec: SweepSpec, packs: list | None, extended: bool = False, points: list | None = None
) -> tuple:
    """(trainable, param_space, num_samples): one trial per point of the space, or with
    ``packs`` one trial per pack over a grid of pack numbers (its members are drawn already),
    or for an --extend (``extended``) one trial per point it trains (``points``; restored from
    Tune's state on --resume, param_space None)."""
    from ray import tune

    from sweeps.runtime import tune_space
    from sweeps.runtime.trainable import (
        train_pack_trial,
        train_point_trial,
        train_seeds_trial,
        train_trial,
    )
    from sweeps.spec.identity import POINT_KEY
    from sweeps.spec.seed_trials import uses_seed_trials

    s = spec.sweep
    bound = {"base": spec.base, "derived": spec.derived, "checkpoint_every_s": s.checkpoint_every_s}
    if extended:
        trainable = tune.with_parameters(train_point_trial, **bound)
        param_space = {POINT_KEY: tune.grid_search(points)} if points else None
        return trainable, param_space, 1
    if uses_seed_trials(s):
        trainable = tune.with_parameters(train_seeds_trial, seeds=list(s.seeds), **bound)
        return trainable, tune_space.param_space(spec), s.num_samples
    if packs is None:
        trainable = tune.with_parameters(train_trial, **bound)
        return trainable, tune_space.param_space(spec), s.num_samples
    trainable = tune.with_parameters(train_pack_trial, packs=packs, **bound)
    return trainable, tune_space.pack_param_space(packs), 1


def _tracker(
    spec: SweepSpec, out_dir: Path, tracking_uri: str, packs: list | None, figures_step: int
):
    """The MLflow tracker of the sweep, journaling writes beside the outputs; its figures on
    the parent run at ``figures_step`` (the --extend round)."""
    from arith.training.cost import describe
    from sweeps.spec import space
    from sweeps.spec.seed_trials import uses_seed_trials
    from sweeps.tracking.tracker import MLflowTracker

    resolve = functools.partial(space.resolve_run_config, spec.base, derived=spec.derived)
    # How long the end of a sweep waits for an MLflow server that went away.
    wait_s = float(os.environ.get("SWEEPS_MLFLOW_WAIT_S", "60"))
    return MLflowTracker(
        tracking_uri,
        spec.name,
        resolve,
        describe,
        drain_timeout_s=wait_s,
        metric=spec.sweep.metric,
        journal=out_dir / JOURNAL_FILE,
        model_dir=out_dir / "models",
        packs=packs,
        seeds=list(spec.sweep.seeds) if uses_seed_trials(spec.sweep) else None,
        figures_step=figures_step,
    )

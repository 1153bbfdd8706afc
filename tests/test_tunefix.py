"""The sweep's Tune settings against real Tune: no trial lost where Tune's insides once lost one,
and sweep.max_concurrent kept without Tune's variant generator."""

from __future__ import annotations

import itertools
import os
import signal
import sys
import tempfile
from pathlib import Path

import pytest
import ray
import ray.cloudpickle
from ray import tune
from sweep_procs import SMOKE, children, fresh_store, start_sweep

from sweeps.cluster import tunefix
from sweeps.runtime import lost as lost_trials
from sweeps.runtime.callbacks import bind
from sweeps.runtime.lost import LostTrials
from sweeps.runtime.tuning import KEEP_CHECKPOINTS_S, checkpoints_to_keep, tune_config
from sweeps.spec.sweep_spec import load_spec


class FailsOneReset(tune.Trainable):
    """Two steps per trial; the first reset of a reused actor for a new trial fails, as when the
    worker dies while Tune resets it (a marker file makes it once per test)."""

    def setup(self, config):
        self.steps = 0

    def step(self):
        self.steps += 1
        return {"score": self.config["x"], "done": self.steps >= 2}

    def save_checkpoint(self, checkpoint_dir):
        return {"steps": self.steps}

    def load_checkpoint(self, checkpoint):
        self.steps = checkpoint["steps"]

    def reset_config(self, new_config):
        marker = Path(new_config["marker"])
        if not marker.exists():
            marker.write_text("failed once")
            raise RuntimeError("the worker died during reset")
        self.steps = 0
        return True


@pytest.fixture
def local_ray():
    # Ray's workers cannot import a test module: the trainable travels by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_a_trial_lost_in_a_reused_actors_reset_gets_its_retry(tmp_path, local_ray):
    """With reuse_actors (the sweeps' setting), a trial waiting for a reused actor's reset is
    PENDING, and Tune retries only RUNNING trials: a worker lost in that reset ends its trial in
    ERROR with its retry unspent (a chaos run lost one of eight). LostTrials notes it, and the
    sweep's fit restores the experiment for it (sweeps.runtime.lost)."""
    assert tune_config(load_spec(SMOKE, []), num_samples=1).reuse_actors
    lost = LostTrials(max_failures=1)
    tuner = tune.Tuner(
        FailsOneReset,
        param_space={"x": tune.grid_search([1, 2, 3]), "marker": str(tmp_path / "marker")},
        tune_config=tune.TuneConfig(reuse_actors=True, max_concurrent_trials=1),
        run_config=tune.RunConfig(
            name="resets",
            storage_path=str(tmp_path / "ray"),
            failure_config=tune.FailureConfig(max_failures=1),
            callbacks=[bind("resets", [lost])],
            verbose=0,
        ),
    )

    def restore():
        path = str(tmp_path / "ray" / "resets")
        return tune.Tuner.restore(path, FailsOneReset, resume_errored=True)

    first = tuner.fit()  # Tune alone: one trial lost for good
    errored = [r for r in first if r.error is not None]
    assert len(errored) == 1 and (tmp_path / "marker").exists()
    assert len(lost.ids) == 1
    results = lost_trials.fit(restore(), restore, lost)  # what SweepTuner.fit does after it
    assert [r.error for r in results] == [None, None, None]
    assert sorted(r.metrics["score"] for r in results) == [1, 2, 3]
    assert not lost.ids


def test_checkpoints_are_kept_long_enough_for_a_snapshot():
    """A checkpoint goes KEEP_CHECKPOINTS_S after a newer one arrived at the earliest, or never
    when trials checkpoint at every evaluation (tests/test_resume.py kills a driver there)."""
    assert checkpoints_to_keep(0) is None
    assert checkpoints_to_keep(10) == 6  # the spec's default checkpoint_every_s
    for every_s in (0.5, 7, 10, 45, 60, 600):
        kept = checkpoints_to_keep(every_s)
        assert kept >= 2 and kept * every_s >= KEEP_CHECKPOINTS_S


@pytest.mark.slow
def test_max_concurrent_is_kept_by_resources(tmp_path):
    """sweep.max_concurrent=1 on a 2-CPU local Ray, all four trials made up front: their child
    runs in MLflow (started when Tune starts a trial, ended when it ends) never overlap."""
    uri = fresh_store(tmp_path / "mlflow.db")
    sets = ["base.train.max_steps=20", "sweep.max_concurrent=1"]
    proc = start_sweep(tmp_path, uri, sets)
    proc.wait(timeout=240)
    assert proc.returncode == 0, (tmp_path / "run.err").read_text()[-3000:]
    _, runs = children(uri, "smoke")
    spans = sorted((r.info.start_time, r.info.end_time) for r in runs)
    assert len(spans) == 4
    for (_, end), (next_start, _) in itertools.pairwise(spans):
        assert end <= next_start, spans


def two_steps(config):
    for step in range(2):
        tune.report({"score": config["x"] * step})


def test_a_snapshot_copy_cut_short_is_copied_again_from_the_staging_folder(tmp_path, local_ray):
    """The one thing sweeps.cluster.tunefix does with Tune's insides, on this Ray: Tune stages its
    snapshot in the driver's session folder and copies it into the experiment folder; a copy
    cut short there (a driver killed mid-copy) is replaced by the staged one."""
    tuner = tune.Tuner(
        two_steps,
        param_space={"x": tune.grid_search([1, 2])},
        run_config=tune.RunConfig(name="cut", storage_path=str(tmp_path / "ray"), verbose=0),
    )
    tuner.fit()
    experiment_dir = tmp_path / "ray" / "cut"
    snapshot = tunefix.newest_snapshot(experiment_dir)
    whole = snapshot.read_bytes()
    assert tunefix.staged_copies(experiment_dir, snapshot.name)
    assert not tunefix.finish_sync(experiment_dir)  # nothing to do
    snapshot.write_bytes(whole[: len(whole) // 2])
    assert tunefix.finish_sync(experiment_dir)
    assert snapshot.read_bytes() == whole
    restored = tune.Tuner.restore(str(experiment_dir), trainable=two_steps).get_results()
    assert sorted(r.metrics["score"] for r in restored) == [1, 2]


def counts_to_four(config):
    """Four reports, each with a checkpoint; a restored trial goes on from its checkpoint."""
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            start = int((Path(folder) / "step").read_text())
    for step in range(start + 1, 5):
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "step").write_text(str(step))
            tune.report({"step": step}, checkpoint=tune.Checkpoint.from_directory(folder))


class KillsDuringSave(tune.Callback):
    """SIGKILLs the trial's worker on its second result, before Tune's save of that result's
    checkpoint reaches it: the moment a chaos kill can land on, made certain. Once: Tune
    restores this callback with the experiment."""

    def __init__(self):
        self.killed = False

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result["step"] == 2 and not self.killed:
            self.killed = True
            os.kill(result["pid"], signal.SIGKILL)

    def get_state(self):
        return {"killed": self.killed}

    def set_state(self, state):
        self.killed = state["killed"]


def test_a_trial_killed_during_a_save_is_not_stopped_after_its_resume(tmp_path, local_ray):
    """Tune keeps the decision it takes on a trial whose save is in flight (STOP, when the
    worker dies then) in its experiment snapshot; Tuner.restore(resume_errored=True) restarted
    such a trial and then acted on it at its first save, ending it after one report
    (tests/test_loss_corners.py saw it as a stand-in summary). forget_decisions_in_flight drops
    what a new driver has no save in flight for, and the trial runs to its end."""
    experiment_dir = tmp_path / "ray" / "killed"
    tuner = tune.Tuner(
        counts_to_four,
        run_config=tune.RunConfig(
            name="killed",
            storage_path=str(tmp_path / "ray"),
            callbacks=[KillsDuringSave()],
            failure_config=tune.FailureConfig(max_failures=0),
            verbose=0,
        ),
    )
    (result,) = tuner.fit()
    assert result.error is not None and result.metrics["step"] == 2
    assert tunefix.forget_decisions_in_flight(experiment_dir)
    assert not tunefix.forget_decisions_in_flight(experiment_dir)  # nothing left to forget
    restored = tune.Tuner.restore(
        str(experiment_dir), trainable=counts_to_four, resume_errored=True
    )
    (result,) = restored.fit()
    assert result.error is None
    assert result.metrics["step"] == 4

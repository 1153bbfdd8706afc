"""sweeps.tunefix against real Tune: a trial whose reused actor fails its reset is retried."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import ray
import ray.cloudpickle
from ray import tune

from sweeps.tunefix import retry_failed_resets


class FailsOneReset(tune.Trainable):
    """Two steps per trial; the first reset for a new trial fails, as when the worker of a
    reused actor dies (a marker file makes it once per test)."""

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


def test_a_trial_whose_reset_fails_is_retried(tmp_path, local_ray):
    retry_failed_resets()
    retry_failed_resets()  # idempotent: one patch
    tuner = tune.Tuner(
        FailsOneReset,
        param_space={"x": tune.grid_search([1, 2, 3]), "marker": str(tmp_path / "marker")},
        tune_config=tune.TuneConfig(reuse_actors=True, max_concurrent_trials=1),
        run_config=tune.RunConfig(
            storage_path=str(tmp_path / "ray"),
            failure_config=tune.FailureConfig(max_failures=1),
            verbose=0,
        ),
    )
    results = tuner.fit()
    assert (tmp_path / "marker").exists()  # a reset did fail
    assert [r.error for r in results] == [None, None, None]
    assert sorted(r.metrics["score"] for r in results) == [1, 2, 3]

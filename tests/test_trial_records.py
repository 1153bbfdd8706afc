"""``SweepRecords`` without Tune: trial events as plain values, against a real MLflow SQLite
store. (``tests/test_tracking.py`` drives the same logic through the Tune callback.)"""

from __future__ import annotations

import functools
import pickle

import pytest
from mlflow import MlflowClient
from sweep_procs import fresh_store

from arith.training.cost import describe
from sweeps.spec.packing import PACK_KEY, Member
from sweeps.spec.space import resolve_run_config
from sweeps.tracking.records import SweepRecords

BASE = {
    "task": {"name": "addition", "n_digits": 2},
    "model": {"n_layer": 1, "d_model": 32, "n_head": 2},
    "train": {"max_steps": 20, "eval_every": 10},
}


def evaluation(step: int, em: float) -> dict:
    """A result as the trainable reports it, with a key of Tune's own that is not a metric."""
    return {"step": step, "val/exact_match": em, "train/loss": 2.0 - em, "time_total_s": step}


def summary(step: int) -> dict:
    """The trainable's last report: train()'s summary."""
    return {**evaluation(step, 0.75), "steps": step, "n_params": 100, "stopped_reason": "max_steps"}


@pytest.fixture
def uri(tmp_path) -> str:
    return fresh_store(tmp_path / "mlflow.db")


def make_records(uri: str, **kwargs) -> SweepRecords:
    resolve = functools.partial(resolve_run_config, BASE, derived={})
    records = SweepRecords(uri, "records-test", resolve, describe, **kwargs)
    records.start_parent("sweep: {name: records-test}\n")
    return records


def child_runs(uri: str) -> dict:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("records-test").experiment_id
    runs = client.search_runs([experiment], "tags.`sweep.role` = 'trial'")
    return {run.data.tags["sweep.trial_id"]: run for run in runs}


def steps(uri: str, run, key: str) -> list[tuple[int, float]]:
    history = MlflowClient(uri).get_metric_history(run.info.run_id, key)
    return [(m.step, m.value) for m in history]


def test_a_finished_trial_is_one_child_run_with_its_params_metrics_and_status(uri):
    records = make_records(uri)
    config = {"model.d_model": 16}
    records.trial_started("t_0", config)
    records.trial_reported("t_0", config, evaluation(0, 0.0))
    records.trial_reported("t_0", config, evaluation(10, 0.5))
    records.trial_reported("t_0", config, evaluation(20, 0.75))
    records.trial_reported("t_0", config, summary(20))
    records.trial_completed("t_0", config, last_result=summary(20))
    assert records.finish_parent()

    (run,) = child_runs(uri).values()
    assert run.data.tags["mlflow.parentRunId"] == records.parent_run_id
    assert run.data.params["model.d_model"] == "16"
    assert steps(uri, run, "val/exact_match") == [(0, 0.0), (10, 0.5), (20, 0.75)]
    assert "time_total_s" not in run.data.metrics  # Tune's key, not a training metric
    assert run.data.metrics["n_params"] == 100
    assert (run.info.status, run.data.tags["sweep.status"]) == ("FINISHED", "TERMINATED")
    assert run.data.tags["sweep.stopped_reason"] == "max_steps"


def test_an_errored_trial_fails_with_a_stand_in_summary(uri):
    records = make_records(uri)
    config = {"model.d_model": 16}
    records.trial_started("t_1", config)
    records.trial_reported("t_1", config, evaluation(10, 0.5))
    records.trial_errored("t_1", config, {"time_total_s": 1.5}, error_file="/x/error.txt")
    assert records.outbox.flush()  # sends only queue: wait for the writer thread

    run = child_runs(uri)["t_1"]
    assert (run.info.status, run.data.tags["sweep.status"]) == ("FAILED", "ERROR")
    assert run.data.tags["sweep.error_file"] == "/x/error.txt"
    assert run.data.tags["sweep.stopped_reason"] == "error"
    sizes = describe(resolve_run_config(BASE, config, {}))
    assert run.data.metrics["n_params"] == sizes["n_params"]  # from the config, no model built
    assert run.data.metrics["wall_time_s"] == 1.5
    assert run.data.metrics["steps"] == 10  # what it trained, not what it planned


def test_a_result_at_a_step_already_logged_is_not_logged_twice(uri):
    """A trial restarted from its checkpoint reports its steps again: same run, each once, and
    the steps between its checkpoint and MLflow's last step counted as redone."""
    records = make_records(uri)
    records.trial_started("t_0", {})
    for step, em in ((0, 0.0), (10, 0.5), (20, 0.6)):
        records.trial_reported("t_0", {}, evaluation(step, em))
    records.trial_started("t_0", {}, restored={"step": 10})
    records.trial_reported("t_0", {}, evaluation(10, 0.5))
    records.trial_reported("t_0", {}, evaluation(20, 0.6))
    records.trial_reported("t_0", {}, evaluation(30, 0.7))
    assert records.outbox.flush()

    (run,) = child_runs(uri).values()
    assert steps(uri, run, "val/exact_match") == [(0, 0.0), (10, 0.5), (20, 0.6), (30, 0.7)]
    assert records.redone == {"trials": 1, "steps": 10, "seconds": 0.0}


def test_end_unfinished_ends_a_running_trial_killed(uri):
    records = make_records(uri)
    records.trial_started("t_0", {})
    records.trial_reported("t_0", {}, evaluation(0, 0.0))
    records.trial_started("t_1", {})
    records.trial_completed("t_1", {}, budget_spent=True)
    records.end_unfinished()
    assert records.outbox.flush()

    runs = child_runs(uri)
    assert (runs["t_0"].info.status, runs["t_0"].data.tags["sweep.status"]) == ("KILLED", "KILLED")
    # The other had ended already: cut by the sweep's time budget, not killed.
    assert runs["t_1"].data.tags["sweep.status"] == "TERMINATED"
    assert runs["t_1"].data.tags["sweep.stopped_reason"] == "time_budget"


def test_each_member_of_a_pack_is_a_trial_of_its_own(uri):
    packs = [[Member(3, {"model.d_model": 16}), Member(4, {"model.d_model": 32})]]
    records = make_records(uri, packs=packs)
    config = {PACK_KEY: 0}
    records.trial_started("abc_00000", config)
    members = {"0": evaluation(10, 0.25), "1": evaluation(10, 0.5)}
    records.trial_reported("abc_00000", config, {"members": members})
    records.trial_completed("abc_00000", config)
    assert records.outbox.flush()

    runs = child_runs(uri)
    assert sorted(runs) == ["abc_00003", "abc_00004"]
    assert runs["abc_00004"].data.params["model.d_model"] == "32"
    assert steps(uri, runs["abc_00003"], "val/exact_match") == [(10, 0.25)]
    assert steps(uri, runs["abc_00004"], "val/exact_match") == [(10, 0.5)]
    assert {r.data.tags["sweep.status"] for r in runs.values()} == {"EARLY_STOPPED"}


def test_a_pickled_copy_leaves_unsent_writes_behind_and_still_writes(uri):
    """Tune pickles its callbacks, and these records with them: the copy gets an outbox of
    its own and the same runs."""
    records = make_records(uri)
    records.trial_started("t_0", {})
    records.trial_reported("t_0", {}, evaluation(0, 0.0))
    assert records.outbox.flush()  # the run exists before Tune pickles the records
    copy = pickle.loads(pickle.dumps(records))
    assert copy.outbox is not records.outbox and not copy.outbox.pending
    copy.trial_reported("t_0", {}, evaluation(0, 0.0))  # held in the copied state: skipped
    copy.trial_reported("t_0", {}, evaluation(10, 0.5))
    assert copy.outbox.flush()
    (run,) = child_runs(uri).values()
    assert steps(uri, run, "val/exact_match") == [(0, 0.0), (10, 0.5)]


def test_a_pack_member_that_finished_keeps_its_end_when_the_pack_errors_later(uri):
    packs = [[Member(0, {"model.d_model": 16}), Member(1, {"model.d_model": 16})]]
    records = make_records(uri, packs=packs)
    config = {PACK_KEY: 0}
    records.trial_started("abc_00000", config)
    records.trial_reported("abc_00000", config, {"members": {"0": summary(20)}})
    records.trial_reported("abc_00000", config, {"members": {"1": evaluation(20, 0.5)}})
    records.trial_errored("abc_00000", config, error_file="/tmp/error.txt")
    assert records.outbox.flush()

    runs = child_runs(uri)
    finished, failed = runs["abc_00000"], runs["abc_00001"]
    assert (finished.info.status, finished.data.tags["sweep.status"]) == ("FINISHED", "TERMINATED")
    assert finished.data.metrics["n_params"] == 100  # its own summary, not a stand-in
    assert (failed.info.status, failed.data.tags["sweep.status"]) == ("FAILED", "ERROR")


@pytest.mark.parametrize(
    ("ended", "cause"),
    [("KILLED", "before Ctrl-C stopped the sweep"), (None, "before the sweep's driver died")],
    ids=["ctrl-c", "driver-killed"],
)
def test_a_resume_says_what_stopped_the_work_it_redid(uri, ended, cause):
    """After a Ctrl-C (the parent run ended KILLED) nothing died, though the resume's summary
    said the work was "logged before the driver or worker died"; a driver killed outright
    leaves its parent RUNNING."""
    from sweeps.runtime.report import redone_line

    first = make_records(uri)
    first.trial_started("t_0", {})
    for step, em in ((0, 0.0), (10, 0.5), (20, 0.6)):
        first.trial_reported("t_0", {}, evaluation(step, em))
    if ended is not None:
        first.finish_parent(ended)
    assert first.outbox.flush()

    resumed = SweepRecords(uri, "records-test", first.resolve, describe)
    resumed.attach(first.parent_run_id)
    resumed.trial_started("t_0", {}, restored={"step": 10})
    line = redone_line(resumed.redone, resumed.resumed_from)
    assert line == (
        "restored from checkpoints: 1 trial(s), redid 10 steps (~0.0 s of training) that ran "
        f"after their last checkpoint, {cause}"
    )
    assert "died" not in line or ended is None


def test_single_values_are_tags_the_curves_metrics_and_both_read_back_as_before(uri):
    """MLflow's run page charted every metric, namespaces in alphabetical order: forty
    one-point charts (best/, data/, edge/, test/) stood before train/loss and val/exact_match.
    The figures measured once are tags of their names now; the trials frame reads them, and the
    runs logged before, which held them as metrics, the same."""
    from sweeps.analysis.collect import trials_frame

    records = make_records(uri)
    records.trial_started("t_0", {})
    records.trial_reported("t_0", {}, evaluation(0, 0.0))
    last = {**evaluation(20, 0.75), "test/exact_match": 0.7, "data/test/train_overlap": 0.0}
    records.trial_reported("t_0", {}, last)
    records.trial_reported("t_0", {}, {**summary(20), "best/val/exact_match": 0.8})
    records.trial_completed("t_0", {})
    assert records.outbox.flush()

    (run,) = child_runs(uri).values()
    assert set(run.data.metrics) >= {"val/exact_match", "train/loss", "n_params", "steps"}
    figures = {"test/exact_match": "0.7", "data/test/train_overlap": "0.0",
               "best/val/exact_match": "0.8"}  # fmt: skip
    assert not set(figures) & set(run.data.metrics)
    assert {k: run.data.tags[k] for k in figures} == figures
    assert steps(uri, run, "val/exact_match") == [(0, 0.0), (20, 0.75)]

    # A run of the same trial logged before, its figures as metrics: the same columns.
    client = MlflowClient(uri)
    old = client.create_run(run.info.experiment_id, tags={"sweep.trial_id": "t_1"})
    for key, value in {**figures, "val/exact_match": "0.75"}.items():
        client.log_metric(old.info.run_id, key, float(value), step=20)
    frame = trials_frame([run, client.get_run(old.info.run_id)]).set_index("trial_id")
    for key, value in figures.items():
        assert frame[key].tolist() == [float(value)] * 2, key

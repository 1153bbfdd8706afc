"""The MLflow callback, fed realistic Tune results, against SQLite and a real ``mlflow server``."""

from __future__ import annotations

import functools
import json
import pickle
from pathlib import Path

from mlflow import MlflowClient
from sweep_procs import FakeTrial, fresh_store

from arith.training.cost import describe
from sweeps.analysis.run_values import run_figures
from sweeps.spec.space import resolve_run_config
from sweeps.tracking.records import training_metrics
from sweeps.tracking.tracker import MLflowTracker

BASE = {
    "task": {"name": "addition", "n_digits": 2},
    "model": {"n_layer": 1, "d_model": 32, "n_head": 2},
    "train": {"max_steps": 20, "eval_every": 10},
}


def eval_result(step: int, em: float) -> dict:
    """A result as Tune hands it to callbacks: the trainer's metrics plus Tune's own keys."""
    return {
        "step": step,
        "epoch": step / 100,
        "lr": 1e-3,
        "train/loss": 2.0 - em,
        "val/exact_match": em,
        "val/exact_match/len_2": em,
        "time/elapsed_s": 0.1 * step,
        "training_iteration": step // 10 + 1,
        "time_total_s": 0.1 * step,
        "trial_id": "x",
        "date": "2026-01-01",
        "timestamp": 1,
        "hostname": "h",
        "pid": 1,
        "done": False,
        "config": {"model.d_model": 32},
    }


def summary_result(step: int) -> dict:
    return {
        **eval_result(step, 0.75),
        "test/exact_match": 0.7,
        "n_params": 14688,
        "n_params_non_embedding": 12768,
        "flops_per_token": 87744,
        "steps": step,
        "wall_time_s": 3.0,
        "best/val/exact_match": 0.75,
        "val/steps_to_threshold": step,
        "stopped_reason": "early_stopping",
    }


def make_tracker(uri: str) -> MLflowTracker:
    resolve = functools.partial(resolve_run_config, BASE, derived={})
    return MLflowTracker(uri, "tracking-test", resolve, describe)


def drive(tracker: MLflowTracker) -> dict[str, FakeTrial]:
    """One finished trial (reports twice, then its summary), one errored, one stopped early."""
    tracker.start_parent("sweep: {name: tracking-test}\n")
    ok = FakeTrial("t_0", {"model.d_model": 32})
    bad = FakeTrial("t_1", {"model.d_model": 16})
    cut = FakeTrial("t_2", {"model.d_model": 16, "train.seed": 1})
    for trial in (ok, bad, cut):
        tracker.on_trial_start(0, [], trial)
    tracker.on_trial_result(1, [], ok, eval_result(0, 0.0))
    tracker.on_trial_result(2, [], ok, eval_result(10, 0.5))
    tracker.on_trial_result(2, [], bad, eval_result(0, 0.0))
    tracker.on_trial_result(2, [], cut, eval_result(0, 0.0))
    # A retried trial re-reports from its last checkpoint: nothing may be logged twice.
    tracker.on_trial_start(3, [], ok)
    tracker.on_trial_result(3, [], ok, eval_result(10, 0.5))
    tracker.on_trial_result(4, [], ok, {**eval_result(20, 0.75), "test/exact_match": 0.7})
    tracker.on_trial_result(5, [], ok, summary_result(20))
    tracker.on_trial_result(5, [], ok, summary_result(20))
    tracker.on_trial_complete(6, [], ok)
    bad.error_file = "/tmp/error.txt"
    bad.last_result = {"time_total_s": 1.5}
    tracker.on_trial_error(6, [], bad)
    cut.last_result = {"time_total_s": 0.5}
    tracker.on_trial_complete(6, [], cut)
    tracker.finish_parent()
    return {"ok": ok, "bad": bad, "cut": cut}


def check_layout(uri: str, tracker: MLflowTracker) -> None:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("tracking-test")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("sweep.role") == "parent"]
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.run_id == tracker.parent_run_id
    assert parent.info.status == "FINISHED"
    assert "spec.yaml" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    children = {
        r.data.tags["sweep.trial_id"]: r for r in runs if r.data.tags.get("sweep.role") == "trial"
    }
    assert set(children) == {"t_0", "t_1", "t_2"}
    for run in children.values():
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        # one trial id in MLflow and trials.csv: the run is named by it, whole
        assert run.info.run_name == run.data.tags["sweep.trial_id"]
        assert "config.yaml" in {a.path for a in client.list_artifacts(run.info.run_id)}
    ok, bad, cut = children["t_0"], children["t_1"], children["t_2"]
    assert ok.data.params["model.d_model"] == "32"
    assert ok.data.params["optim.betas"] == "[0.9, 0.98]"
    assert cut.data.params["train.seed"] == "1"
    assert (ok.info.status, ok.data.tags["sweep.status"]) == ("FINISHED", "EARLY_STOPPED")
    assert ok.data.tags["sweep.stopped_reason"] == "early_stopping"
    assert (bad.info.status, bad.data.tags["sweep.status"]) == ("FAILED", "ERROR")
    assert cut.data.tags["sweep.status"] == "EARLY_STOPPED"
    history = client.get_metric_history(ok.info.run_id, "val/exact_match")
    assert [(m.step, m.value) for m in history] == [(0, 0.0), (10, 0.5), (20, 0.75)]
    for key in ok.data.metrics:
        steps = [m.step for m in client.get_metric_history(ok.info.run_id, key)]
        assert len(steps) == len(set(steps)), key
    assert ok.data.metrics["n_params"] == 14688
    assert ok.data.metrics["val/steps_to_threshold"] == 20
    assert "train/steps_to_100pct" not in ok.data.metrics  # None is omitted
    assert not {"training_iteration", "time_total_s", "timestamp", "pid", "step"} & set(
        ok.data.metrics
    )
    # Trials without a summary still get sizes (from the config) for the tables.
    assert (
        bad.data.metrics["n_params"]
        == describe(resolve_run_config(BASE, {"model.d_model": 16}, {}))["n_params"]
    )
    assert bad.data.metrics["wall_time_s"] == 1.5


def test_training_metrics_keeps_the_trainers_numbers_only():
    kept = training_metrics({**eval_result(10, 0.5), "stopped_reason": "max_steps", "flag": True})
    assert set(kept) == {
        "epoch",
        "lr",
        "train/loss",
        "val/exact_match",
        "val/exact_match/len_2",
        "time/elapsed_s",
    }


def test_callback_against_sqlite(tmp_path):
    uri = fresh_store(tmp_path / "mlflow.db")
    tracker = make_tracker(uri)
    drive(tracker)
    check_layout(uri, tracker)
    assert (tmp_path / "mlartifacts").is_dir()  # artifacts next to the database, not in the cwd


def test_state_round_trip_finds_the_runs_again(tmp_path):
    uri = fresh_store(tmp_path / "mlflow.db")
    tracker = make_tracker(uri)
    tracker.start_parent("sweep: {name: tracking-test}\n")
    trial = FakeTrial("t_0", {})
    tracker.on_trial_start(0, [], trial)
    tracker.on_trial_result(1, [], trial, eval_result(10, 0.5))
    assert tracker.outbox.flush()  # sends only queue: the first driver's writes are in
    restored = pickle.loads(pickle.dumps(make_tracker(uri)))
    restored.set_state(pickle.loads(pickle.dumps(tracker.get_state())))
    restored.on_trial_start(2, [], trial)  # no second child run
    restored.on_trial_result(2, [], trial, eval_result(10, 0.5))  # not logged twice
    restored.on_trial_result(3, [], trial, eval_result(20, 0.75))
    assert restored.outbox.flush()
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("tracking-test").experiment_id])
    assert len(runs) == 2
    run_id = tracker.trials["t_0"].run_id
    assert [m.step for m in client.get_metric_history(run_id, "val/exact_match")] == [10, 20]


def test_callback_against_a_server(mlflow_server):
    tracker = make_tracker(mlflow_server)
    drive(tracker)
    check_layout(mlflow_server, tracker)


def test_writes_wait_in_order_while_the_store_is_away(tmp_path, monkeypatch):
    uri = fresh_store(tmp_path / "mlflow.db")
    tracker = make_tracker(uri)
    tracker.start_parent("sweep: {name: tracking-test}\n")
    trial = FakeTrial("t_0", {})
    tracker.on_trial_start(0, [], trial)
    real, down = tracker.client.log_batch, [True]

    def log_batch(*args, **kwargs):
        if down[0]:
            raise ConnectionError("connection refused")
        return real(*args, **kwargs)

    assert tracker.outbox.flush()  # the setup is in before the store goes away
    monkeypatch.setattr(tracker.client, "log_batch", log_batch)
    tracker.outbox.backoff_s = 0.05
    tracker.on_trial_result(1, [], trial, eval_result(0, 0.0))
    tracker.on_trial_result(2, [], trial, eval_result(10, 0.5))
    assert not tracker.outbox.flush()  # the writer thread retries on its own meanwhile
    assert len(tracker.outbox.pending) == 2 and tracker.outbox.failures >= 1
    down[0] = False
    tracker.on_trial_result(3, [], trial, eval_result(20, 0.75))
    assert tracker.outbox.drain(5.0)
    history = MlflowClient(uri).get_metric_history(tracker.trials["t_0"].run_id, "val/exact_match")
    assert [(m.step, m.value) for m in history] == [(0, 0.0), (10, 0.5), (20, 0.75)]


def test_attach_takes_what_mlflow_holds_as_the_truth(tmp_path):
    """A driver killed after logging: a new tracker finds the child run and skips, key by key,
    every step MLflow already has, whatever Tune's (older) snapshot said."""
    uri = fresh_store(tmp_path / "mlflow.db")
    first = make_tracker(uri)
    parent = first.start_parent("sweep: {name: tracking-test}\n")
    trial = FakeTrial("t_0", {})
    first.on_trial_start(0, [], trial)
    first.on_trial_result(1, [], trial, eval_result(0, 0.0))
    first.on_trial_result(2, [], trial, {**eval_result(10, 0.5), "perf/tokens_per_s": 400.0})
    assert first.outbox.flush()  # what the first driver delivered before it was killed
    second = make_tracker(uri)
    second.set_state({"parent_run_id": parent})  # what Tune restores; MLflow fills the rest
    assert second.trials["t_0"].steps["val/exact_match"] == 10
    second.on_trial_start(3, [], trial)
    second.on_trial_result(4, [], trial, eval_result(0, 0.0))
    second.on_trial_result(5, [], trial, eval_result(10, 0.5))  # no perf/ metric this time
    second.on_trial_result(6, [], trial, {**eval_result(20, 0.75), "perf/tokens_per_s": 700.0})
    assert second.outbox.flush()
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("tracking-test").experiment_id])
    assert len(runs) == 2  # parent and one child
    run_id = second.trials["t_0"].run_id
    for key, steps in (("val/exact_match", [0, 10, 20]), ("perf/tokens_per_s", [10, 20])):
        assert [m.step for m in client.get_metric_history(run_id, key)] == steps
    assert second.redone["trials"] == 1


def test_writes_waiting_when_the_driver_dies_are_replayed_once(tmp_path, monkeypatch):
    """The store goes away, the driver dies with writes waiting: they are in the journal, and a
    resumed driver delivers them in order, skipping what MLflow already holds."""
    uri = fresh_store(tmp_path / "mlflow.db")
    journal = tmp_path / "outbox.jsonl"
    resolve = functools.partial(resolve_run_config, BASE, derived={})
    first = MLflowTracker(uri, "tracking-test", resolve, describe, journal=journal)
    parent = first.start_parent("sweep: {name: tracking-test}\n")
    done, cut = FakeTrial("t_0", {"model.d_model": 32}), FakeTrial("t_1", {"train.seed": 1})
    first.on_trial_start(0, [], done)
    first.on_trial_result(1, [], done, eval_result(0, 0.0))
    assert first.outbox.flush()
    assert journal.read_text() == ""  # delivered: nothing waits

    def refused(*args, **kwargs):
        raise ConnectionError("connection refused")

    for name in ("log_batch", "create_run", "log_artifact", "set_terminated", "set_tag"):
        monkeypatch.setattr(first.client, name, refused)
    first.outbox.backoff_s = 0.05
    first.on_trial_result(2, [], done, eval_result(10, 0.5))
    first.on_trial_result(2, [], done, eval_result(20, 0.75))
    first.on_trial_result(3, [], done, summary_result(20))
    first.on_trial_complete(4, [], done)
    first.on_trial_start(4, [], cut)  # a trial whose child run the store never saw
    first.on_trial_result(5, [], cut, eval_result(0, 0.25))
    assert not first.outbox.flush()  # they wait for the store, in the journal
    waiting = [json.loads(line)["what"] for line in journal.read_text().splitlines()]
    assert waiting == [
        "metrics of t_0 at step 10",
        "metrics of t_0 at step 20",
        "summary of t_0",
        "end of t_0",
        "child run of t_1",
        "params of t_1",
        "metrics of t_1 at step 0",
    ]
    first.outbox.close()
    del first  # the driver is killed: only the journal is left

    second = MLflowTracker(uri, "tracking-test", resolve, describe, journal=journal)
    second.attach(parent)
    assert second.replay() == 7
    # The unfinished trial, restored from its checkpoint at step 0, reports it again: once.
    second.on_trial_start(6, [], cut)
    second.on_trial_result(7, [], cut, eval_result(0, 0.25))
    second.on_trial_result(8, [], cut, eval_result(10, 0.5))
    assert second.outbox.flush()
    assert journal.read_text() == ""
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("tracking-test").experiment_id])
    children = {r.data.tags["sweep.trial_id"]: r for r in runs if "sweep.trial_id" in r.data.tags}
    assert sorted(children) == ["t_0", "t_1"]
    run = children["t_0"]
    history = client.get_metric_history(run.info.run_id, "val/exact_match")
    assert [(m.step, m.value) for m in history] == [(0, 0.0), (10, 0.5), (20, 0.75)]
    assert run.data.metrics["n_params"] == 14688
    assert (run.data.tags["sweep.status"], run.info.status) == ("EARLY_STOPPED", "FINISHED")
    cut_run = children["t_1"]
    assert cut_run.data.params["train.seed"] == "1"
    history = client.get_metric_history(cut_run.info.run_id, "val/exact_match")
    assert [(m.step, m.value) for m in history] == [(0, 0.25), (10, 0.5)]


def test_spec_of_a_new_parent_waits_in_the_outbox_when_the_store_fails(tmp_path):
    # CI saw a server go down between the parent run and its spec artifact end the sweep.
    # Here a file stands where the artifact folder should be: the spec waits, the sweep goes
    # on, and it is delivered once the file is gone.
    uri = fresh_store(tmp_path / "mlflow.db")
    tracker = make_tracker(uri)
    store = tmp_path / "artifacts"
    experiment = tracker.client.create_experiment("tracking-test", artifact_location=str(store))
    if store.exists():
        store.rmdir()
    store.write_text("not a folder")  # log_artifact cannot write under a file
    tracker.writer.experiment_id = experiment
    parent = tracker.start_parent("sweep: {name: tracking-test}\n")
    assert not tracker.outbox.flush() and tracker.outbox.pending, "the spec should wait, not raise"
    store.unlink()
    tracker.outbox.retry_at = 0.0
    assert tracker.outbox.flush()
    assert [a.path for a in tracker.client.list_artifacts(parent)] == ["spec.yaml"]


def test_a_trial_that_errors_before_it_starts_still_gets_its_child_run(tmp_path):
    """Tune can end a trial in ERROR without on_trial_start (a reused actor lost during its
    reset, before sweeps.cluster.tunefix): MLflow must still show it, failed, with its params."""
    uri = fresh_store(tmp_path / "mlflow.db")
    tracker = make_tracker(uri)
    tracker.start_parent("sweep: {name: tracking-test}\n")
    trial = FakeTrial("t_7", {"model.d_model": 16}, status="ERROR", error_file="/x/error.txt")
    tracker.on_trial_error(0, [], trial)
    assert tracker.outbox.flush()
    client = MlflowClient(uri)
    run = client.get_run(tracker.trials["t_7"].run_id)
    assert run.data.tags["mlflow.parentRunId"] == tracker.parent_run_id
    assert run.data.tags["sweep.trial_id"] == "t_7"
    assert (run.data.tags["sweep.status"], run.info.status) == ("ERROR", "FAILED")
    assert run.data.tags["sweep.error_file"] == "/x/error.txt"
    assert run.data.params["model.d_model"] == "16"
    assert run.data.metrics["n_params"] > 0  # sizes from the config (the fallback summary)


def test_parent_run_carries_the_choice_on_validation_and_its_held_out_figures(tmp_path):
    """Issue 19: the parent's best/<metric> is the validation figure the trial was chosen on;
    its test and ood figures sit beside it (best/test/...), and the UI view sorts on validation
    with the held-out column shown."""
    import pandas as pd

    from sweeps.runtime.outputs import _log_key_figures
    from sweeps.runtime.report import best_trial
    from sweeps.spec.sweep_spec import load_spec
    from sweeps.tracking import ui

    uri = fresh_store(tmp_path / "mlflow.db")
    tracker = make_tracker(uri)
    tracker.start_parent("sweep: {name: tracking-test}\n")
    spec = load_spec(Path(__file__).resolve().parents[1] / "search_spaces" / "smoke.yaml")
    trials = pd.DataFrame(
        {
            "trial_id": ["t_00000", "t_00001", "t_00002"],
            "run_id": ["r0", "r1", "r2"],
            "status": ["TERMINATED"] * 3,
            "model.d_model": [16, 32, 32],
            "val/exact_match": [0.9, 1.0, 1.0],
            "val/loss": [0.3, 0.2, 0.1],
            "test/exact_match": [0.99, 0.95, 0.97],
            "ood/exact_match": [0.1, 0.2, 0.3],
        }
    )
    best = best_trial(trials, spec.sweep.metric, spec.sweep.mode)
    _log_key_figures(spec, tracker, trials, ["model.d_model"], best)
    client = MlflowClient(uri)
    parent = client.get_run(tracker.parent_run_id)
    assert parent.data.metrics["best/val/exact_match"] == 1.0
    assert parent.data.metrics["best/test/exact_match"] == 0.97  # t_00002's, not test's max
    assert parent.data.metrics["best/ood/exact_match"] == 0.3
    assert parent.data.tags["sweep.best_trial"] == "t_00002"
    assert parent.data.tags["sweep.best_chosen_on"] == "val/exact_match (max)"
    experiment = client.get_experiment(parent.info.experiment_id)
    envelope = json.loads(experiment.tags[ui.VIEW_TAG_PREFIX + ui.view_key(parent.info.run_id)])
    state = json.loads(envelope["state"])
    assert state["orderByKey"] == "metrics.`val/exact_match`" and not state["orderByAsc"]
    assert "tags.`test/exact_match`" in state["selectedColumns"]  # a trial's run keeps it so


def test_an_errored_trial_restarted_by_a_resume_logs_its_real_summary(tmp_path):
    """Issue 20: the stand-in summary of an errored trial is not train()'s; a resumed sweep
    that restarts the trial logs the real one (steps, best/*, steps to threshold, reason)."""
    uri = fresh_store(tmp_path / "mlflow.db")
    first = make_tracker(uri)
    parent = first.start_parent("sweep: {name: tracking-test}\n")
    trial = FakeTrial("t_0", {"model.d_model": 32}, error_file="/x/error.txt")
    first.on_trial_start(0, [], trial)
    first.on_trial_result(1, [], trial, eval_result(0, 0.0))
    first.on_trial_result(2, [], trial, eval_result(10, 0.5))
    trial.last_result = {"time_total_s": 1.0}
    first.on_trial_error(3, [], trial)
    assert first.outbox.flush()
    run_id = first.trials["t_0"].run_id
    client = MlflowClient(uri)
    assert client.get_run(run_id).data.tags["sweep.stopped_reason"] == "error"

    second = make_tracker(uri)
    second.attach(parent)
    second.on_trial_start(4, [], trial)  # restarted from its checkpoint at step 10
    second.on_trial_result(5, [], trial, eval_result(10, 0.5))
    second.on_trial_result(6, [], trial, eval_result(20, 0.75))
    second.on_trial_result(7, [], trial, summary_result(20))
    second.on_trial_complete(8, [], trial)
    assert second.outbox.flush()
    run = client.get_run(run_id)
    assert run.data.tags["sweep.stopped_reason"] == "early_stopping"
    assert (run.data.tags["sweep.status"], run.info.status) == ("EARLY_STOPPED", "FINISHED")
    assert run.data.metrics["steps"] == 20
    assert run_figures(run)["best/val/exact_match"] == 0.75
    assert run.data.metrics["val/steps_to_threshold"] == 20
    for key in run.data.metrics:
        steps = [m.step for m in client.get_metric_history(run_id, key)]
        assert len(steps) == len(set(steps)), (key, steps)


def test_an_end_of_sweep_done_again_after_a_resume_logs_each_parent_figure_once(tmp_path):
    """Issue 20: the fits and figures of the parent run, sent again by a resumed sweep's end
    (or replayed from the journal), add no second (key, step) pair and no changed param."""
    uri = fresh_store(tmp_path / "mlflow.db")
    first = make_tracker(uri)
    parent = first.start_parent("sweep: {name: tracking-test}\n")
    figures = ({"trials/total": 4.0, "fit/a": 1.5}, {"model.d_model": "[16, 32]"}, {"x": "1"})
    first.log_parent_figures(*figures)
    assert first.outbox.flush()
    again = make_tracker(uri)
    again.attach(parent)
    again.log_parent_figures({**figures[0], "trials/terminated": 4.0}, *figures[1:])
    assert again.finish_parent()
    client = MlflowClient(uri)
    run = client.get_run(parent)
    assert run.info.status == "FINISHED"
    assert run.data.params["model.d_model"] == "[16, 32]" and run.data.tags["x"] == "1"
    for key in ("trials/total", "fit/a", "trials/terminated"):
        assert [m.step for m in client.get_metric_history(parent, key)] == [0], key

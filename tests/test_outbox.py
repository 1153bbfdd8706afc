"""The outbox's one decision, wait or go on, over real failures of MLflow stores; a refused
write that neither blocks the writes behind it nor leaves the journal; the journal written off
Tune's loop, and complete at Tune's snapshots; and requests that stay within MLflow's limits,
so that a retry never sends a metric point twice."""

from __future__ import annotations

import functools
import http.server
import os
import socket
import sqlite3
import threading
from pathlib import Path
from unittest import mock

import pytest
from mlflow import MlflowClient
from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
from mlflow.utils.validation import MAX_ENTITIES_PER_BATCH
from sweep_procs import free_port, fresh_store
from test_tracking import BASE, FakeTrial, eval_result

from arith.training.cost import describe
from sweeps.runtime.preflight import HTTP_ENV
from sweeps.spec.space import resolve_run_config
from sweeps.tracking.outbox import is_transient, read_journal
from sweeps.tracking.tracker import MLflowTracker
from sweeps.tracking.writer import MLflowWriter, over_limits


@pytest.fixture
def bounded_http(monkeypatch):
    """MLflow's HTTP client as a sweep sets it: no retries, a bounded timeout."""
    for name, value in HTTP_ENV.items():
        monkeypatch.setenv(name, value)


def param_logged_twice(uri: str) -> Exception:
    """What the store raises for a param logged again with another value (a refused write)."""
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("refused"))
    client.log_param(run.info.run_id, "model.d_model", "32")
    return _raised(client.log_param, run.info.run_id, "model.d_model", "64")


def _raised(call, *args) -> Exception:
    try:
        call(*args)
    except Exception as err:
        return err
    raise AssertionError(f"{call} did not fail")


def sqlite_refused(tmp: Path, request) -> Exception:
    return param_logged_twice(fresh_store(tmp / "mlflow.db"))


def server_refused(tmp: Path, request) -> Exception:
    return param_logged_twice(request.getfixturevalue("mlflow_server"))


def sqlite_locked(tmp: Path, request) -> Exception:
    """sqlite3's own error while another connection holds the write lock."""
    path = tmp / "locked.db"
    holder = sqlite3.connect(path)
    holder.execute("create table t (x)")
    holder.commit()
    holder.execute("begin exclusive")
    try:
        writer = sqlite3.connect(path, timeout=0)
        return _raised(writer.execute, "insert into t values (1)")
    finally:
        holder.rollback()


def mlflow_sqlite_locked(tmp: Path, request) -> Exception:
    """MLflow's SQLite store while another process holds the database's write lock (MLflow
    waits out its own busy_timeout, 20 s, before it gives up)."""
    uri = fresh_store(tmp / "mlflow.db")
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("locked"))
    holder = sqlite3.connect(tmp / "mlflow.db")
    holder.execute("begin exclusive")
    try:
        return _raised(client.log_param, run.info.run_id, "x", "1")
    finally:
        holder.rollback()


def connection_refused(tmp: Path, request) -> Exception:
    client = MlflowClient(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    return _raised(client.get_experiment_by_name, "x")


def server_silent(tmp: Path, request) -> Exception:
    """A server that accepts the connection and never answers: the client's timeout (one
    second here, not the sweep's ten)."""
    with socket.socket() as listener, mock.patch.dict(os.environ, MLFLOW_HTTP_REQUEST_TIMEOUT="1"):
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        client = MlflowClient(f"http://127.0.0.1:{listener.getsockname()[1]}")
        return _raised(client.get_experiment_by_name, "x")


class _Unavailable(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(503)
        self.end_headers()
        self.wfile.write(b"overloaded")

    def log_message(self, *args) -> None:
        pass


def server_error(tmp: Path, request) -> Exception:
    """A proxy in front of the tracking server answering 503."""
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Unavailable) as proxy:
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        try:
            client = MlflowClient(f"http://127.0.0.1:{proxy.server_address[1]}")
            return _raised(client.get_experiment_by_name, "x")
        finally:
            proxy.shutdown()


def requests_connection_error(tmp: Path, request) -> Exception:
    import requests

    return _raised(functools.partial(requests.get, timeout=1), f"http://127.0.0.1:{free_port()}/")


def apply_bug(tmp: Path, request) -> Exception:
    """A bug in the tracker's own code (a record naming a trial it does not know)."""
    tracker = MLflowTracker(fresh_store(tmp / "mlflow.db"), "bug", lambda c: c)
    return _raised(tracker.writer.apply, {"op": "running", "trial": "unknown"})


@pytest.mark.parametrize(
    ("make_error", "transient"),
    [
        (sqlite_refused, False),
        (server_refused, False),
        (apply_bug, False),
        (sqlite_locked, True),
        (mlflow_sqlite_locked, True),
        (connection_refused, True),
        (server_silent, True),
        (server_error, True),
        (requests_connection_error, True),
    ],
    ids=lambda value: getattr(value, "__name__", str(value)),
)
def test_only_an_outage_is_transient(tmp_path, request, bounded_http, make_error, transient):
    err = make_error(tmp_path, request)
    assert is_transient(err) is transient, repr(err)


def test_a_refused_write_is_reported_once_kept_and_does_not_block(tmp_path, capsys):
    """SQLite refuses a param logged again with another value: one warning, the metrics behind
    it are delivered, and the refused write stays in the journal for a resumed driver."""
    uri = fresh_store(tmp_path / "mlflow.db")
    journal = tmp_path / "outbox.jsonl"
    resolve = functools.partial(resolve_run_config, BASE, derived={})
    tracker = MLflowTracker(uri, "tracking-test", resolve, describe, journal=journal)
    parent = tracker.start_parent("sweep: {name: tracking-test}\n")
    trial = FakeTrial("t_0", {"model.d_model": 32})
    tracker.on_trial_start(0, [], trial)
    conflicting = {"op": "setup", "trial": "t_0", "config": {"model.d_model": 64}}
    tracker._send({**conflicting, "what": "params of t_0 again"})
    tracker.on_trial_result(1, [], trial, eval_result(0, 0.0))
    tracker.on_trial_result(2, [], trial, eval_result(10, 0.5))

    assert tracker.outbox.flush()  # sends only queue: wait for the writer thread
    assert not tracker.outbox.pending
    warnings = [line for line in capsys.readouterr().err.splitlines() if "params of t_0" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: mlflow refused params of t_0")
    assert str(journal) in warnings[0]
    assert [r["what"] for r in read_journal(journal)] == ["params of t_0 again"]
    client = MlflowClient(uri)
    run_id = tracker.trials["t_0"].run_id
    history = client.get_metric_history(run_id, "val/exact_match")
    assert [(m.step, m.value) for m in history] == [(0, 0.0), (10, 0.5)]
    assert client.get_run(run_id).data.params["model.d_model"] == "32"

    # A resumed driver reads it back; MLflow holds the trial's params, so it is skipped.
    again = MLflowTracker(uri, "tracking-test", resolve, describe, journal=journal)
    again.attach(parent)
    assert again.replay() == 1
    assert not again.outbox.pending and journal.read_text() == ""


def _held_tracker(tmp_path):
    uri = fresh_store(tmp_path / "mlflow.db")
    resolve = functools.partial(resolve_run_config, BASE, derived={})
    tracker = MLflowTracker(uri, "tracking-test", resolve, describe, journal=tmp_path / "j.jsonl")
    tracker.start_parent("sweep: {name: tracking-test}\n")
    trial = FakeTrial("t_0", {"model.d_model": 32})
    tracker.on_trial_start(0, [], trial)
    assert tracker.outbox.flush()
    return uri, tracker, trial


def _counting_log_batch(monkeypatch) -> list[int]:
    """The metrics of each log_batch request MLflow's client sends (the real call goes on)."""
    sizes: list[int] = []
    real = MlflowClient.log_batch

    def counting(self, run_id, metrics=(), params=(), tags=(), **kwargs):
        sizes.append(len(metrics))
        return real(self, run_id, metrics=metrics, params=params, tags=tags, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_batch", counting)
    return sizes


def test_results_waiting_for_a_slow_store_go_out_in_one_request(tmp_path, monkeypatch):
    """Five evaluations queued while the writer is busy (its lock held, as a slow request holds
    it) reach MLflow in one log_batch, every step in order, none twice."""
    uri, tracker, trial = _held_tracker(tmp_path)
    sizes = _counting_log_batch(monkeypatch)
    with tracker.outbox._cond:  # the writer thread cannot take a record meanwhile
        for i in range(5):
            tracker.on_trial_result(i + 1, [], trial, eval_result(10 * i, i / 10))
    assert tracker.outbox.flush() and not tracker.outbox.pending
    assert len([n for n in sizes if n]) == 1, sizes
    history = MlflowClient(uri).get_metric_history(tracker.trials["t_0"].run_id, "val/exact_match")
    assert [(m.step, m.value) for m in history] == [(10 * i, i / 10) for i in range(5)]


def test_a_combined_write_the_store_refuses_is_tried_one_record_at_a_time(
    tmp_path, monkeypatch, capsys
):
    """A params conflict inside a combined write: the records go one at a time, the one the
    store refuses is reported and kept, the metrics around it are delivered."""
    uri, tracker, _ = _held_tracker(tmp_path)
    run_id = tracker.trials["t_0"].run_id
    rows = [
        {"op": "metrics", "trial": "t_0", "step": 1, "metrics": {"x": 1.0}},
        {"op": "metrics", "trial": "t_0", "step": 2, "metrics": {"x": 2.0},
         "params": {"model.d_model": "64"}, "what": "params of t_0 again"},
        {"op": "metrics", "trial": "t_0", "step": 3, "metrics": {"x": 3.0}},
    ]  # fmt: skip
    assert tracker.writer.combine(rows)[1] == 3  # one request, were the store to take it
    with tracker.outbox._cond:
        for row in rows:
            tracker._send(row)
    assert tracker.outbox.flush() and not tracker.outbox.pending
    history = MlflowClient(uri).get_metric_history(run_id, "x")
    assert [(m.step, m.value) for m in history] == [(1, 1.0), (3, 3.0)]
    warnings = [line for line in capsys.readouterr().err.splitlines() if "refused" in line]
    assert len(warnings) == 1 and "params of t_0 again" in warnings[0]
    assert [r["what"] for r in read_journal(tmp_path / "j.jsonl")] == ["params of t_0 again"]


def test_combine_stops_where_one_request_could_not_hold_the_next_record():
    def row(step, trial="t_0", **more):
        return {"op": "metrics", "trial": trial, "step": step, "metrics": {"x": 1.0}, **more}

    combine = MLflowWriter.combine
    merged, count = combine([row(1), row(2, params={"a": "1"}), row(3, tags={"t": "x"})])
    assert count == 3 and merged["rows"] == [(1, {"x": 1.0}), (2, {"x": 1.0}), (3, {"x": 1.0})]
    assert (merged["params"], merged["tags"]) == ({"a": "1"}, {"t": "x"})
    assert combine([row(1), row(2, trial="t_1")])[1] == 1  # another trial's run
    assert combine([row(1), {"op": "end", "trial": "t_0"}, row(2)])[1] == 1  # order kept
    assert combine([row(1), row(1)])[1] == 1  # a metric twice at one step
    assert combine([row(1, params={"a": "1"}), row(2, params={"a": "1"})])[1] == 1
    assert combine([{"op": "end", "trial": "t_0"}, row(1)]) == ({"op": "end", "trial": "t_0"}, 1)
    many = [{**row(i), "metrics": {f"m{j}": 0.0 for j in range(300)}} for i in range(5)]
    assert combine(many)[1] == 3  # 900 metrics; a fourth record would pass MLflow's 1000
    # 950 metrics and 60 params are more than the 1000 entities a request may hold in all
    wide = {**row(1), "metrics": {f"m{j}": 0.0 for j in range(950)}}
    assert combine([wide, row(2, params={f"p{j}": "1" for j in range(60)})])[1] == 1


def test_split_cuts_a_record_into_requests_with_a_summarys_tags_last():
    summary = {
        "op": "metrics", "trial": "t_0", "step": 20, "summary": True, "what": "summary of t_0",
        "metrics": {f"m{j}": float(j) for j in range(1500)},
        "params": {f"p{j}": str(j) for j in range(150)}, "tags": {"sweep.stopped_reason": "x"},
    }  # fmt: skip
    parts = MLflowWriter.split(summary)
    assert len(parts) == 3
    for part in parts:
        sizes = [len(part.get(kind) or {}) for kind in ("metrics", "params", "tags")]
        assert not over_limits(*sizes) and sum(sizes) <= MAX_ENTITIES_PER_BATCH, sizes
        assert (part["op"], part["trial"], part["step"]) == ("metrics", "t_0", 20)
    for kind in ("metrics", "params", "tags"):  # each once, in order
        joined = [key for part in parts for key in part.get(kind) or {}]
        assert joined == list(summary[kind]), kind
    assert [p.get("summary") for p in parts] == [None, None, True]
    assert parts[-1]["tags"] == summary["tags"]
    assert parts[0]["what"] == "summary of t_0 (part 1 of 3)"
    small = {**summary, "metrics": {"x": 1.0}, "params": {}}
    assert MLflowWriter.split(small) == [small]
    assert MLflowWriter.split({"op": "end", "trial": "t_0"}) == [{"op": "end", "trial": "t_0"}]


def test_a_retry_after_a_big_records_second_request_failed_sends_no_point_twice(
    tmp_path, monkeypatch
):
    """A result of 1500 metrics is two requests (MLflow allows 1000 metrics in one); the store
    fails the second once, as a server going away between them would. Before records were cut
    to MLflow's limits, MLflow's client made both requests of one write, and the retry sent the
    first 1000 points again."""
    uri, tracker, trial = _held_tracker(tmp_path)
    sizes: list[int] = []
    real = SqlAlchemyStore.log_batch

    def second_fails_once(self, run_id, metrics, params, tags):
        sizes.append(len(metrics))
        if len(sizes) == 2:
            raise ConnectionError("connection reset by peer")  # an outage: the outbox waits
        return real(self, run_id, metrics, params, tags)

    monkeypatch.setattr(SqlAlchemyStore, "log_batch", second_fails_once)
    tracker.outbox.backoff_s = 0.05
    wide = {**eval_result(10, 0.5), **{f"val/exact_match/cell_{j}": 0.5 for j in range(1500)}}
    tracker.on_trial_result(1, [], trial, wide)
    assert tracker.outbox.drain(30) and tracker.outbox.failures == 1
    client, run_id = MlflowClient(uri), tracker.trials["t_0"].run_id
    for key in ("val/exact_match/cell_0", "val/exact_match/cell_999", "val/exact_match/cell_1499"):
        assert [m.step for m in client.get_metric_history(run_id, key)] == [10], key
    assert len(client.get_run(run_id).data.metrics) == len(wide) - 10  # Tune's keys left out
    assert len(sizes) == 3 and max(sizes) <= 1000, sizes


def test_tunes_loop_only_queues_and_a_snapshot_finds_every_record_journaled(tmp_path, monkeypatch):
    """A store that holds the writer thread in a request: the results Tune hands on meanwhile
    are queued without a flush to the disk on Tune's thread; the snapshot's get_state returns
    without waiting for the store, and the journal then holds every record not delivered, for a
    driver killed right after the snapshot. (Before, every send appended and flushed on
    Tune's thread.)"""
    uri, tracker, trial = _held_tracker(tmp_path)
    inside, release = threading.Event(), threading.Event()
    real = SqlAlchemyStore.log_batch

    def held(self, *args, **kwargs):
        inside.set()
        release.wait(60)
        return real(self, *args, **kwargs)

    flushed_on: list[str] = []  # the threads that flushed the journal to the disk
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        flushed_on.append(threading.current_thread().name)
        real_fsync(fd)

    monkeypatch.setattr(SqlAlchemyStore, "log_batch", held)
    monkeypatch.setattr(os, "fsync", fsync)
    try:
        tracker.on_trial_result(1, [], trial, eval_result(0, 0.0))
        assert inside.wait(30)  # the writer thread is in the store's hands
        for i in range(1, 5):
            tracker.on_trial_result(i + 1, [], trial, eval_result(10 * i, i / 10))
        assert threading.current_thread().name not in flushed_on, flushed_on
        snapshot = threading.Thread(target=tracker.get_state)
        snapshot.start()
        snapshot.join(30)
        assert not snapshot.is_alive(), "get_state waited for the store"
        journaled = [r["what"] for r in read_journal(tmp_path / "j.jsonl")]
        assert journaled == [f"metrics of t_0 at step {10 * i}" for i in range(5)]
    finally:
        release.set()
    assert tracker.outbox.flush() and (tmp_path / "j.jsonl").read_text() == ""
    history = MlflowClient(uri).get_metric_history(tracker.trials["t_0"].run_id, "val/exact_match")
    assert [m.step for m in history] == [0, 10, 20, 30, 40]

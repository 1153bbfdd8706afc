"""The outbox's one decision, wait or go on, over real failures of MLflow stores; and a refused
write that neither blocks the writes behind it nor leaves the journal."""

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
from sweep_procs import free_port
from test_tracking import BASE, FakeTrial, eval_result

from arith.training.cost import describe
from sweeps.runtime.preflight import HTTP_ENV
from sweeps.spec.space import resolve_run_config
from sweeps.tracking.outbox import is_transient, read_journal
from sweeps.tracking.tracker import MLflowTracker


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
    return param_logged_twice(f"sqlite:///{tmp / 'mlflow.db'}")


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
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
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
    tracker = MLflowTracker(f"sqlite:///{tmp / 'mlflow.db'}", "bug", lambda c: c)
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
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
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

"""A tracking server that answers slowly (a real ``mlflow server`` behind a proxy on 127.0.0.1
that holds every request back) does not slow Tune down: the driver's writes go through the
outbox's writer thread, so no Tune callback waits on the store, trials are scheduled on time
and nothing is lost."""

from __future__ import annotations

import collections
import contextlib
import json
import socket
import threading
import time

import pytest
from sweep_procs import (
    ROOT,
    assert_no_duplicate_steps,
    children,
    free_port,
    result_lines,
    run_to_end,
    start_mlflow_server,
    stop_mlflow_server,
)

DELAY_S = 0.15


class DelayingProxy:
    """A TCP proxy on 127.0.0.1 to ``target_port`` that holds each request (the first bytes a
    client sends after the server's last answer) back ``delay_s``; ``requests`` counts them,
    ``paths`` per endpoint."""

    def __init__(self, target_port: int, delay_s: float) -> None:
        self.target_port, self.delay_s = target_port, delay_s
        self.requests = 0
        self.paths: collections.Counter[str] = collections.Counter()
        self._count = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()

    def endpoints(self) -> dict[str, int]:
        """Requests per endpoint, the artifact uploads counted as one."""
        out: collections.Counter[str] = collections.Counter()
        for path, n in self.paths.items():
            out["artifact uploads" if "/mlflow-artifacts/" in path else path] += n
        return dict(out.most_common())

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            answered = threading.Event()
            answered.set()
            threading.Thread(
                target=self._pump, args=(client, server, answered, True), daemon=True
            ).start()
            threading.Thread(
                target=self._pump, args=(server, client, answered, False), daemon=True
            ).start()

    def _pump(
        self, src: socket.socket, dst: socket.socket, answered: threading.Event, up: bool
    ) -> None:
        try:
            while data := src.recv(65536):
                if up and answered.is_set():  # a new request on this connection
                    answered.clear()
                    line = data.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
                    with self._count:
                        self.requests += 1
                        self.paths[line[1].split("?")[0] if len(line) > 1 else "?"] += 1
                    time.sleep(self.delay_s)
                elif not up:
                    answered.set()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def slow_server(tmp_path):
    port = free_port()
    (tmp_path / "server").mkdir()
    proc = start_mlflow_server(tmp_path / "server", port)
    proxy = DelayingProxy(port, DELAY_S)
    try:
        yield proxy
    finally:
        proxy.close()
        stop_mlflow_server(proc)


@pytest.mark.slow
def test_a_slow_server_does_not_hold_up_the_trials(tmp_path, slow_server):
    """Each request held back 0.15 s costs the synchronous driver seconds at every trial's
    end (its model, diagnostics and metric history): measured before the writer thread,
    0.3 s x 152 requests stretched Tune's phase from the trials' ~4 s to 33 s and started the
    second pair of trials 23 s after the first pair ended. Now Tune's phase (from the trials'
    own result timestamps, to the second) stays near the trials' time, and the writes follow
    on the writer thread, in order, all delivered."""
    uri = f"http://127.0.0.1:{slow_server.port}"
    start = time.monotonic()
    watched = tmp_path / "callbacks.json"  # what Tune's callbacks waited on (callback_probe.py)
    probe = (str(ROOT / "tests" / "callback_probe.py"), str(watched))
    code, err = run_to_end(
        tmp_path, uri, ["base.train.max_steps=30"], launcher=probe, timeout_s=240
    )
    wall_s = time.monotonic() - start
    assert code == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]

    # Each trial's (start, end) as its own results say (Tune's timestamps are whole seconds):
    # from its first report (its step-0 evaluation, before it trains) to its last. Not from
    # Tune's clock of the trial function: a worker's first trial imports torch inside it (the
    # trainable's module no longer does, so that the driver does not), 4-5 s on 2 cores that
    # are the worker's start, not the driver's hold on Tune (before the writer thread, that hold
    # came between trials: 23 s between the first pair's end and the second's start).
    results = result_lines(tmp_path / "out" / "smoke" / "ray" / "smoke").values()
    spans = sorted((r[0]["timestamp"], r[-1]["timestamp"]) for r in results)
    assert len(spans) == 4
    tune_s = max(end for _, end in spans) - spans[0][0]
    # How long each trial waited for its slot after an earlier trial had ended.
    waits = [begin - max(end for _, end in spans[:i]) for i, (begin, _) in enumerate(spans) if i]
    writes_s = slow_server.requests * DELAY_S
    print(
        f"wall {wall_s:.1f} s, tune {tune_s:.1f} s, waits for a slot {waits} s, "
        f"{slow_server.requests} requests x {DELAY_S} s = {writes_s:.1f} s; "
        f"{slow_server.endpoints()}"
    )
    assert max(waits) < 3.0, (waits, tune_s, writes_s)
    assert tune_s < 0.3 * writes_s, (tune_s, writes_s)
    _assert_no_callback_waited_on_the_store(json.loads(watched.read_text()))

    direct = f"http://127.0.0.1:{slow_server.target_port}"
    parents, runs = children(direct, "smoke")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len({r.data.tags["sweep.trial_id"] for r in runs}) == len(runs) == 4
    for run in runs:
        assert (run.data.tags["sweep.status"], run.info.status) == ("TERMINATED", "FINISHED")
        assert run.data.tags["sweep.stopped_reason"] == "max_steps"
        assert run.data.metrics["n_params"] > 0  # train()'s summary
    assert assert_no_duplicate_steps(direct, runs) > 0
    journal = tmp_path / "out" / "smoke" / "mlflow_outbox.jsonl"
    assert not journal.exists() or journal.read_text() == ""  # nothing left waiting


def _assert_no_callback_waited_on_the_store(watched: dict) -> None:
    """No hook of the sweep's Tune callback made a request to the store or waited for the
    outbox's writer thread; the journal went to the disk on the writer thread, or in
    get_state, at Tune's snapshots (a driver killed after one must find its records there),
    never in a hook of every result (measured before: once per record queued)."""
    calls = watched["calls"]
    assert calls.get("setup") == 1 and calls.get("on_trial_complete") == 4, calls
    assert calls.get("on_trial_result", 0) >= 8 and calls.get("get_state", 0) >= 1, calls
    store = [w for w in watched["waits"] if w["kind"] != "journal"]
    assert not store, store[:10]
    journal = [w for w in watched["waits"] if w["kind"] == "journal" and w["hook"] != "get_state"]
    assert not journal, journal[:10]

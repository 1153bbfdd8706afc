"""A sweep through Ray Client (``--address ray://HOST:10001``): the whole driver runs on the
cluster's head, and this process shows what it prints.

Through Ray Client, Tune moves its loop to the head and leaves the caller a proxy: the sweep's
MLflow tracker would record from the head while the end of the sweep (draining the records,
the tables, ``trials.csv``) ran here, and a sweep whose records never arrived exited 0. So the
driver itself (``sweeps.runtime.driver.drive``, as ``--address auto`` runs it on the head)
runs there as one Ray task pinned to the head node. What it writes to stdout and stderr comes
back through a small actor (``Console``) and is written here unchanged (the progress line
included), and its exit code is this command's. Ctrl-C here is Ctrl-C there: the first press
stops the sweep cleanly, resumably, a second at once (still resumable); should the driver not
answer, a third ends its task, as ``kill -9`` would.

Paths are the head's: ``--out``, a SQLite store and a plain ``--storage`` path, made absolute
here, must be reachable there (the same machine, a shared filesystem, an MLflow server).
"""

from __future__ import annotations

import io
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

# How often the head asks whether Ctrl-C was pressed here, and this process for output.
POLL_S = 0.3
# The settings of this environment the driver on the head takes too: MLflow's (credentials,
# timeouts), Tune's and the sweep's own.
FORWARDED_ENV = ("MLFLOW_", "TUNE_", "SWEEPS_")


class Console:
    """The actor between the driver on the head and this process: the text it wrote, in order,
    and whether Ctrl-C was pressed here."""

    def __init__(self) -> None:
        self.chunks: list[tuple[str, str]] = []
        self.presses = 0

    def write(self, stream: str, text: str) -> None:
        self.chunks.append((stream, text))

    def take(self) -> list[tuple[str, str]]:
        chunks, self.chunks = self.chunks, []
        return chunks

    def press(self) -> None:
        self.presses += 1

    def pressed(self) -> int:
        return self.presses


class ConsoleStream(io.TextIOBase):
    """A text stream of the driver on the head that sends what is written to the ``Console``:
    a line at a time (or a progress line's carriage return), in order."""

    encoding = "utf-8"

    def __init__(self, console, name: str, tty: bool) -> None:
        super().__init__()
        self.console, self.name, self.tty = console, name, tty
        self.buffer = ""
        self.last = None  # the last write sent: waited for before the driver returns

    def write(self, text: str) -> int:
        self.buffer += text
        if "\n" in text or "\r" in text:
            self.flush()
        return len(text)

    def flush(self) -> None:
        if self.buffer:
            self.last = self.console.write.remote(self.name, self.buffer)
            self.buffer = ""

    def isatty(self) -> bool:
        return self.tty

    def writable(self) -> bool:
        return True

    def sent(self) -> None:
        """Wait until everything written has reached the console."""
        import ray

        self.flush()
        if self.last is not None:
            ray.get(self.last)


def run_through_client(drive: Callable[..., int], run: dict[str, Any]) -> int:
    """The sweep ``run`` (``drive``'s arguments) through Ray Client: what can be checked here
    (Ray's version, the form of the store's URI and of the storage), the connection (its token
    sent), the storage the cluster's nodes must share, then ``drive`` on the head. ``drive`` is
    passed in, not imported: the driver imports this module (Ray pickles the function by name
    and the head imports it there)."""
    import ray

    from sweeps.cluster import connection as cluster
    from sweeps.cluster import tunefix
    from sweeps.runtime import preflight
    from sweeps.runtime.interrupt import ctrl_c_ignored

    try:
        tunefix.require_supported_ray()
        preflight.check_tracking_uri(run["tracking_uri"])
        preflight.check_storage_uri(run["storage"])
    except preflight.refusals() as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    storage = cluster.storage_path(run["storage"], run["out_dir"])
    if code := preflight.connect_cluster(run["address"], storage, shared=run["storage_shared"]):
        return code
    try:
        return run_on_head(drive, run, tty=sys.stderr.isatty())
    finally:
        with ctrl_c_ignored():
            ray.shutdown()  # disconnects; the cluster stays


def run_on_head(drive: Callable[..., int], run: dict[str, Any], tty: bool) -> int:
    """Run ``drive`` with the sweep ``run`` (its arguments) on the head of the
    cluster this process is connected to through Ray Client; its exit code."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from arith.cli import one_line
    from sweeps.runtime.interrupt import ctrl_c_counted

    on_head = NodeAffinitySchedulingStrategy(node_id=_head_node_id(), soft=False)
    console = ray.remote(num_cpus=0)(Console).options(scheduling_strategy=on_head).remote()
    remote = ray.remote(num_cpus=0, max_retries=0)(drive_on_head)
    env = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV)}
    task = remote.options(scheduling_strategy=on_head).remote(drive, console, run, tty, env)
    # A Ctrl-C here is counted and sent by the loop, never raised inside Ray Client's calls
    # (one that landed there was lost in a CI run: the sweep finished and exited 0).
    sent = 0
    with ctrl_c_counted() as presses:
        while True:
            try:
                done, _ = ray.wait([task], timeout=POLL_S)
                _show(ray.get(console.take.remote()))
                if done:
                    return int(ray.get(task))
                if len(presses) > 2:  # the driver did not answer: end it, as kill -9 would
                    ray.cancel(task, force=True)
                    print("stopped (Ctrl-C three times); --resume continues it", file=sys.stderr)
                    return 130
                for _ in range(len(presses) - sent):
                    ray.get(console.press.remote())
                    sent += 1
            except ray.exceptions.RayError as err:  # the task or its node died
                said = f"error: the sweep's driver on the head died: {one_line(err)}"
                print(said, file=sys.stderr)
                return 1


def _head_node_id() -> str:
    """The head node's id (Ray marks it with the ``node:__internal_head__`` resource)."""
    import ray

    for node in ray.nodes():
        if node.get("Alive") and "node:__internal_head__" in node.get("Resources", {}):
            return node["NodeID"]
    raise RuntimeError("no head node found among the cluster's nodes")


def _show(chunks: list[tuple[str, str]]) -> None:
    for name, text in chunks:
        stream = sys.stdout if name == "stdout" else sys.stderr
        stream.write(text)
        stream.flush()


def drive_on_head(
    drive: Callable[..., int], console, run: dict[str, Any], tty: bool, env: dict[str, str]
) -> int:
    """The Ray task on the head: ``drive``, in the client's ``env`` (FORWARDED_ENV), with its
    output sent to ``console``, and a Ctrl-C pressed there delivered here as SIGINT is to a
    local sweep."""
    import traceback

    os.environ.update(env)
    streams = {name: ConsoleStream(console, name, tty) for name in ("stdout", "stderr")}
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = streams["stdout"], streams["stderr"]
    finished = threading.Event()
    watcher = threading.Thread(target=_watch, args=(console, finished), daemon=True)
    watcher.start()
    try:
        return drive(**run)
    except KeyboardInterrupt:  # pressed before the sweep's own handler was in place
        print("interrupted", file=sys.stderr)
        return 130
    except Exception:  # a bug of the driver's: its traceback, shown where the command runs
        traceback.print_exc(file=sys.stderr)
        return 1
    finally:
        finished.set()
        for stream in streams.values():
            stream.sent()
        sys.stdout, sys.stderr = saved


def _watch(console, finished: threading.Event) -> None:
    """Deliver each Ctrl-C pressed on the client to this task's main thread. Ray blocks SIGINT
    in its workers' main thread (and the threads it starts inherit that), so a signal sent to
    the process would wait there for good: this thread unblocks SIGINT for itself and raises it
    here, and the Python handler runs in the main thread as for a press at a terminal (the
    sweep's own, which stops it cleanly, or KeyboardInterrupt before it is in place)."""
    import ray

    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
    delivered = 0
    while not finished.wait(POLL_S):
        try:
            pressed = ray.get(console.pressed.remote())
        except Exception:  # the console gone: the client went away, nothing to deliver
            return
        for _ in range(pressed - delivered):
            signal.raise_signal(signal.SIGINT)
            time.sleep(POLL_S)  # one press handled before the next arrives
        delivered = pressed

"""``python tests/callback_probe.py LOG -m sweeps.run ARGS...``: the sweep, with what Tune's
callbacks wait on written to LOG (JSON) as it exits.

The sweep gives Tune one callback (``sweeps.runtime.callbacks.ProcessCallbacks``), which hands
every hook on to the tracker and the others; each of its hooks is wrapped here, and while one
runs on a thread, these are noted as that hook's waits: a request to the store (any HTTP
request: MLflow's client and its artifact uploads go through ``requests``), a wait for the
outbox's writer thread (``Outbox.flush`` / ``drain``), and a flush of the journal to the disk.
LOG holds ``{"calls": {hook: count}, "waits": [{"hook", "kind", "what"}, ...]}``, the kinds
``request``, ``outbox`` and ``journal``.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import functools
import json
import os
import runpy
import sys
import threading
from pathlib import Path

import requests
from ray.tune import Callback

from sweeps.runtime.callbacks import ProcessCallbacks
from sweeps.runtime.tuner import JOURNAL_FILE
from sweeps.tracking.outbox import Outbox

_hook = threading.local()  # the hook running on this thread, if any
calls: collections.Counter[str] = collections.Counter()
waits: list[dict[str, str]] = []


def _note(kind: str, what: str) -> None:
    name = getattr(_hook, "name", None)
    if name is not None:
        waits.append({"hook": name, "kind": kind, "what": what})


def _watched_hook(name: str, hook):
    @functools.wraps(hook)
    def watched(self, *args, **kwargs):
        calls[name] += 1
        _hook.name = name
        try:
            return hook(self, *args, **kwargs)
        finally:
            _hook.name = None

    return watched


def _noting(kind: str, describe, call):
    @functools.wraps(call)
    def noted(*args, **kwargs):
        _note(kind, describe(*args, **kwargs))
        return call(*args, **kwargs)

    return noted


def _install() -> None:
    hooks = [name for name in vars(Callback) if name.startswith("on_")]
    for name in [*hooks, "setup", "get_state", "set_state"]:
        setattr(ProcessCallbacks, name, _watched_hook(name, getattr(ProcessCallbacks, name)))
    requests.Session.request = _noting(
        "request", lambda session, method, url, *a, **k: f"{method} {url}", requests.Session.request
    )
    for name in ("flush", "drain"):
        setattr(Outbox, name, _noting("outbox", lambda *a, n=name, **k: n, getattr(Outbox, name)))
    fsync = os.fsync

    def journal_fsync(fd: int) -> None:
        with contextlib.suppress(OSError):
            if Path(os.readlink(f"/proc/self/fd/{fd}")).name == JOURNAL_FILE:
                _note("journal", "fsync")
        fsync(fd)

    os.fsync = journal_fsync


def _write(log: Path) -> None:
    log.write_text(json.dumps({"calls": dict(calls), "waits": waits}))


if __name__ == "__main__":
    log, dash_m, module, *rest = sys.argv[1:]
    assert (dash_m, module) == ("-m", "sweeps.run"), sys.argv
    _install()
    atexit.register(_write, Path(log))
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)

"""One driver per sweep folder at a time.

Two commands driving one sweep (the same command in a second terminal, a ``--resume`` typed
while the first still runs, or through Ray Client while the driver of a client that went
away still runs on the head until Ray's reconnect grace period ends) would restore and write
the same Tune state and MLflow runs. The driver holds an exclusive lock while it runs, on a
file named after the sweep folder's path in this machine's temporary folder (so that nothing is
made in the user's folders before the checks pass, and ``--overwrite`` keeps it); the operating
system releases it when the process ends, however it ends, so a killed driver never leaves a
stale lock. A second driver on this machine is refused in one line. (Two drivers on two
machines of a shared filesystem are not seen: a driver runs where its command runs, or on the
head through Ray Client or a job.)
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from sweeps.runtime.state import SweepError

LOCK_FOLDER = "arith-sweeps-locks"


def lock_path(out_dir: Path) -> Path:
    """The lock file of the sweep folder ``out_dir`` (by its absolute path)."""
    digest = hashlib.sha1(str(out_dir.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / LOCK_FOLDER / f"{out_dir.name}-{digest}.lock"


@contextlib.contextmanager
def held(out_dir: Path) -> Iterator[None]:
    """Hold the sweep's lock while the block runs; SweepError (one line) when another driver
    holds it."""
    path = lock_path(out_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("a+", encoding="utf-8")
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise SweepError(_refusal(out_dir, handle)) from None
        handle.seek(0)
        handle.truncate()
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        handle.write(json.dumps(holder))
        handle.flush()
        yield
    finally:
        handle.close()  # releases the lock


def _refusal(out_dir: Path, handle) -> str:
    try:
        handle.seek(0)
        holder = json.loads(handle.read() or "{}")
    except (OSError, ValueError):
        holder = {}
    who = ""
    if holder.get("pid"):
        since = time.strftime("%H:%M:%S", time.localtime(holder.get("since", 0)))
        who = f" (pid {holder['pid']} on {holder.get('host', '?')}, since {since})"
    return (
        f"sweep {out_dir.name!r} in {out_dir.parent} is being driven by another command{who}; "
        "wait for it to end, or stop it (Ctrl-C there), then run this again"
    )

"""Ctrl-C during a sweep: the first press stops it cleanly and leaves it resumable, a second
stops it at once (still resumable, as after ``kill -9``).

Tune's own SIGINT handler stops a run gracefully but then returns as if the run had ended, so
its caller cannot tell a stopped sweep from a finished one. This handler takes SIGINT instead
(Tune steps aside under ``TUNE_DISABLE_SIGINT_HANDLER``) and asks Tune for the same graceful
stop through SIGUSR1, which Tune always handles that way, remembering that it did."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading

TUNE_SIGINT_ENV = "TUNE_DISABLE_SIGINT_HANDLER"
# The CtrlC whose stop is under way, if any (the progress line reads it: Tune marks the trials
# it stops TERMINATED, which a count of finished trials must not show).
_stopping: CtrlC | None = None


def stopping() -> bool:
    """Whether Ctrl-C is stopping the sweep of this process."""
    return _stopping is not None


class CtrlC:
    """A context in which Ctrl-C is counted (``pressed``). While ``tuning`` is set and Tune
    listens, the first press asks Tune to stop; once ``ended`` is set (the sweep has ended,
    its record and summary are left) a press is ignored; any other press raises
    KeyboardInterrupt."""

    def __init__(self) -> None:
        self.pressed = 0
        self.tuning = False
        self.ended = False
        self._previous = None
        self._env: str | None = None

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is threading.main_thread():  # signals: main thread only
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
            self._env = os.environ.get(TUNE_SIGINT_ENV)
            os.environ[TUNE_SIGINT_ENV] = "1"
        return self

    def __exit__(self, *exc) -> None:
        global _stopping
        _stopping = None
        self.tuning = False
        if self._previous is None:
            return
        signal.signal(signal.SIGINT, self._previous)
        if self._env is None:
            os.environ.pop(TUNE_SIGINT_ENV, None)
        else:
            os.environ[TUNE_SIGINT_ENV] = self._env

    def _on_sigint(self, signum, frame) -> None:
        global _stopping
        if self.ended:
            print(
                "Ctrl-C: the sweep is already over; the command exits in a moment",
                file=sys.stderr,
                flush=True,
            )
            return
        self.pressed += 1
        _stopping = self
        # Tune's own notices of the stop name its Python API to restore with; the command
        # prints the --resume that does it.
        logging.getLogger("ray.tune").setLevel(logging.ERROR)
        # Tune installs its SIGUSR1 handler when its loop starts; before that the default
        # action of SIGUSR1 would end the process, so a press then stops at once instead.
        tune_listens = signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, None)
        if self.pressed == 1 and self.tuning and tune_listens:
            print(
                "stopping the sweep: running trials are checkpointed and stopped "
                "(Ctrl-C again to stop at once) ...",
                file=sys.stderr,
                flush=True,
            )
            os.kill(os.getpid(), signal.SIGUSR1)
            return
        raise KeyboardInterrupt


@contextlib.contextmanager
def ctrl_c_ignored():
    """Ctrl-C ignored for a moment that must finish (Ray's shutdown: cut short, it leaves the
    driver to be ended by Ray's processes with exit code 1, not 130)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def ctrl_c_counted(on_first: str | None = None):
    """Ctrl-C pressed during the block is counted in the list yielded, never raised: Ray's own
    calls (``ray.init``, Ray Client's) lost a KeyboardInterrupt raised inside them, or hung.
    ``on_first`` is printed at the first press. Off the main thread (no signals) the list
    stays empty."""
    presses: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield presses
        return

    def on_sigint(signum, frame) -> None:
        if on_first is not None and not presses:
            print(on_first, file=sys.stderr, flush=True)
        presses.append(signum)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield presses
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def ctrl_c_deferred(on_first: str = "stopping once Ray has started ..."):
    """A Ctrl-C pressed during the block (Ray's start-up, or the connection to a cluster) is
    raised as KeyboardInterrupt once the block is done, not inside it: raised within
    ``ray.init`` it was lost or left the process hanging (a press 4 s into Ray's start ran the
    whole sweep, exit 0)."""
    with ctrl_c_counted(on_first) as presses:
        yield
    if presses:
        raise KeyboardInterrupt

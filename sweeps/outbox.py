"""An ordered buffer of MLflow writes that survives a tracking server going away for a while.

When the store is unreachable, writes wait in order and are retried on later calls and, with a
bounded wait, at the end of a sweep, so a short outage loses nothing and does not stop trials.
"""

from __future__ import annotations

import collections
import sys
import time
from collections.abc import Callable
from typing import Any


def is_permanent(err: Exception) -> bool:
    """A write the store refused (HTTP 4xx: a bad request) rather than one that did not arrive;
    retrying it would only block the writes behind it."""
    from mlflow.exceptions import RestException

    if not isinstance(err, RestException):
        return False
    code = err.get_http_status_code()
    return 400 <= code < 500 and code not in (408, 429)


class Outbox:
    """MLflow writes in order; a write that fails for want of a store waits, with those after it.

    ``send`` runs the waiting writes and then the new one, stopping at the first failure; the
    next attempt waits ``backoff_s`` so that a dead server costs one refused connection per
    second, not one per result.
    """

    def __init__(self, backoff_s: float = 1.0) -> None:
        self.pending: collections.deque[tuple[str, Callable[[], Any]]] = collections.deque()
        self.backoff_s = backoff_s
        self.retry_at = 0.0
        self.failures = 0  # writes that failed at least once (outage figure)
        self.dropped: list[str] = []
        self.last_error = ""
        self.seconds = 0.0  # spent in writes (the driver's cost of tracking)
        self.calls = 0

    def send(self, what: str, write: Callable[[], Any]) -> None:
        self.pending.append((what, write))
        self.flush()

    def flush(self) -> bool:
        """Try the waiting writes in order; True when none is left."""
        if self.pending and time.monotonic() < self.retry_at:
            return False
        while self.pending:
            what, write = self.pending[0]
            start = time.perf_counter()
            try:
                write()
            except Exception as err:  # any failure of the store waits
                if is_permanent(err):
                    self.dropped.append(what)
                    self.pending.popleft()
                    print(f"warning: mlflow refused {what}: {one_line(err)}", file=sys.stderr)
                    continue
                if not self.last_error:
                    print(
                        f"warning: mlflow unreachable, buffering writes: {one_line(err)}",
                        file=sys.stderr,
                    )
                self.last_error = one_line(err)
                self.failures += 1
                self.retry_at = time.monotonic() + self.backoff_s
                return False
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1
            self.pending.popleft()
        if self.last_error:
            print("mlflow reachable again: buffered writes delivered", file=sys.stderr)
            self.last_error = ""
        return True

    def drain(self, timeout_s: float) -> bool:
        """Retry until everything is written or ``timeout_s`` has passed."""
        deadline = time.monotonic() + timeout_s
        while not self.flush():
            if time.monotonic() > deadline:
                return False
            time.sleep(max(0.0, min(self.retry_at - time.monotonic(), 1.0)) or 0.1)
        return True


def one_line(err: Exception) -> str:
    text = " ".join(str(getattr(err, "message", None) or err).split())
    return text if len(text) < 300 else text[:297] + "..."

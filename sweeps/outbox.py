"""An ordered buffer of MLflow writes that survives a tracking server going away for a while.

When the store is unreachable, writes wait in order and are retried on later calls and, with a
bounded wait, at the end of a sweep, so a short outage loses nothing and does not stop trials.
A write is a record (a JSON-able dict) that ``apply`` carries out. Records that wait are also
appended to a journal file (one JSON line each), so that a driver killed during an outage loses
nothing either: ``--resume`` reads them back (``read_journal``) and delivers them, in order,
skipping what MLflow already holds. The journal is emptied whenever nothing is waiting.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Record = dict[str, Any]


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
    second, not one per result. ``journal``: the file where waiting records are kept.
    """

    def __init__(
        self,
        apply: Callable[[Record], Any],
        journal: Path | None = None,
        backoff_s: float = 1.0,
    ) -> None:
        self.apply = apply
        self.journal = journal
        # [record, whether it is in the journal]
        self.pending: collections.deque[list] = collections.deque()
        self.backoff_s = backoff_s
        self.retry_at = 0.0
        self.failures = 0  # writes that failed at least once (outage figure)
        self.dropped: list[str] = []
        self.last_error = ""
        self.seconds = 0.0  # spent in writes (the driver's cost of tracking)
        self.calls = 0

    def send(self, record: Record, journaled: bool = False) -> None:
        """Deliver ``record`` (its ``what`` names it in messages) after those waiting.
        ``journaled``: it is in the journal already (a replayed record)."""
        self.pending.append([record, journaled])
        self.flush()

    def flush(self) -> bool:
        """Try the waiting writes in order; True when none is left."""
        if self.pending and time.monotonic() < self.retry_at:
            self._persist()
            return False
        while self.pending:
            record = self.pending[0][0]
            what = record.get("what", record.get("op", "a write"))
            start = time.perf_counter()
            try:
                self.apply(record)
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
                self._persist()
                return False
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1
            self.pending.popleft()
        if self.journal is not None and self.journal.exists():
            os.truncate(self.journal, 0)  # everything in it is delivered
        if self.last_error:
            print("mlflow reachable again: buffered writes delivered", file=sys.stderr)
            self.last_error = ""
        return True

    def _persist(self) -> None:
        """Append the waiting records not yet in the journal (flushed to the disk: the driver
        may be killed next)."""
        new = [entry for entry in self.pending if not entry[1]]
        if self.journal is None or not new:
            return
        with self.journal.open("a", encoding="utf-8") as out:
            for entry in new:
                out.write(json.dumps(entry[0], default=plain_number) + "\n")
                entry[1] = True
            out.flush()
            os.fsync(out.fileno())

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


def read_journal(path: Path) -> list[Record]:
    """The records a killed driver left waiting, in order (a line cut short, the one being
    written as the driver died, ends the list)."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            break
    return records


def plain_number(value: Any) -> Any:
    """numpy scalars (Tune's sampled values) as Python numbers, for JSON."""
    return value.item() if hasattr(value, "item") else str(value)

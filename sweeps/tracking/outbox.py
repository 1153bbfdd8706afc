"""An ordered buffer of MLflow writes that survives a tracking server going away for a while.

When the store is unreachable, writes wait in order and are retried on later calls and, with a
bounded wait, at the end of a sweep, so a short outage loses nothing and does not stop trials.
A write is a record (a JSON-able dict) that ``apply`` carries out. Records that wait are also
appended to a journal file (one JSON line each), so that a driver killed during an outage loses
nothing either: ``--resume`` reads them back (``read_journal``) and delivers them, in order,
skipping what MLflow already holds.

Only an outage waits (``is_transient``). A write the store refused, or one that failed for any
other reason (a bug), is reported once and stays in the journal, where a resumed sweep tries it
again; the writes behind it go on. The journal keeps nothing else once nothing is waiting.
"""

from __future__ import annotations

import collections
import json
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from arith.cli import one_line
from sweeps.analysis.store import write_atomic

Record = dict[str, Any]


# SQLite's words for a write that lost the race for its lock (busy_timeout passed).
LOCKED_DATABASE = ("database is locked", "database table is locked")


def is_transient(err: BaseException) -> bool:
    """Whether a failed write may succeed if tried again: the store out of reach (a connection
    refused or reset, a timeout: OSErrors, as are requests' errors), a server error (HTTP 5xx, or
    408 and 429), or a SQLite database locked by another writer. Anything else (the store refused
    the write, HTTP 4xx, or a bug raised) would fail again and block every write behind it."""
    from mlflow.exceptions import MlflowException

    if isinstance(err, OSError):
        return True
    # SQLAlchemy wraps the driver's error in ``orig``; MLflow's store wraps that in turn as
    # TEMPORARILY_UNAVAILABLE (503), which the status check below takes.
    cause = getattr(err, "orig", err)
    if isinstance(cause, sqlite3.OperationalError):
        return any(words in str(cause) for words in LOCKED_DATABASE)
    if isinstance(err, MlflowException):
        code = err.get_http_status_code()
        return code >= 500 or code in (408, 429)
    return False


class Outbox:
    """MLflow writes in order; a write that fails for want of a store waits, with those after it.

    ``send`` runs the waiting writes and then the new one, stopping at the first write that
    failed transiently; the next attempt waits ``backoff_s`` so that a dead server costs one
    refused connection per second, not one per result. ``journal``: the file where waiting
    records, and refused ones, are kept.
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
        # Writes the store refused (or a bug stopped): kept in the journal, not retried here.
        self.refused: list[Record] = []
        # The journal may hold records that are neither waiting nor refused (delivered ones).
        self._journal_stale = False
        self.last_error = ""

    def send(self, record: Record, journaled: bool = False) -> None:
        """Deliver ``record`` (its ``what`` names it in messages) after those waiting.
        ``journaled``: it is in the journal already (a replayed record)."""
        self.enqueue(record, journaled)
        self.flush()

    def enqueue(self, record: Record, journaled: bool = False) -> None:
        """Put ``record`` behind those waiting; the next ``flush`` delivers it."""
        self.pending.append([record, journaled])

    def flush(self) -> bool:
        """Try the waiting writes in order; True when none is left."""
        if self.pending and time.monotonic() < self.retry_at:
            self._persist()
            return False
        while self.pending:
            record = self.pending[0][0]
            try:
                self.apply(record)
            except Exception as err:  # classified: an outage waits, anything else is reported
                if not is_transient(err):
                    self._refuse(err)
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
            self._delivered()
        if self.last_error:
            print("mlflow reachable again: buffered writes delivered", file=sys.stderr)
            self.last_error = ""
        return True

    def _delivered(self) -> None:
        journaled = self.pending.popleft()[1]
        self._journal_stale |= journaled
        if not self.pending:
            self.settle_journal()

    def _refuse(self, err: Exception) -> None:
        """Report the first waiting write, which failed for good, once; keep it in the journal."""
        record, journaled = self.pending.popleft()
        what = record.get("what", record.get("op", "a write"))
        kept = f"; kept in {self.journal}" if self.journal is not None else ""
        print(f"warning: mlflow refused {what}: {one_line(err)}{kept}", file=sys.stderr)
        self.refused.append(record)
        if not journaled:
            self._append([record])
        if not self.pending:
            self.settle_journal()

    def settle_journal(self, stale: bool = False) -> None:
        """When nothing waits, cut the journal down to the refused records (usually nothing).
        ``stale``: it holds records this outbox never saw delivered (a replay that skipped
        what MLflow held)."""
        if self.pending or self.journal is None or not self.journal.exists():
            return
        if not self.refused:
            os.truncate(self.journal, 0)
        elif stale or self._journal_stale:
            write_atomic(self.journal, "".join(_line(r) for r in self.refused))
        self._journal_stale = False

    def _persist(self) -> None:
        """Append the waiting records not yet in the journal (flushed to the disk: the driver
        may be killed next)."""
        new = [entry for entry in self.pending if not entry[1]]
        if self.journal is None or not new:
            return
        self._append([entry[0] for entry in new])
        for entry in new:
            entry[1] = True

    def _append(self, records: list[Record]) -> None:
        if self.journal is None:
            return
        with self.journal.open("a", encoding="utf-8") as out:
            out.writelines(_line(record) for record in records)
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


def _line(record: Record) -> str:
    return json.dumps(record, default=plain_number) + "\n"


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

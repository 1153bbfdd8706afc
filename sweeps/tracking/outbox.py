"""An ordered buffer of MLflow writes that survives a tracking server going away for a while.

A writer thread carries the writes out, so that a slow or silent store holds up no caller (Tune's
event loop). When the store is unreachable, writes wait in order and the thread retries them,
with a bounded wait at the end of a sweep, so a short outage loses nothing and does not stop
trials. A write is a record (a JSON-able dict) that ``apply`` carries out. Every record is
appended to a journal file (one JSON line each) before it is delivered, so that a driver killed
before the thread delivered it (during an outage, or while Tune had already saved the
checkpoint a result came with) loses nothing either: ``--resume`` reads them back
(``read_journal``) and delivers them, in order, skipping what MLflow already holds. The writer
thread appends them, each batch it finds waiting with one flush to the disk; ``persist`` does
it at once for a caller that must know them on the disk (Tune's snapshot of the experiment,
``sweeps.tracking.tracker``), and ``flush``, ``drain`` and ``close`` do it before they return.

Waiting writes that ``combine`` can merge (a trial's metrics at several steps) go out as one
request: when the store is slow the queue grows and its batches with it, so a slow server costs
about a request per trial and kind of write, not one per result. A record too big for one
request is cut by ``split`` as it is queued, so that each write the thread tries is one request:
MLflow's client would cut it itself, and a retry after its second request failed would send the
first one's metric points again.

Only an outage waits (``is_transient``). A write the store refused, or one that failed for any
other reason (a bug), is reported once and stays in the journal, where a resumed sweep tries it
again; the writes behind it go on. The journal keeps nothing else once nothing is waiting.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from arith.cli import one_line
from sweeps.analysis.store import write_atomic

Record = dict[str, Any]
COMBINE_MAX = 64
"""Waiting records offered to ``combine`` at once."""


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


class _Entry:
    """A queued record, and whether it is in the journal or delivered yet."""

    __slots__ = ("delivered", "journaled", "record")

    def __init__(self, record: Record, journaled: bool) -> None:
        self.record, self.journaled, self.delivered = record, journaled, False


class Outbox:
    """MLflow writes in order, carried out by a writer thread of their own; a write that fails
    for want of a store waits, with those after it.

    ``send`` only queues a record and wakes the thread, so that a slow or silent store, or the
    disk, never holds up its caller (Tune's event loop: a trial's end reads its metric history
    and uploads its model). The thread journals what it finds queued, then delivers the
    records in order, stopping at the first write that failed transiently; it tries again
    ``backoff_s`` later, so that a dead server costs one refused connection per second, not one
    per result. ``flush`` and ``drain`` wait for it. ``journal``: the file where waiting
    records, and refused ones, are kept (cut down each time nothing waits). ``split(record)``:
    the records, each one request, that a record too big for one becomes.
    """

    def __init__(
        self,
        apply: Callable[[Record], Any],
        journal: Path | None = None,
        backoff_s: float = 1.0,
        combine: Callable[[list[Record]], tuple[Record, int]] | None = None,
        split: Callable[[Record], list[Record]] | None = None,
    ) -> None:
        self.apply = apply
        # (one record for the first n waiting ones, n): writes that may go out as one request
        self.combine = combine
        self.split = split
        self._singly = 0  # records to try one at a time: a combined write failed for good
        self.journal = journal
        self.pending: collections.deque[_Entry] = collections.deque()  # the driver appends,
        # the thread pops; those not in the journal yet are in ``_unjournaled`` too, in order
        self._unjournaled: collections.deque[_Entry] = collections.deque()
        self.backoff_s = backoff_s
        self.retry_at = 0.0
        self.failures = 0  # writes that failed at least once (outage figure)
        # Writes the store refused (or a bug stopped): kept in the journal, not retried here.
        self.refused: list[Record] = []
        # The journal may hold more than the refused records, or miss one (a journal left by a
        # killed driver holds what it may have delivered).
        self._journal_extra = True
        self.last_error = ""
        # Guards the queue, ``refused`` and the thread's state below; re-entrant (a
        # Condition's lock is an RLock). Never held while the journal is flushed to the disk.
        self._cond = threading.Condition()
        # Held while the journal is written; taken before ``_cond``, never inside it.
        self._journal_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._blocked = False  # the last pass stopped at a transient failure
        self._passes = 0  # passes ended, for ``flush``

    def send(self, record: Record, journaled: bool = False) -> None:
        """Queue ``record`` (its ``what`` names it in messages) behind those waiting and wake
        the writer thread, which journals it before it delivers it; returns at once.
        ``journaled``: it is in the journal already (a replayed record)."""
        entries = self._entries([record], journaled)
        with self._cond:
            self._queue(entries)
            self._wake()

    def enqueue(self, records: list[Record], journaled: bool = False) -> None:
        """Put ``records`` behind those waiting, all at once; the next ``send``, ``flush`` or
        ``drain`` has them delivered."""
        entries = self._entries(records, journaled)
        with self._cond:
            self._queue(entries)

    def _entries(self, records: list[Record], journaled: bool) -> list[_Entry]:
        """``records`` as queue entries, each cut by ``split`` into requests (outside the lock:
        the writer thread may be taking the queue's head meanwhile)."""
        split = self.split if self.split is not None else lambda record: [record]
        return [_Entry(part, journaled) for record in records for part in split(record)]

    def _queue(self, entries: list[_Entry]) -> None:
        self.pending.extend(entries)
        if self.journal is not None:
            self._unjournaled.extend(entry for entry in entries if not entry.journaled)

    def persist(self) -> None:
        """Append to the journal, flushed to the disk, every record queued and not in it yet
        (nor delivered); returns once they are there. Waits at most for the writer thread's
        own append, never for the store."""
        if self.journal is None:
            return
        with self._journal_lock:
            with self._cond:
                batch = [entry for entry in self._unjournaled if not entry.delivered]
                self._unjournaled.clear()
            if not batch:
                return
            try:
                self._append([entry.record for entry in batch])
            except BaseException:  # still to be journaled, in their place
                with self._cond:
                    self._unjournaled.extendleft(reversed(batch))
                raise
            with self._cond:
                for entry in batch:
                    entry.journaled = True
                self._journal_extra = True

    def flush(self) -> bool:
        """Wait until the writer thread has tried the waiting writes; True when none is left,
        False when they wait for the store (they are in the journal then)."""
        try:
            with self._cond:
                self._wake()
                start = self._passes
                while self.pending and not self._closed:
                    if self._blocked and (time.monotonic() < self.retry_at or self._passes > start):
                        break
                    self._cond.wait(0.5)
                return not self.pending
        finally:  # a Ctrl-C in the wait, too: what is not delivered is kept
            self.persist()

    def drain(self, timeout_s: float) -> bool:
        """Wait until everything is written or ``timeout_s`` has passed (the writer thread
        retries meanwhile); what is left then is in the journal."""
        deadline = time.monotonic() + timeout_s
        try:
            with self._cond:
                self._wake()
                while self.pending and not self._closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(min(left, 1.0))
                return not self.pending
        finally:  # a timeout, or a Ctrl-C in the wait: what is not delivered is kept
            self.persist()

    def close(self, wait_s: float = 1.0) -> None:
        """Stop the writer thread (waiting ``wait_s`` at most for a write under way): what is
        not delivered stays in the journal for ``--resume``."""
        self.persist()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(wait_s)

    # ---- the writer thread ----
    def _wake(self) -> None:
        """Start the writer thread (once) and have it look at the queue."""
        if self.pending and self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._run, name="mlflow-outbox", daemon=True)
            self._thread.start()
        self._cond.notify_all()

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._closed and not self._unjournaled and not self._due():
                        wait = self.retry_at - time.monotonic() if self.pending else None
                        self._cond.wait(wait)
                    if self._closed:
                        return
                # What queued since the last pass, journaled in one append (in an outage too,
                # where nothing is delivered for a while).
                self.persist()
                if self._due():
                    self._deliver()
        except Exception as err:  # the journal unwritable, say: no waiter may hang on this thread
            print(f"error: mlflow writer stopped: {one_line(err)}", file=sys.stderr)
            with self._cond:
                self._closed = True
                self._cond.notify_all()

    def _due(self) -> bool:
        """Whether writes wait and the store may be tried for them now."""
        with self._cond:
            return bool(self.pending) and not (self._blocked and time.monotonic() < self.retry_at)

    def _deliver(self) -> None:
        """One pass: the waiting writes in order, until none is left or one failed
        transiently. ``apply`` runs outside the lock, so that ``send`` never waits for it."""
        while True:
            with self._cond:
                if not self.pending or self._closed:
                    break
                head = [self.pending[0].record]
                if self.combine is not None and not self._singly:
                    head += [e.record for e in itertools.islice(self.pending, 1, COMBINE_MAX)]
            record, count = self.combine(head) if len(head) > 1 else (head[0], 1)
            try:
                self.apply(record)
            except Exception as err:  # classified: an outage waits, anything else is reported
                with self._cond:
                    if not is_transient(err):
                        if count > 1:  # find the one the store refused: these, one at a time
                            self._singly = count
                        else:
                            self._refuse(err)
                            self._singly = max(0, self._singly - 1)
                        continue
                    self._wait_for_store(err)
                    return
            with self._cond:
                for _ in range(count):
                    self.pending.popleft().delivered = True
                self._singly = max(0, self._singly - count)
        self.settle_journal()
        with self._cond:
            if self.last_error and not self.pending:
                print("mlflow reachable again: buffered writes delivered", file=sys.stderr)
                self.last_error = ""
            self._blocked = False
            self._end_pass()

    def _wait_for_store(self, err: Exception) -> None:
        if not self.last_error:
            print(
                f"warning: mlflow unreachable, buffering writes: {one_line(err)}", file=sys.stderr
            )
        self.last_error = one_line(err)
        self.failures += 1
        self.retry_at = time.monotonic() + self.backoff_s
        self._blocked = True
        self._end_pass()

    def _end_pass(self) -> None:
        self._passes += 1
        self._cond.notify_all()

    def _refuse(self, err: Exception) -> None:
        """Report the first waiting write, which failed for good, once; it stays in the journal
        (or goes there with the next ``persist``: it is not delivered)."""
        record = self.pending.popleft().record
        what = record.get("what", record.get("op", "a write"))
        kept = f"; kept in {self.journal}" if self.journal is not None else ""
        print(f"warning: mlflow refused {what}: {one_line(err)}{kept}", file=sys.stderr)
        self.refused.append(record)
        self._journal_extra = True

    def settle_journal(self) -> None:
        """When nothing waits, cut the journal down to the refused records (usually nothing):
        what else it holds was delivered, by this outbox or before (a replay skips what MLflow
        holds)."""
        with self._journal_lock, self._cond:
            if self.pending or self.journal is None:
                return
            self._unjournaled.clear()  # delivered, or refused and written below
            if not self.refused:
                if self.journal.exists():
                    os.truncate(self.journal, 0)
            elif self._journal_extra:
                write_atomic(self.journal, "".join(_line(r) for r in self.refused))
            self._journal_extra = False

    def _append(self, records: list[Record]) -> None:
        with self.journal.open("a", encoding="utf-8") as out:
            out.writelines(_line(record) for record in records)
            out.flush()
            os.fsync(out.fileno())


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

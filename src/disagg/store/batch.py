"""Group commit: rows that many threads insert, written by one thread, one transaction per batch.

A submission waits until its row is committed (so an answer of 201 still means the job is stored),
but the submissions that arrive while one transaction commits share the next one: one `BEGIN …
COMMIT` (and one round trip to PostgreSQL, one turn of SQLite's write lock) for a batch instead of
one per request. A batch that breaks a constraint (a concurrent idempotency key) is written again
row by row, so each row gets its own answer: stored, or the error that refused it. Rows inserted
together (`insert_all`: a batch submission) stay in one transaction: all are stored, or none.

`GroupCalls` does the same for short write transactions of many threads (the slice workers' step
records): each thread's statements, in one transaction with the others queued beside them.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from disagg.store.base import DuplicateKey, StoreBase

log = logging.getLogger(__name__)

_Item = tuple[list[dict[str, Any]], Future[None]]
_Call = tuple[Callable[[Connection], Any], Future[Any]]
T = TypeVar("T")
Q = TypeVar("Q")


#: Writes one batch of rows inside the transaction it is given.
BatchWriter = Callable[[Connection, list[dict[str, Any]]], None]


class _GroupWriter(Generic[Q]):
    """The writer thread and its queue: items put from any thread, taken in batches of up to `max_batch`
    (as `_size` counts them) by one thread, which writes each batch (`_write`). The thread starts on the
    first item, in the process that puts it: a process forked from one whose writer ran has no thread
    of it, and starts its own."""

    def __init__(self, store: StoreBase, max_batch: int, name: str) -> None:
        self.store = store
        self.max_batch = max_batch
        self._name = name
        self._queue: queue.SimpleQueue[Q | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._start = threading.Lock()
        self._closed = False

    def _put(self, item: Q) -> bool:
        """Queue the item; False (nothing queued) once the writer is closed. (Under the lock that `close`
        takes: no item is queued behind the writer's last, which nobody would write.)"""
        with self._start:
            if self._closed:
                return False
            if self._thread is None or self._pid != os.getpid():
                self._queue = queue.SimpleQueue()  # (a forked child's copy may hold its parent's items)
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._queue.put(item)
        return True

    def close(self) -> None:
        """Write what is queued, then stop the writer thread."""
        with self._start:
            self._closed = True
            thread = self._thread if self._pid == os.getpid() else None
            if thread is not None:
                self._queue.put(None)
        if thread is not None and thread is not threading.current_thread():  # (closed from a call it runs)
            thread.join(timeout=30)

    def _size(self, item: Q) -> int:
        return 1

    def _write(self, batch: list[Q]) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stop = False
            size = self._size(first)
            while size < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
                size += self._size(item)
            self._write(batch)
            if stop:
                return


class GroupInsert(_GroupWriter[_Item]):
    """Insert rows from any thread; `insert(values)` returns a Future set once committed.

    `write` puts one batch into the transaction it is handed (the jobs and their first events, say).
    """

    def __init__(self, store: StoreBase, write: BatchWriter, max_batch: int = 256) -> None:
        super().__init__(store, max_batch, "group-insert")
        self.write = write

    def insert(self, values: dict[str, Any]) -> Future[None]:
        """Queue one row; the Future completes after the transaction that holds it commits."""
        return self.insert_all([values])

    def insert_all(self, rows: list[dict[str, Any]]) -> Future[None]:
        """Queue rows that are stored together or not at all (one transaction); the Future completes once
        it commits, or holds the error that refused them all."""
        done: Future[None] = Future()
        if not self._put((rows, done)):
            done.set_exception(RuntimeError("the store's writer is closed"))
        return done

    def _size(self, item: _Item) -> int:
        return len(item[0])

    def _write(self, batch: list[_Item]) -> None:
        try:
            with self.store.write_core(urgent=True) as conn:
                self.write(conn, [values for rows, _ in batch for values in rows])
        except IntegrityError as exc:
            if len(batch) > 1:  # find the rows at fault: each gets its own transaction and answer
                for item in batch:
                    self._write([item])
                return
            batch[0][1].set_exception(DuplicateKey(str(exc.orig)))
            return
        except Exception as exc:  # the store is down: every waiting submission hears it
            log.warning("group insert of %d rows failed: %s", len(batch), exc)
            for _, done in batch:
                done.set_exception(exc)
            return
        for _, done in batch:
            done.set_result(None)


class _MemberFailed(Exception):
    """A call of a group transaction raised: the transaction is rolled back and each call runs alone."""


class GroupCalls(_GroupWriter[_Call]):
    """Run short write transactions of many threads as one (`call(fn)`: fn's statements, on the
    connection it is handed, share a transaction with the calls queued beside it; `call` returns what fn
    returns once that transaction has committed, or raises what fn raised).

    For the slice workers' step records (`store/slices.py`): sixteen workers each wrote a dozen
    transactions of a few statements per job, every one of them a turn of SQLite's single writer (its
    BEGIN, the leader's fence check, its COMMIT) behind the others; the turns, not the statements, were
    most of the writer's time. A call must only touch the database through the connection, and may be
    run twice: when one call of a group raises, the group's transaction is rolled back and each call
    runs again in a transaction of its own, so that one call's failure (a step whose slice was
    cancelled) is its own. A failure of the transaction itself (the store down, a stale leader fenced
    off) is every call's."""

    def __init__(self, store: StoreBase, max_batch: int = 64) -> None:
        super().__init__(store, max_batch, "group-calls")

    def call(self, fn: Callable[[Connection], T]) -> T:
        done: Future[T] = Future()
        if self._put((fn, done)):
            return done.result()
        with self.store.write_core() as conn:  # closed (the store is closing): a transaction of its own
            return fn(conn)

    def _write(self, batch: list[_Call]) -> None:
        if len(batch) == 1:
            self._alone(batch[0])
            return
        results: list[Any] = []
        try:
            with self.store.write_core() as conn:
                for fn, _ in batch:
                    try:
                        results.append(fn(conn))
                    except Exception as exc:
                        raise _MemberFailed from exc
        except _MemberFailed:
            for item in batch:
                self._alone(item)
            return
        except BaseException as exc:  # each caller hears what ended its transaction
            for _, done in batch:
                done.set_exception(exc)
            return
        for (_, done), result in zip(batch, results, strict=True):
            done.set_result(result)

    def _alone(self, item: _Call) -> None:
        fn, done = item
        try:
            with self.store.write_core() as conn:
                result = fn(conn)
        except BaseException as exc:  # the caller re-raises it
            done.set_exception(exc)
            return
        done.set_result(result)

"""Group commit: rows that many threads insert, written by one thread, one transaction per batch.

A submission waits until its row is committed (so an answer of 201 still means the job is stored),
but the submissions that arrive while one transaction commits share the next one: one `BEGIN …
COMMIT` (and one round trip to PostgreSQL, one turn of SQLite's write lock) for a batch instead of
one per request. A batch that breaks a constraint (a concurrent idempotency key) is written again
row by row, so each row gets its own answer: stored, or the error that refused it. Rows inserted
together (`insert_all`: a batch submission) stay in one transaction: all are stored, or none.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from disagg.store.base import DuplicateKey, StoreBase

log = logging.getLogger(__name__)

_Item = tuple[list[dict[str, Any]], Future[None]]


#: Writes one batch of rows inside the transaction it is given.
BatchWriter = Callable[[Connection, list[dict[str, Any]]], None]


class GroupInsert:
    """Insert rows from any thread; `insert(values)` returns a Future set once committed.

    `write` puts one batch into the transaction it is handed (the jobs and their first events, say).
    """

    def __init__(self, store: StoreBase, write: BatchWriter, max_batch: int = 256) -> None:
        self.store = store
        self.write = write
        self.max_batch = max_batch
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        self._closed = False

    def insert(self, values: dict[str, Any]) -> Future[None]:
        """Queue one row; the Future completes after the transaction that holds it commits."""
        return self.insert_all([values])

    def insert_all(self, rows: list[dict[str, Any]]) -> Future[None]:
        """Queue rows that are stored together or not at all (one transaction); the Future completes once
        it commits, or holds the error that refused them all."""
        done: Future[None] = Future()
        if self._closed:
            done.set_exception(RuntimeError("the store's writer is closed"))
            return done
        if self._thread is None:
            with self._start:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="group-insert", daemon=True)
                    self._thread.start()
        self._queue.put((rows, done))
        return done

    def close(self) -> None:
        """Write what is queued, then stop the writer thread."""
        self._closed = True
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stop = False
            size = len(first[0])
            while size < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
                size += len(item[0])
            self._write(batch)
            if stop:
                return

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


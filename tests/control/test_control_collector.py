"""The controller and Python's cyclic garbage collector: its heap (the inventory, every live slice's
placement) lives as long as it does, so a round and the opening run with the collector paused
(docs/controller.md, "The garbage collector")."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

from control_helpers import job, make_service, submit
from sqlalchemy import event
from sqlalchemy.engine import Engine

from disagg.model.states import JobState
from disagg.placement import base


def test_a_round_reads_plans_and_commits_with_the_cyclic_collector_paused(tmp_path: Path) -> None:
    """The whole round runs with the collector off (its reads and its commit, not only the policy), and it
    is on again after; what the round kept is moved to the oldest generation, not collected (a full
    collection of the loop's heap cost a fifth of a round under load)."""
    svc = make_service(tmp_path)  # no loop: the test runs the round
    try:
        ids = [submit(svc, "alice", gpu=k % 2) for k in range(5)]
        on_during: list[bool] = []
        me = threading.get_ident()

        def listen(*_: object) -> None:
            if threading.get_ident() == me:
                on_during.append(gc.isenabled())

        engines = {svc.store.engine, svc.store.read_engine}
        for engine in engines:
            event.listen(engine, "before_cursor_execute", listen)
        base._moved_old[0] = 0
        collections = [g["collections"] for g in gc.get_stats()]
        try:
            decisions = svc.controller.schedule()
        finally:
            for engine in engines:
                event.remove(engine, "before_cursor_execute", listen)
        assert decisions is not None and sorted(p.job for p in decisions.placed) == sorted(ids)
        assert len(on_during) > 5 and not any(on_during), on_during  # the queue read, the snapshot, the commit
        assert gc.isenabled()
        assert [g["collections"] for g in gc.get_stats()][1:] == collections[1:]  # no middle or full collection
        assert {job(svc, i)["state"] for i in ids} == {JobState.COMPOSING}
    finally:
        svc.close()



def test_opening_the_service_pauses_the_collector_but_while_waiting_for_the_lease(tmp_path: Path) -> None:
    """Every statement of `open_service` on this thread (the migration, the inventory's sync, the
    reconciliation) runs with the collector off, but the lease's, which a standby may wait on for long;
    the collector is on again after."""
    seen: list[tuple[str, bool]] = []
    me = threading.get_ident()

    def listen(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if threading.get_ident() == me:
            seen.append((statement, gc.isenabled()))

    event.listen(Engine, "before_cursor_execute", listen)
    try:
        svc = make_service(tmp_path)
    finally:
        event.remove(Engine, "before_cursor_execute", listen)
    try:
        assert gc.isenabled()
        opening = [q for q, on in seen if not _leads(q)]
        assert any("INSERT INTO devices" in q for q in opening), "the inventory's sync was seen"
        assert [q for q, on in seen if on and not _leads(q)] == []
        assert any(on for q, on in seen if _leads(q)), "the lease is taken with the collector on"
    finally:
        svc.close()


def _leads(statement: str) -> bool:
    """A statement of taking the lease (`control.leadership`): its row, and the replicas' table."""
    return any(f" {table}" in statement for table in ("controller_lease", "replicas"))

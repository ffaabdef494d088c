"""The store, the same tests on SQLite and on a real PostgreSQL: migrations, tokens, inventory,
snapshots, idempotency keys, all-or-nothing transactions."""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, select
from sqlalchemy.exc import IntegrityError

from disagg.control.service import DEFAULT_CLUSTER
from disagg.model import Allocation, Cluster, Machine, SlicePlacement, SpecError, load_cluster
from disagg.model.states import LIVE_SLICE_STATES
from disagg.placement.commit import EPS
from disagg.placement.decisions import Decisions
from disagg.store import Store
from disagg.store.models import Base, DeviceRow, JobRow, LinkRow, SliceRow, device_state
from disagg.store.plans import CommitRoom, _ledger
from disagg.store.snapshot import PlacementCache, holder, live_slices_held, read_cluster


def _job(id_: str, tenant: str = "a", key: str | None = None) -> JobRow:
    return JobRow(id=id_, seq=1, tenant=tenant, name="n", image="i", command=["true"], tasks={"count": 1},
                  slo_s=None, importance=1.0, max_retries=2, state="queued", reason=None, reason_code=None,
                  wait_rounds=0, attempts=0, exit_code=None, slice_id=None, submitted_at=0.0, updated_at=0.0,
                  idempotency_key=key, request_hash=None)


def test_migrations_create_every_table_and_are_idempotent(db_url: str) -> None:
    store = Store(db_url)
    store.migrate()
    store.migrate()  # a second start changes nothing
    tables = set(inspect(store.engine).get_table_names())
    assert {"tokens", "jobs", "slices", "slice_steps", "machines", "devices", "links",
            "alembic_version"} <= tables
    with store.engine.connect() as conn:  # the migrations make what the models declare, indexes included
        differences = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert differences == []
    store.close()


def test_a_migration_that_pauses_longer_than_the_idle_timeout_still_completes(db_url: str,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A CI run on a busy host: Alembic's pause between two statements passed PostgreSQL's idle-in-transaction
    timeout (`IDLE_IN_TRANSACTION_S`, meant for a paused leader's row locks) and the server ended the
    migration. Here each revision's step waits longer than that timeout before it runs."""
    import time

    from alembic.operations import ops

    from disagg.store.base import IDLE_IN_TRANSACTION_S

    original = ops.CreateTableOp.create_table
    paused: list[str] = []

    def slow_create(cls: type, table_name: str, *args: object, **kw: object) -> object:
        if not paused:
            time.sleep(IDLE_IN_TRANSACTION_S + 1.0)
        paused.append(table_name)
        return original(table_name, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(ops.CreateTableOp, "create_table", classmethod(slow_create))
    store = Store(db_url)
    try:
        store.migrate()
        assert paused, "the migration went through the pause"
        assert {"jobs", "tokens", "slices"} <= set(inspect(store.engine).get_table_names())
    finally:
        store.close()


def test_tokens_name_their_tenant_and_are_stored_hashed(db_url: str) -> None:
    store = Store(db_url)
    store.migrate()
    assert not store.has_admin()
    t_admin = store.create_token("ops", admin=True)
    t_alice = store.create_token("alice")
    assert store.has_admin()
    who = store.principal(t_alice)
    assert who is not None and who.tenant == "alice" and not who.admin
    adm = store.principal(t_admin)
    assert adm is not None and adm.admin
    assert store.principal(t_alice + "x") is None
    with store.read() as s:
        from disagg.store.models import TokenRow

        hashes = [r.token_hash for r in s.scalars(select(TokenRow))]
    assert t_alice not in hashes and len(hashes) == 2
    store.close()


def test_inventory_round_trips_into_a_snapshot_with_health_and_allocations(db_url: str) -> None:
    store = Store(db_url)
    store.migrate()
    cluster = load_cluster(DEFAULT_CLUSTER)
    store.sync_inventory(cluster)
    store.sync_inventory(cluster)  # twice: nothing duplicated
    snap = store.cluster()
    assert [m.name for m in snap.machines] == [m.name for m in cluster.machines]
    assert [d.id for d in snap.devices] == [d.id for d in cluster.devices]
    assert snap.rack_uplink_gbps == cluster.rack_uplink_gbps
    with store.write() as s:
        s.add(_job("j-1"))
        s.flush()
        s.add(SliceRow(id="s-1", job_id="j-1", attempt=1, state="running", outcome=None, detail=None,
                       placement={"machines": [], "tasks": [{"task": "j-1/0", "machine": "node1", "cpus": 3,
                                                             "memory_gb": 7, "devices": [
                                                                 {"id": "iobox0/gpu0", "network_gbps": 2.0}]}]},
                       handle=None, created_at=0.0, updated_at=0.0))
        dev = s.get(DeviceRow, "iobox0/gpu1")
        assert dev is not None
        dev.health = "failed"
    snap = store.cluster()
    (alloc,) = snap.allocations
    assert (alloc.machine, alloc.cpus, alloc.memory_gb, alloc.devices) == ("node1", 3, 7, ("iobox0/gpu0",))
    assert snap.device_by_id["iobox0/gpu1"].health == "failed"
    assert snap.device_by_id["iobox0/gpu2"].health == "healthy"
    store.close()


def _same_snapshot(store: Store) -> None:
    """The cached snapshot (the inventory and the parsed placements kept between reads) is the one a
    read from nothing gives."""
    cached = store.cluster()
    live = select(SliceRow.id, SliceRow.job_id, SliceRow.placement).where(SliceRow.state.in_(LIVE_SLICE_STATES))
    with store.read_core() as conn:
        fresh = read_cluster(conn, fresh=True)
        parsed = [a for i, j, p in conn.execute(live) for a in SlicePlacement.from_json(i, p).allocations(holder(i, j))]
    for field in ("machines", "pools", "devices", "down_links", "rack_uplink_gbps"):
        assert getattr(cached, field) == getattr(fresh, field), field
    # Nothing changed since: the same devices tuple, so a round keeps what it read off the inventory.
    assert store.cluster().devices is cached.devices
    assert sorted(cached.allocations, key=repr) == sorted(parsed, key=repr)
    with store.write_core() as conn:  # as a commit's ledger reads them: by the changes since its last read
        live, held = live_slices_held(conn, changes=True)  # and what they hold, kept change by change
        ledger = [a for i, h, p in live for a in p.allocations(h)]
        room = _ledger(conn, Decisions(policy="none"))  # the commit's room, kept so
    assert sorted(ledger, key=repr) == sorted(parsed, key=repr) == sorted(held, key=repr)
    _same_room(room, fresh, parsed, [SlicePlacement.from_json(i, p) for i, _, p in _live_rows(store)])


def _live_rows(store: Store) -> list[tuple[str, str | None, dict[str, object]]]:
    live = select(SliceRow.id, SliceRow.job_id, SliceRow.placement).where(SliceRow.state.in_(LIVE_SLICE_STATES))
    with store.read_core() as conn:
        return [(str(i), j, p) for i, j, p in conn.execute(live)]


def _same_room(room: CommitRoom, fresh: Cluster, held: list[Allocation], placements: list[SlicePlacement]) -> None:
    """The commit's room (the live slices' use kept with the live set) is what summing the live slices afresh
    leaves, on every machine and link (to `EPS`: sums kept change by change may differ in the last bits)."""
    cpu = {m.name: m.cpus for m in fresh.machines}
    memory = {m.name: m.memory_gb for m in fresh.machines}
    for a in held:
        cpu[a.machine] -= a.cpus
        memory[a.machine] -= a.memory_gb
    links = {lk.id: lk.gbps for lk in fresh.links}
    for p in placements:
        for link, gbps in p.link_loads:
            if link in links:
                links[link] -= gbps
    for m in fresh.machines:
        left = room.cpus_left(m.name)
        assert left is not None and abs(left - cpu[m.name]) <= EPS, m.name
        assert abs(room.memory_left(m.name) - memory[m.name]) <= EPS, m.name
    for link, gbps in links.items():
        assert abs(room.link_left(link) - gbps) <= EPS, link
    assert room.cpus_left("no-such-machine") is None and room.link_left("no-such-link") == math.inf


def _placed(task: str, machine: str, device: str | None) -> dict[str, object]:
    devices = [{"id": device, "network_gbps": 1.0}] if device else []
    task_json = {"task": task, "machine": machine, "cpus": 1, "memory_gb": 2, "devices": devices}
    return {"machines": [], "tasks": [task_json]}


def test_the_kept_snapshot_follows_every_change_a_round_must_see(db_url: str, tmp_path: Path) -> None:
    """Random changes to what moves (health, drains, links, live slices, a composition's placement, new
    machines) between reads: the kept inventory and placements never show a stale snapshot."""
    import random

    store = Store(db_url)
    store.migrate()
    cluster = load_cluster(DEFAULT_CLUSTER)
    store.sync_inventory(cluster)
    rng = random.Random(7)
    devices = [d.id for d in cluster.devices]
    links = [lk.id for lk in cluster.links]
    machines = [m.name for m in cluster.machines]
    _same_snapshot(store)
    for step in range(60):
        with store.write() as s:
            what = rng.randrange(7)
            if what == 0:
                dev = s.get(DeviceRow, rng.choice(devices))
                assert dev is not None
                dev.health = rng.choice(["healthy", "failed"])
            elif what == 1:
                dev = s.get(DeviceRow, rng.choice(devices))
                assert dev is not None
                dev.drained = not dev.drained
            elif what == 2:
                link = s.get(LinkRow, rng.choice(links))
                assert link is not None
                link.up = not link.up
            elif what == 3:
                s.add(_job(f"j-{step}"))
                s.flush()
                s.add(SliceRow(id=f"s-{step}", job_id=f"j-{step}", attempt=1, state="running", outcome=None,
                               detail=None, placement=_placed(f"j-{step}/0", rng.choice(machines), rng.choice(devices)),
                               handle=None, created_at=0.0, updated_at=0.0))
            elif what == 4:
                running = select(SliceRow).where(SliceRow.state == "running", SliceRow.job_id.is_not(None))
                live = list(s.scalars(running))
                if live:
                    rng.choice(live).state = "done"
            elif what == 5:  # retention removes an ended slice: the next snapshot reads every live one
                ended = list(s.scalars(select(SliceRow).where(SliceRow.state == "done")))
                if ended:
                    s.delete(rng.choice(ended))
            else:  # a composition: no job, and an update rewrites its placement
                row = s.get(SliceRow, "s-composed")
                placement = _placed("composed/0", rng.choice(machines), rng.choice([*devices, None]))
                if row is None:
                    s.add(SliceRow(id="s-composed", job_id=None, tenant="a", name="c", attempt=1, state="running",
                                   outcome=None, detail=None, placement=placement, handle=None, created_at=0.0,
                                   updated_at=0.0))
                else:
                    row.placement = placement
        _same_snapshot(store)
    spec = tmp_path / "bigger.yaml"  # a machine added: the inventory is read again
    spec.write_text(DEFAULT_CLUSTER.read_text().replace(
        "pools:", "  - {name: node9, rack: r0, cpus: 10, memory_gb: 128, uplink_gbps: 40}\npools:"))
    bigger = load_cluster(spec)
    store.sync_inventory(bigger)
    assert "node9" in {m.name for m in store.cluster().machines}
    _same_snapshot(store)
    store.close()


def test_device_counts_by_state_match_each_devices_state(db_url: str) -> None:
    """Counted in SQL by (health, attached, drained); each combination must land where the one-word
    state of each device puts it (failed > attached > drained > free)."""
    store = Store(db_url)
    store.migrate()
    store.sync_inventory(load_cluster(DEFAULT_CLUSTER))
    store.ping()
    with store.write() as s:
        s.add(_job("j-1"))
        s.flush()
        s.add(SliceRow(id="s-1", job_id="j-1", attempt=1, state="running", outcome=None, detail=None,
                       placement={"machines": [], "tasks": []}, handle=None, created_at=0.0, updated_at=0.0))
        s.flush()
        marks = {"iobox0/gpu0": ("failed", True, True), "iobox0/gpu1": ("failed", False, False),
                 "iobox0/gpu2": ("healthy", True, True), "iobox0/gpu3": ("healthy", True, False),
                 "iobox0/gpu4": ("healthy", False, True)}
        for dev_id, (health, attached, drained) in marks.items():
            dev = s.get(DeviceRow, dev_id)
            assert dev is not None
            dev.health, dev.drained, dev.slice_id = health, drained, "s-1" if attached else None
    with store.read() as s:
        expected = Counter(device_state(d) for d in s.scalars(select(DeviceRow)))
    counts = store.counts()["devices"]
    assert counts == dict(expected)
    assert counts["failed"] == 2 and counts["attached"] == 2 and counts["drained"] == 1
    store.close()


def test_a_failed_transaction_writes_nothing(db_url: str) -> None:
    store = Store(db_url)
    store.migrate()
    with pytest.raises(RuntimeError, match="boom"), store.write() as s:
        s.add(_job("j-1"))
        s.flush()
        raise RuntimeError("boom")
    with store.read() as s:
        assert s.get(JobRow, "j-1") is None
    store.close()


def test_an_idempotency_key_is_unique_per_tenant(db_url: str) -> None:
    store = Store(db_url)
    store.migrate()
    with store.write() as s:
        s.add(_job("j-1", "a", "k1"))
        s.add(_job("j-2", "b", "k1"))  # another tenant may use the same key
    with pytest.raises(IntegrityError), store.write() as s:
        s.add(_job("j-3", "a", "k1"))
    with store.read() as s:
        assert {r.id for r in s.scalars(select(JobRow))} == {"j-1", "j-2"}
    store.close()


def _values(id_: str, key: str | None = None) -> dict[str, object]:
    row = _job(id_, key=key)
    return {c.key: getattr(row, c.key) for c in JobRow.__table__.columns}


def test_group_insert_commits_a_batch_and_answers_each_row_of_a_refused_one(db_url: str) -> None:
    from concurrent.futures import Future

    from disagg.store import DuplicateKey

    store = Store(db_url)
    store.migrate()
    writer = store.submissions()
    futures = [writer.insert(_values(f"j{i}")) for i in range(40)]
    for f in futures:
        assert f.result(timeout=30) is None
    # one batch in which one row breaks the (tenant, idempotency key) constraint: the others are stored
    writer.insert(_values("k0", key="dup")).result(timeout=30)
    batch: list[tuple[list[dict[str, object]], Future[None]]] = [
        ([_values("k1", key="other")], Future()),
        ([_values("k2", key="dup")], Future()),
        ([_values("k3")], Future()),
    ]
    writer._write(batch)
    assert batch[0][1].result() is None and batch[2][1].result() is None
    with pytest.raises(DuplicateKey):
        batch[1][1].result()
    writer.close()
    with pytest.raises(RuntimeError):
        writer.insert(_values("late")).result(timeout=5)
    with store.read() as s:
        ids = set(s.scalars(select(JobRow.id)))
    assert ids == {f"j{i}" for i in range(40)} | {"k0", "k1", "k3"}
    store.close()


def test_a_stores_writer_finds_the_inventory_its_reader_read(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first commit (on the writer's engine) read every machine and device again after the first
    snapshot (on the reader's) had: now one read serves both, until a row is added."""
    import disagg.store.snapshot as snapshot

    store = Store(db_url)
    store.migrate()
    cluster = load_cluster(DEFAULT_CLUSTER)
    store.sync_inventory(cluster)
    reads: list[tuple[int, ...]] = []
    real = snapshot.read_inventory
    monkeypatch.setattr(snapshot, "read_inventory", lambda conn, version: reads.append(version) or real(conn, version))
    try:
        store.cluster()
        with store.write_core(fenced=False) as conn:
            written = snapshot.current_inventory(conn)
        assert len(reads) == 1 and len(written.devices) == len(cluster.devices)
        with store.read_core() as conn:
            assert snapshot.current_inventory(conn) is written  # nothing added: the same one kept
        first = cluster.machines[0]
        extra = Machine("m-extra", first.rack, first.cpus, first.memory_gb, first.uplink_gbps)
        store.sync_inventory(dataclasses.replace(cluster, machines=(*cluster.machines, extra)))
        with store.write_core(fenced=False) as conn:
            grown = snapshot.current_inventory(conn)
        with store.read_core() as conn:
            assert snapshot.current_inventory(conn) is grown  # read once more, by either, for both
        assert len(reads) == 2 and "m-extra" in {m.name for m in grown.machines}
    finally:
        store.close()


def test_a_snapshot_reads_only_the_slices_changed_since_the_last(tmp_path: Path) -> None:
    """SQLite numbers each change to a slice (migration `i23_slice_changes`): a snapshot after the first
    reads the slices numbered since, not every live slice; after a deletion, every live slice again."""
    from sqlalchemy import event

    store = Store(f"sqlite:///{tmp_path / 'disagg.db'}")
    store.migrate()
    cluster = load_cluster(DEFAULT_CLUSTER)
    store.sync_inventory(cluster)
    machine, device = cluster.machines[0].name, cluster.devices[0].id
    statements: list[str] = []
    event.listen(store.read_engine, "before_cursor_execute", lambda *a: statements.append(str(a[2])))

    def slice_row(k: int, state: str = "running") -> SliceRow:
        return SliceRow(id=f"s-{k}", job_id=f"j-{k}", attempt=1, state=state, outcome=None, detail=None,
                        placement=_placed(f"j-{k}/0", machine, device if k == 0 else None), handle=None,
                        created_at=0.0, updated_at=0.0)

    def read_every() -> bool:
        """Whether a snapshot now reads every live slice (else only those changed since the last)."""
        statements.clear()
        store.cluster()
        return any("slices.state IN" in q and "slices.seq" not in q and "placement" not in q for q in statements)

    try:
        with store.write() as s:
            for k in range(3):
                s.add(_job(f"j-{k}"))
            s.flush()
            s.add_all([slice_row(0), slice_row(1)])
        assert read_every(), "the first snapshot reads every live slice"
        _same_snapshot(store)
        with store.write() as s:
            row = s.get(SliceRow, "s-0")
            assert row is not None
            row.state = "done"  # leaves the live set
            s.add(slice_row(2))  # joins it
        assert not read_every() and [q for q in statements if "slices.seq >" in q]
        _same_snapshot(store)
        assert {a.job for a in store.cluster().allocations} == {"j-1", "j-2"}
        with store.write() as s:
            gone = s.get(SliceRow, "s-0")
            assert gone is not None
            s.delete(gone)
        assert read_every()
        _same_snapshot(store)
    finally:
        store.close()


def test_a_commits_ledger_reads_only_the_slices_changed_since_the_last_commit(tmp_path: Path) -> None:
    """The commit re-checks each placement against the live slices read inside its own transaction; after
    the first commit it reads the slices numbered since the last one (another process's new slice, one
    that ended), and still refuses what they took and accepts what they freed."""
    from sqlalchemy import event

    from disagg.placement.decisions import Decisions, DeviceGrant, JobPlacement, TaskPlacement

    store = Store(f"sqlite:///{tmp_path / 'disagg.db'}")
    other = Store(f"sqlite:///{tmp_path / 'disagg.db'}")  # another process's store: its own engines and reads
    store.migrate()
    store.sync_inventory(load_cluster(DEFAULT_CLUSTER))
    statements: list[str] = []
    event.listen(store.engine, "before_cursor_execute", lambda *a: statements.append(str(a[2])))
    grant = DeviceGrant("iobox0/gpu0", "gpu", True, "iobox0", ("up:iobox0", "up:node0"), 1.0)

    def plan(job_id: str, cpus: float, gpu: bool = False) -> Decisions:
        task = TaskPlacement(f"{job_id}/0", "node0", cpus, 1.0, (grant,) if gpu else ())
        return Decisions("test", placed=(JobPlacement(job_id, (task,)),))

    def read_every() -> bool:
        return any("slices.state IN" in q and "slices.seq" not in q for q in statements)

    try:
        with store.write() as s:
            s.add_all([_job(f"j-{k}") for k in range(5)])
        assert [j for j, _ in store.commit_placements(plan("j-0", 4.0), ["j-0"]).placed] == ["j-0"]
        assert read_every(), "the first commit reads every live slice"
        statements.clear()
        assert [j for j, _ in other.commit_placements(plan("j-1", 1.0, gpu=True), ["j-1"]).placed] == ["j-1"]
        refused = store.commit_placements(plan("j-2", 1.0, gpu=True), ["j-2"])  # the other's slice holds the GPU
        assert not refused.placed and "iobox0/gpu0 is already held" in refused.conflicts[0][1]
        assert not read_every() and [q for q in statements if "slices.seq >" in q]
        # node0 has 10 cpus: 4 + 1 held, so 6 do not fit until the first slice ends
        assert not store.commit_placements(plan("j-3", 6.0), ["j-3"]).placed
        with other.write() as s:
            first = s.scalars(select(SliceRow).where(SliceRow.job_id == "j-0")).one()
            first.state = "done"
        statements.clear()
        assert [j for j, _ in store.commit_placements(plan("j-3", 6.0), ["j-3"]).placed] == ["j-3"]
        assert not read_every()
    finally:
        other.close()
        store.close()


def test_a_whole_read_of_the_live_slices_keeps_only_the_live_ones_placements(tmp_path: Path) -> None:
    """The read of every live slice (PostgreSQL's, and SQLite's without `changes`) drops the kept placements
    of slices that ended once they outgrow the live set: the cache is bounded by it."""
    store = Store(f"sqlite:///{tmp_path / 'disagg.db'}")
    store.migrate()
    cache = PlacementCache()

    def add(first: int, n: int) -> None:
        with store.write() as s:
            s.add_all([_job(f"j-{k}") for k in range(first, first + n)])
            s.flush()
            s.add_all([SliceRow(id=f"s-{k}", job_id=f"j-{k}", attempt=1, state="running", outcome=None, detail=None,
                                placement=_placed(f"j-{k}/0", "node0", None), handle=None, created_at=0.0,
                                updated_at=0.0) for k in range(first, first + n)])

    try:
        add(0, 1100)
        with store.read_core() as conn:
            assert len(cache.live(conn)) == 1100 and len(cache._placed) == 1100
        with store.write() as s:
            for row in s.scalars(select(SliceRow)):
                row.state = "done"
        add(1100, 1)
        with store.read_core() as conn:
            assert [i for i, _, _ in cache.live(conn)] == ["s-1100"]
        assert set(cache._placed) == {"s-1100"}
    finally:
        store.close()


def _edited(tmp_path: Path, name: str, text: str) -> Cluster:
    spec = tmp_path / name
    spec.write_text(text)
    return load_cluster(spec)


def test_the_inventory_follows_an_edited_cluster_spec_and_keeps_health_and_drains(db_url: str,
                                                                                  tmp_path: Path) -> None:
    """The operator retires node3, gives node0 twice the cpus, adds node9, takes two NVMe drives out and
    halves the rack's uplink, then restarts: the store had kept node3 (placed on) and node0's old size
    (only missing rows were added). Every change is taken; the devices that stay keep their health and
    drain flag; the kept snapshot (an earlier read cached it) is the one a fresh read gives."""
    store = Store(db_url)
    store.migrate()
    store.sync_inventory(load_cluster(DEFAULT_CLUSTER))
    with store.write() as s:
        failed, drained = s.get(DeviceRow, "iobox0/gpu1"), s.get(DeviceRow, "iobox1/nvme0")
        assert failed is not None and drained is not None
        failed.health, drained.drained = "failed", True
        s.add(_job("j-1"))
        s.flush()
        s.add(SliceRow(id="s-1", job_id="j-1", attempt=1, state="running", outcome=None, detail=None,
                       placement=_placed("j-1/0", "node0", "iobox0/gpu3"), handle=None, created_at=0.0,
                       updated_at=0.0))
    _same_snapshot(store)  # read and kept
    text = (DEFAULT_CLUSTER.read_text()
            .replace("{name: node0, rack: r0, cpus: 10,", "{name: node0, rack: r0, cpus: 20,")
            .replace("  - {name: node3, rack: r0, cpus: 10, memory_gb: 128, uplink_gbps: 40}\n",
                     "  - {name: node9, rack: r0, cpus: 8, memory_gb: 64, uplink_gbps: 25}\n")
            .replace("{model: SSD750, count: 4}", "{model: SSD750, count: 2}")
            .replace("network: {rack_uplink_gbps: 40}", "network: {rack_uplink_gbps: 20}")
            .replace("{name: iobox1, rack: r0, uplink_gbps: 40", "{name: iobox1, rack: r0, uplink_gbps: 25"))
    change = store.sync_inventory(_edited(tmp_path, "edited.yaml", text))
    assert change.machines == (["node9"], ["node0"], ["node3"]) and change.pools == ([], ["iobox1"], [])
    assert "1 pool changed (iobox1)" in change.summary()
    assert change.devices == ([], [], ["iobox1/nvme2", "iobox1/nvme3"])
    assert "1 machine removed (node3)" in change.summary() and "2 devices removed" in change.summary()
    cluster = store.cluster()
    assert [(m.name, m.cpus) for m in cluster.machines] == [("node0", 20), ("node1", 10), ("node2", 10), ("node9", 8)]
    assert {d.id for d in cluster.devices} == {d.id for d in load_cluster(DEFAULT_CLUSTER).devices} - {
        "iobox1/nvme2", "iobox1/nvme3"}
    states = {d.id: d.health for d in cluster.devices}
    assert states["iobox0/gpu1"] == "failed" and states["iobox1/nvme0"] == "drained"
    assert cluster.rack_uplink_gbps == 20
    assert [a.machine for a in cluster.allocations] == ["node0"]  # the live slice is untouched
    _same_snapshot(store)
    again = store.sync_inventory(_edited(tmp_path, "edited.yaml", text))
    assert again.summary() == "" and not again.rewrote  # the same spec again: nothing to do
    store.close()


def test_a_spec_that_takes_what_a_live_slice_holds_is_refused_and_changes_nothing(db_url: str,
                                                                                 tmp_path: Path) -> None:
    store = Store(db_url)
    store.migrate()
    store.sync_inventory(load_cluster(DEFAULT_CLUSTER))
    with store.write() as s:
        s.add(_job("j-1"))
        s.flush()
        s.add(SliceRow(id="s-1", job_id="j-1", attempt=1, state="running", outcome=None, detail=None,
                       placement=_placed("j-1/0", "node3", "iobox0/gpu3"), handle=None, created_at=0.0,
                       updated_at=0.0))
    before = store.cluster()
    base = DEFAULT_CLUSTER.read_text()
    takes = {
        "gpu3 gone": (base.replace("{model: P100, count: 4}", "{model: P100, count: 2}"),
                      "device iobox0/gpu3 is removed, but j-1 holds it"),
        "node3 gone": (base.replace("  - {name: node3, rack: r0, cpus: 10, memory_gb: 128, uplink_gbps: 40}\n", ""),
                       "machine node3 is removed, but j-1 runs on it"),
        "node3 too small": (base.replace("{name: node3, rack: r0, cpus: 10, memory_gb: 128",
                                         "{name: node3, rack: r0, cpus: 10, memory_gb: 1"),
                            "machine node3 would have 10 cpus and 1 GB, but j-1 holds 1 cpus and 2 GB on it"),
    }
    for name, (text, words) in takes.items():
        with pytest.raises(SpecError, match=re.escape(words)):
            store.sync_inventory(_edited(tmp_path, "taking.yaml", text + "\n"))
        after = store.cluster()
        for field in ("machines", "pools", "devices", "rack_uplink_gbps"):
            assert getattr(after, field) == getattr(before, field), (name, field)
    grown = base.replace("{name: node3, rack: r0, cpus: 10, memory_gb: 128", "{name: node3, rack: r0, cpus: 16, "
                         "memory_gb: 256")  # more than it holds: taken, the slice runs on
    assert store.sync_inventory(_edited(tmp_path, "grown.yaml", grown)).machines == ([], ["node3"], [])
    with store.write() as s:
        row = s.get(SliceRow, "s-1")
        assert row is not None
        row.state = "done"  # the job has ended: node3 and gpu3 may go
    gone = store.sync_inventory(_edited(tmp_path, "gone.yaml", takes["node3 gone"][0]))
    assert gone.machines[2] == ["node3"]
    store.close()


def test_a_device_that_is_another_one_under_its_id_takes_the_specs_health_not_the_old_ones(db_url: str,
                                                                                         tmp_path: Path) -> None:
    """Device ids are positions in a pool: taking two P100s out of `{P100: 4, P40: 1}` makes the P40
    `iobox0/gpu2`, whose row had been a drained P100. The P40 must not inherit that drain (nor a failure);
    the failed P40 at gpu4 is gone with its id; a device that stays what it was keeps its flags."""
    store = Store(db_url)
    store.migrate()
    store.sync_inventory(load_cluster(DEFAULT_CLUSTER))
    with store.write() as s:
        for dev, column, value in (("iobox0/gpu2", "drained", True), ("iobox0/gpu4", "health", "failed"),
                                   ("iobox0/gpu1", "health", "failed")):
            row = s.get(DeviceRow, dev)
            assert row is not None
            setattr(row, column, value)
    text = DEFAULT_CLUSTER.read_text().replace("{model: P100, count: 4}", "{model: P100, count: 2}")
    change = store.sync_inventory(_edited(tmp_path, "fewer.yaml", text))
    assert change.devices == ([], ["iobox0/gpu2"], ["iobox0/gpu3", "iobox0/gpu4"])
    assert change.replaced == ["iobox0/gpu2"] and "another device now" in change.summary()
    devices = {d.id: d for d in store.cluster().devices}
    assert (devices["iobox0/gpu2"].model, devices["iobox0/gpu2"].health) == ("P40", "healthy")
    assert devices["iobox0/gpu1"].health == "failed"  # the same P100 as before: its failure stays
    store.close()


def test_a_spec_that_changes_only_a_links_bandwidth_is_seen_by_a_kept_snapshot(db_url: str, tmp_path: Path) -> None:
    """The inventory's version counts rows and their last positions, and links have no position: a spec
    that only halves the rack's uplink renumbers the machines, or a reader that kept the inventory (this
    process's, a replica's) would go on placing by the old bandwidth."""
    store = Store(db_url)
    store.migrate()
    store.sync_inventory(load_cluster(DEFAULT_CLUSTER))
    assert store.cluster().rack_uplink_gbps == 40  # read and kept
    text = DEFAULT_CLUSTER.read_text().replace("network: {rack_uplink_gbps: 40}", "network: {rack_uplink_gbps: 20}")
    change = store.sync_inventory(_edited(tmp_path, "slower.yaml", text))
    assert change.links == ([], ["rack:r0"], []) and change.machines == ([], [], [])
    assert store.cluster().rack_uplink_gbps == 20
    _same_snapshot(store)
    store.close()

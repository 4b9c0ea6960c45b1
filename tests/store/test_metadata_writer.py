"""The metadata writer thread and the event loop's sync-deferring connection, on real files."""

from __future__ import annotations

import asyncio
import concurrent.futures
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar.core.positions import Position
from magnetar.server.ledger_ids import LedgerIds
from magnetar.server.metadata_writer import MetadataWriter
from magnetar.storage import AlreadyExists, CursorRecord, MetadataStore

TOPIC = "persistent://public/default/orders"
WAIT_S = 10


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "metadata.db"
    MetadataStore(path).close()
    return path


@pytest.fixture
def writer(db: Path) -> Iterator[MetadataWriter]:
    opened = MetadataWriter(db)
    yield opened
    opened.close()


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> list[MetadataStore]:
    """The WAL syncs made, by the connection that made them (the real fsync still runs)."""
    made: list[MetadataStore] = []
    real = MetadataStore.sync_log

    def counted(store: MetadataStore) -> None:
        made.append(store)
        real(store)
    monkeypatch.setattr(MetadataStore, "sync_log", counted)
    return made


def record(entry: int) -> CursorRecord:
    return CursorRecord(mark_delete=Position(1, entry))


def test_writes_apply_in_order_and_answer_with_their_results_or_errors(writer: MetadataWriter, db: Path) -> None:
    created = writer.submit(lambda store: store.create_tenant("acme", {}))
    again = writer.submit(lambda store: store.create_tenant("acme", {}))
    listed = writer.submit(lambda store: store.list_tenants())
    assert created.result(WAIT_S) is None
    with pytest.raises(AlreadyExists):
        again.result(WAIT_S)
    assert listed.result(WAIT_S) == ["acme"]
    with MetadataStore(db) as reader:
        assert reader.get_tenant("acme") == {}


def test_a_group_without_changes_is_not_synced_and_one_with_changes_is(writer: MetadataWriter,
                                                                       syncs: list[MetadataStore]) -> None:
    writer.put_cursors([]).result(WAIT_S)
    writer.submit(lambda store: store.list_tenants()).result(WAIT_S)
    assert syncs == []
    writer.put_cursors([(TOPIC, "sub", record(3))]).result(WAIT_S)
    assert len(syncs) == 1
    writer.barrier().result(WAIT_S)
    assert len(syncs) == 2


def test_writes_waiting_while_the_thread_is_busy_are_synced_as_one_group(writer: MetadataWriter,
                                                                         syncs: list[MetadataStore]) -> None:
    release = threading.Event()
    started = threading.Event()

    def busy(store: MetadataStore) -> None:
        started.set()
        release.wait(WAIT_S)
        store.put_cursor(TOPIC, "first", record(0))
    first = writer.submit(busy)
    assert started.wait(WAIT_S)
    waiting = [writer.put_cursors([(TOPIC, f"sub-{i}", record(i))]) for i in range(50)]
    release.set()
    concurrent.futures.wait([first, *waiting], timeout=WAIT_S)
    assert all(f.done() and f.exception() is None for f in [first, *waiting])
    assert len(syncs) == 2


def test_a_write_cancelled_before_it_started_is_not_applied(writer: MetadataWriter, db: Path) -> None:
    release = threading.Event()
    blocker = writer.submit(lambda store: release.wait(WAIT_S))
    cancelled = writer.submit(lambda store: store.create_tenant("never", {}))
    assert cancelled.cancel()
    release.set()
    blocker.result(WAIT_S)
    writer.barrier().result(WAIT_S)
    with MetadataStore(db) as reader:
        assert reader.get_tenant("never") is None


def test_submitting_after_close_is_refused(db: Path) -> None:
    writer = MetadataWriter(db)
    writer.close()
    with pytest.raises(RuntimeError, match="closed"):
        writer.barrier()


def test_a_deferring_connection_never_checkpoints_and_its_commits_are_seen_by_the_writer(
        writer: MetadataWriter, db: Path) -> None:
    loop_store = MetadataStore(db)
    try:
        loop_store.defer_syncs()
        assert loop_store._db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert loop_store._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        loop_store.create_tenant("acme", {"adminRoles": ["ops"]})
        assert writer.submit(lambda store: store.get_tenant("acme")).result(WAIT_S) == {"adminRoles": ["ops"]}
    finally:
        loop_store.close()


def test_ledger_ids_stay_unique_across_a_crash_of_a_deferring_connection(db: Path) -> None:
    """The reservation is synced before an id is handed out: a crash never hands one out twice."""
    script = (
        "import os, sys\n"
        "from magnetar.storage import MetadataStore\n"
        "store = MetadataStore(sys.argv[1], ledger_id_block=4)\n"
        "store.defer_syncs()\n"
        "print(','.join(str(store.next_ledger_id()) for _ in range(6)), flush=True)\n"
        "store.create_tenant('acme', {})\n"
        "os._exit(0)\n"
    )
    before = subprocess.run([sys.executable, "-c", script, str(db)], capture_output=True, text=True,
                            timeout=60, check=True).stdout.strip()
    handed_out = [int(x) for x in before.split(",")]
    with MetadataStore(db, ledger_id_block=4) as reopened:
        after = [reopened.next_ledger_id() for _ in range(4)]
        assert reopened.get_tenant("acme") == {}  # a process crash keeps what reached the WAL
    assert not set(handed_out) & set(after)


def test_sync_log_without_a_wal_does_nothing(tmp_path: Path) -> None:
    store = MetadataStore(tmp_path / "fresh.db")
    store.close()  # the last connection's close checkpoints and removes the WAL
    assert not (tmp_path / "fresh.db-wal").exists()
    MetadataStore.sync_log(store)


def test_a_wal_sync_needs_no_new_descriptor_once_the_first_was_made(db: Path) -> None:
    """A flood of topics can take every descriptor; the metadata store's syncs go on."""
    script = (
        "import os, sys\n"
        "from magnetar.storage import MetadataStore\n"
        "store = MetadataStore(sys.argv[1])\n"
        "store.defer_syncs()\n"
        "store.create_tenant('before', {})\n"
        "store.sync_log()\n"
        "taken = []\n"
        "try:\n"
        "    while True:\n"
        "        taken.append(os.open('/dev/null', os.O_RDONLY))\n"
        "except OSError:\n"
        "    pass\n"
        "store.create_tenant('after', {})\n"
        "store.sync_log()\n"
        "print(len(taken))\n"
    )
    out = subprocess.run([sys.executable, "-c", f"import resource; resource.setrlimit("
                          f"resource.RLIMIT_NOFILE, (128, 128))\n{script}", str(db)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout) > 0
    with MetadataStore(db) as reader:
        assert sorted(reader.list_tenants()) == ["after", "before"]


def test_ledger_ids_come_from_blocks_the_writer_reserved_ahead(writer: MetadataWriter, db: Path,
                                                               syncs: list[MetadataStore]) -> None:
    loop_store = MetadataStore(db)
    try:
        loop_store.defer_syncs()
        ids = LedgerIds(loop_store, writer, block=8)
        first = [ids.next_id() for _ in range(5)]  # the first block is reserved on the loop
        assert ids._ahead is not None
        ids._ahead.result(WAIT_S)
        syncs.clear()
        rest = [ids.next_id() for _ in range(11)]
        assert not any(store is loop_store for store in syncs)  # only the writer synced
        handed_out = first + rest
        assert handed_out == sorted(set(handed_out))
        with MetadataStore(db) as other:
            assert other.next_ledger_id() > handed_out[-1]
    finally:
        loop_store.close()


def test_ledger_ids_fall_back_to_a_durable_reservation_when_the_writer_is_behind(writer: MetadataWriter,
                                                                                  db: Path) -> None:
    loop_store = MetadataStore(db)
    release = threading.Event()
    try:
        loop_store.defer_syncs()
        ids = LedgerIds(loop_store, writer, block=4)
        writer.submit(lambda store: release.wait(WAIT_S))  # the writer is busy
        handed_out = [ids.next_id() for _ in range(12)]
        release.set()
        writer.barrier().result(WAIT_S)
        assert len(set(handed_out)) == 12
        with MetadataStore(db) as other:
            assert other.next_ledger_id() > max(handed_out)
    finally:
        release.set()
        loop_store.close()


def test_a_load_waits_for_the_writer_s_block_instead_of_reserving_on_the_loop(writer: MetadataWriter, db: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    loop_store = MetadataStore(db)
    on_loop: list[int] = []
    real = loop_store.reserve_ledger_ids
    monkeypatch.setattr(loop_store, "reserve_ledger_ids", lambda count: on_loop.append(count) or real(count))
    release = threading.Event()

    async def scenario() -> list[int]:
        ids = LedgerIds(loop_store, writer, block=4)
        writer.submit(lambda store: release.wait(WAIT_S))  # the writer is busy
        waiting = asyncio.ensure_future(ids.at_hand())
        for _ in range(3):
            await asyncio.sleep(0)
        assert not waiting.done(), "no block yet: the load waits for the writer's"
        release.set()
        await asyncio.wait_for(waiting, WAIT_S)
        taken = [ids.next_id() for _ in range(4)]  # the whole block
        await ids.at_hand()
        return [*taken, ids.next_id()]

    try:
        loop_store.defer_syncs()
        handed_out = asyncio.run(scenario())
        assert on_loop == []
        assert handed_out == sorted(set(handed_out))
    finally:
        release.set()
        loop_store.close()


def test_writes_submitted_before_the_process_ends_without_close_are_applied(db: Path) -> None:
    script = (
        "import sys\n"
        "from magnetar.server.metadata_writer import MetadataWriter\n"
        "import time\n"
        "writer = MetadataWriter(sys.argv[1])\n"
        "writer.submit(lambda store: time.sleep(0.3))  # the rest is still queued when the script ends\n"
        "for i in range(20):\n"
        "    writer.submit(lambda store, i=i: store.create_tenant(f't{i}', {}))\n"
    )
    subprocess.run([sys.executable, "-c", script, str(db)], timeout=60, check=True)
    with MetadataStore(db) as reader:
        assert len(reader.list_tenants()) == 20

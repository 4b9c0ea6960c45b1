"""A cluster's broker taking a topic over through its ledger list (server/ledger_lists.py):
core's takeover steps run against a real in-memory metadata store and real segment files,
with a twin of the broker's membership (which session, since when the bundle is owned)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from magnetar.core.cluster.managed_ledger_info import LedgerInfo, LedgerWriter, ManagedLedgerInfo
from magnetar.core.errors import ServiceNotReady
from magnetar.core.names import TopicName
from magnetar.core.positions import Position
from magnetar.server.clock import monotonic_ms
from magnetar.server.ledger_lists import LedgerLists, TopicLedgerList, ledger_end
from magnetar.storage import MemoryMetadataStore
from magnetar.storage.interfaces import LedgerConfig, StorageError
from magnetar.storage.recorded_ledgers import LedgerFenced
from magnetar.storage.segment_ledger import SegmentLedger, SegmentLedgerFactory, topic_dir_name

R = TypeVar("R")
TOPIC = TopicName.parse("persistent://public/default/fenced")
KEY = str(TOPIC)


class Membership:
    """The broker's membership as a takeover sees it."""

    def __init__(self, broker_id: str, session_id: int, wait_ms: int = 0) -> None:
        self.broker_id = broker_id
        self.session_id = session_id
        self.acquired_at = int(monotonic_ms())
        self.wait_ms = wait_ms
        #: since when this broker's session has lived; None: unknown (the wait is always made)
        self.session_since_ms: int | None = None
        self.serving = True
        #: called before each store call of the takeover (a race planted by a test)
        self.before_call: Callable[[Callable[..., Any]], None] = lambda call: None

    def takeover_start(self, name: TopicName) -> tuple[int, int, int, int | None]:
        if not self.serving:
            raise ServiceNotReady("not owned")
        return self.session_id, self.acquired_at, self.wait_ms, self.session_since_ms

    def still_serves(self, name: TopicName, session_id: int) -> bool:
        return self.serving and session_id == self.session_id

    @property
    def calls(self) -> Membership:
        return self

    async def run(self, call: Callable[..., R], *args: Any) -> R:
        """Inline: the in-memory store answers on the thread that made it."""
        self.before_call(call)
        return call(*args)


class Broker:
    """One broker's ledger lists over the shared store and data directory."""

    def __init__(self, store: MemoryMetadataStore, data_dir: Path, broker_id: str, session_id: int,
                 wait_ms: int = 0, entries_per_ledger: int = 1000) -> None:
        self.membership = Membership(broker_id, session_id, wait_ms)
        self.factory = SegmentLedgerFactory(data_dir, store.next_ledger_id,
                                            LedgerConfig(max_entries_per_ledger=entries_per_ledger))
        self.lists = LedgerLists(store, self.membership, data_dir, self.factory.open, store.next_ledger_id)

    def open(self) -> SegmentLedger:
        return asyncio.run(self.lists.open(TOPIC))

    def may_acknowledge(self, ledger: SegmentLedger) -> bool:
        return self.lists.may_acknowledge(ledger, self.membership.session_id)


def stored(store: MemoryMetadataStore) -> ManagedLedgerInfo:
    got = store.get_managed_ledger(KEY)
    assert got is not None
    return ManagedLedgerInfo.from_json(json.dumps(got.data).encode())


def append(ledger: SegmentLedger, *payloads: bytes) -> list[Position]:
    positions = [ledger.append(p) for p in payloads]
    ledger.flush()
    ledger.sync()
    return positions


def read_all(ledger: SegmentLedger) -> list[bytes]:
    return [data for _, data in ledger.iter_entries(Position(-1, -1))]


@pytest.fixture
def store() -> MemoryMetadataStore:
    return MemoryMetadataStore()


def test_a_first_takeover_records_a_ledger_rollovers_and_the_close(store: MemoryMetadataStore, tmp_path: Path) -> None:
    a = Broker(store, tmp_path, "a:1", 11, entries_per_ledger=3)
    ledger = a.open()
    first = stored(store)
    assert [(x.entries, x.writer) for x in first.ledgers] == [(None, LedgerWriter("a:1", 11))]
    positions = append(ledger, *(b"m%d" % i for i in range(7)))
    # two rollovers, each recorded before an entry of its new ledger was reported durable
    after_rolls = stored(store)
    assert [x.entries for x in after_rolls.ledgers] == [3, 3, None]
    assert [x.ledger_id for x in after_rolls.ledgers] == sorted({p.ledger_id for p in positions})
    assert a.may_acknowledge(ledger)
    ledger.close()
    closed = stored(store)
    assert [x.entries for x in closed.ledgers] == [3, 3, 1]
    # the next owner finds nothing open, so nothing to wait out: it closes nothing and adds its own
    b = Broker(store, tmp_path, "b:1", 22, wait_ms=60_000)
    again = b.open()
    assert read_all(again) == [b"m%d" % i for i in range(7)]
    assert [(x.entries, x.writer) for x in stored(store).ledgers][-1] == (None, LedgerWriter("b:1", 22))
    again.close()


def test_the_successor_waits_out_the_writer_then_fences_its_ledger(store: MemoryMetadataStore,
                                                                   tmp_path: Path) -> None:
    a = Broker(store, tmp_path, "a:1", 11, entries_per_ledger=3)
    old = a.open()
    append(old, b"acked-1", b"acked-2")
    b = Broker(store, tmp_path, "b:1", 22, wait_ms=300)
    started = monotonic_ms()
    new = b.open()
    assert monotonic_ms() - started >= 290  # the previous writer's lease at its longest
    listed = stored(store)
    fenced_id = Position(*append(new, b"new-1")[0]).ledger_id
    assert [x.entries for x in listed.ledgers] == [2, None] and listed.ledgers[-1].ledger_id == fenced_id
    # the fenced writer goes on: its entry stays out of the topic, its rollover loses
    old.append(b"late-1")  # fills its ledger: the rollover follows
    old.flush()
    with pytest.raises(StorageError, match="rollover could not be recorded"):
        old.sync()
    assert isinstance(old.ledger_list, TopicLedgerList) and old.ledger_list.fenced
    assert not a.may_acknowledge(old)
    old.close()
    assert stored(store).ledgers[:1] == listed.ledgers[:1]
    new.close()
    reread = Broker(store, tmp_path, "b:1", 22).open()
    assert read_all(reread) == [b"acked-1", b"acked-2", b"new-1"]
    reread.close()


def test_a_writer_whose_session_ended_is_not_waited_out_by_an_older_session(store: MemoryMetadataStore,
                                                                           tmp_path: Path) -> None:
    """The store shows the previous writer's session gone (here: never registered in this
    store's one session) and the successor's own session is older than the wait: its ledger
    is fenced at once. A live previous session is waited out in full."""
    a = Broker(store, tmp_path, "a:1", 11)
    old = a.open()
    append(old, b"acked-1")
    b = Broker(store, tmp_path, "b:1", 22, wait_ms=60_000)
    b.membership.session_since_ms = int(monotonic_ms()) - 60_000
    started = monotonic_ms()
    new = b.open()
    assert monotonic_ms() - started < 30_000
    assert [x.entries for x in stored(store).ledgers][:1] == [1]
    new.close()
    old.close()


def test_a_writer_whose_session_lives_is_waited_out_all_the_same(store: MemoryMetadataStore, tmp_path: Path) -> None:
    store.register_broker("a:1", {})  # the in-memory store's one session is 1: "a:1" lives in it
    a = Broker(store, tmp_path, "a:1", 1)
    old = a.open()
    append(old, b"acked-1")
    b = Broker(store, tmp_path, "b:1", 22, wait_ms=300)
    b.membership.session_since_ms = int(monotonic_ms()) - 60_000
    started = monotonic_ms()
    new = b.open()
    assert monotonic_ms() - started >= 290
    store.unregister_broker("a:1")  # leaving: its session still shows alive until it ends
    assert store.session_alive("a:1", 1) and not store.session_alive("a:1", 11)
    new.close()
    old.close()


def test_a_lost_compare_and_set_fails_the_load_with_service_not_ready(store: MemoryMetadataStore,
                                                                       tmp_path: Path) -> None:
    a = Broker(store, tmp_path, "a:1", 11)
    def race(call: Callable[..., Any]) -> None:
        if call == store.put_managed_ledger:  # another broker's list lands first
            other = ManagedLedgerInfo((LedgerInfo(5, None, LedgerWriter("c:1", 33)),))
            store.put_managed_ledger(KEY, json.loads(other.to_json()), -1)
    a.membership.before_call = race
    with pytest.raises(ServiceNotReady, match="taken over by another broker"):
        a.open()
    assert stored(store).ledgers[-1].writer == LedgerWriter("c:1", 33)
    assert not (tmp_path / topic_dir_name(KEY)).exists() or not list((tmp_path / topic_dir_name(KEY)).iterdir())


def test_a_takeover_whose_version_moved_over_the_same_list_reads_again(store: MemoryMetadataStore,
                                                                         tmp_path: Path) -> None:
    a = Broker(store, tmp_path, "a:1", 11)
    first = a.open()
    append(first, b"kept")
    first.close()
    b = Broker(store, tmp_path, "b:1", 22)
    moved: list[int] = []
    def properties_written(call: Callable[..., Any]) -> None:
        held = store.get_managed_ledger(KEY)
        if call == store.put_managed_ledger and not moved and held is not None:
            moved.append(store.put_managed_ledger(KEY, held.data, held.version))  # same list, one version on
    b.membership.before_call = properties_written
    ledger = b.open()
    assert moved and read_all(ledger) == [b"kept"]
    assert stored(store).ledgers[-1].writer == LedgerWriter("b:1", 22)
    ledger.close()


def test_losing_the_bundle_while_waiting_abandons_the_takeover(store: MemoryMetadataStore, tmp_path: Path) -> None:
    a = Broker(store, tmp_path, "a:1", 11)
    a.open()
    b = Broker(store, tmp_path, "b:1", 22, wait_ms=200)
    def lose(call: Callable[..., Any]) -> None:
        b.membership.serving = False
    b.membership.before_call = lose
    before = stored(store)
    with pytest.raises(ServiceNotReady, match="lost while it was taken over"):
        b.open()
    assert stored(store) == before


def test_a_ledger_opened_under_an_earlier_session_is_not_acknowledged(store: MemoryMetadataStore,
                                                                       tmp_path: Path) -> None:
    a = Broker(store, tmp_path, "a:1", 11)
    ledger = a.open()
    append(ledger, b"x")
    assert a.may_acknowledge(ledger)
    a.membership.session_id = 12  # a new session: this writer is another one now
    assert not a.may_acknowledge(ledger)
    # the same broker in its new session fences its earlier ledger like anyone's
    again = Broker(store, tmp_path, "a:1", 12).open()
    assert [(x.entries, x.writer) for x in stored(store).ledgers] == [(1, LedgerWriter("a:1", 11)),
                                                                      (None, LedgerWriter("a:1", 12))]
    assert read_all(again) == [b"x"]
    again.close()
    ledger.close()  # its close loses: the list moved
    assert stored(store).ledgers[-1].writer == LedgerWriter("a:1", 12)


def test_files_written_before_the_list_was_kept_become_its_closed_ledgers(store: MemoryMetadataStore,
                                                                         tmp_path: Path) -> None:
    standalone = SegmentLedgerFactory(tmp_path, store.next_ledger_id).open(KEY)
    append(standalone, b"old-1", b"old-2")
    standalone.close()
    ledger = Broker(store, tmp_path, "a:1", 11).open()
    assert [x.entries for x in stored(store).ledgers] == [2, None]
    assert read_all(ledger) == [b"old-1", b"old-2"]
    ledger.close()


def test_a_recorded_list_the_writer_does_not_hold_refuses_its_records(store: MemoryMetadataStore) -> None:
    mine = LedgerWriter("a:1", 11)
    info = ManagedLedgerInfo((LedgerInfo(3, None, LedgerWriter("b:1", 22)),))
    version = store.put_managed_ledger(KEY, json.loads(info.to_json()), -1)
    recorded = TopicLedgerList(store, KEY, mine, info, version)
    with pytest.raises(LedgerFenced):
        recorded.closed(3, 1, ())
    assert stored(store) == info


def test_the_end_of_a_ledger_that_was_never_created_is_zero(tmp_path: Path) -> None:
    assert ledger_end(tmp_path, 42) == 0


def test_a_version_moved_over_the_same_list_is_not_a_fence(store: MemoryMetadataStore, tmp_path: Path) -> None:
    """ZooKeeper keeps a topic's properties in its ledger list's node: writing them moves
    the version, not the list, and the writer's next compare-and-set goes through."""
    a = Broker(store, tmp_path, "a:1", 11, entries_per_ledger=2)
    ledger = a.open()
    held = store.get_managed_ledger(KEY)
    assert held is not None
    store.put_managed_ledger(KEY, held.data, held.version)  # the same list, one version on
    append(ledger, b"1", b"2", b"3")
    assert [x.entries for x in stored(store).ledgers] == [2, None]
    assert a.may_acknowledge(ledger)
    ledger.close()
    assert [x.entries for x in stored(store).ledgers] == [2, 1]


def test_deleting_the_topic_deletes_its_list(store: MemoryMetadataStore, tmp_path: Path) -> None:
    a = Broker(store, tmp_path, "a:1", 11)
    ledger = a.open()
    append(ledger, b"gone")
    ledger.delete()
    assert store.get_managed_ledger(KEY) is None
    # a topic of the same name made again starts afresh, with nobody to wait out
    again = Broker(store, tmp_path, "b:1", 22, wait_ms=60_000).open()
    assert read_all(again) == [] and [x.entries for x in stored(store).ledgers] == [None]
    again.close()


def test_receipts_of_a_ledger_its_writer_no_longer_holds_are_refused(tmp_path: Path) -> None:
    """``Appends`` asks the ledger lists after the fsync and before the receipts: a ledger
    that is not held (fenced, or opened under an earlier session) gets no receipt and its
    topic is unloaded; the others are acknowledged as usual."""
    from magnetar.core.broker.broker_config import BrokerConfig
    from magnetar.core.topics.topic import Topic
    from magnetar.server.appends import Appends
    from magnetar.server.broker_service import BrokerService
    broker = BrokerService(BrokerConfig(), tmp_path / "data")
    try:
        held, fenced = (broker.get_topic(TopicName.parse(f"persistent://public/default/{n}"), create=True)
                        for n in ("held", "fenced"))
        unloaded: list[Topic] = []
        appends = Appends({str(t.name): t for t in (held, fenced)}, broker.recorder, broker.disk, False,
                          unloaded.append)
        appends.may_acknowledge = lambda: True
        appends.ledger_may_acknowledge = lambda ledger: ledger is held.ledger
        positions = {t: t.ledger.append(b"x") for t in (held, fenced)}
        appends.on_synced([(t.ledger, positions[t]) for t in (held, fenced)])
        assert unloaded == [fenced]
        assert held.last_durable == positions[held] and fenced.last_durable != positions[fenced]
    finally:
        broker.metadata.close()

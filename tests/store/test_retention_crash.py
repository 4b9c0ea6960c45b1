"""A crash at any point of a retention trim on segment files: reopened from the files, the
topic's data has no hole, every entry a stored cursor has not consumed is there, and the
cursor points at a readable entry (or the end)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.names import TopicName
from magnetar.core.policies import AppliedPolicies, Policies, RetentionPolicies, TopicPolicies
from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.subscriptions.cursor_record import CursorRecord
from magnetar.core.topics.producer import Producer
from magnetar.core.topics.topic import Topic
from magnetar.storage import MetadataStore, SegmentLedger
from magnetar.storage.interfaces import LedgerConfig
from magnetar.storage.segment_ledger import index_file_name, segment_file_name
from magnetar.testing.entries import append_entry
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import make_entry

TOPIC = "persistent://public/default/retention-crash"
CONFIG = LedgerConfig(max_entries_per_ledger=3)


class Crash(Exception):
    """The process died here."""


class NullSink:
    def send_receipt(self, *args: object) -> None: ...
    def send_receipts(self, *args: object) -> None: ...
    def send_error(self, *args: object) -> None: ...
    def close_producer(self, *args: object) -> None: ...


def setup(data: Path, ids: itertools.count[int]) -> tuple[Topic, MetadataStore, dict[Position, bytes]]:
    store = MetadataStore(data / "metadata.db")
    ledger = SegmentLedger(data, TOPIC, ids.__next__, CONFIG, clock_ms=lambda: 0)
    config = BrokerConfig()
    topic = Topic(TopicName.parse(TOPIC), ledger, config)
    topic.apply_policies(AppliedPolicies.resolve(
        TopicPolicies(retentionPolicies=RetentionPolicies(retentionTimeInMinutes=0, retentionSizeInMB=0)),
        Policies(), config), 0)
    producer = Producer(0, "p", NullSink())  # type: ignore[arg-type]
    published = {}
    for i in range(12):
        entry = make_entry(pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1), f"m{i}".encode())
        published[append_entry(topic, producer, i, i, 1, entry, 0)] = entry
    ledger.flush()
    ledger.sync()
    topic.on_persisted(max(published), 0)
    sub = topic.create_subscription("s", "Shared", durable=True, mark_delete=BEFORE_START)
    store.put_cursor(TOPIC, "s", CursorRecord(BEFORE_START))
    sub.cursor.ack_cumulative(Position(3, 2))  # ledgers 1..3 consumed; 4 is not; 5 is current
    return topic, store, published


def check_consistent(data: Path, ids: itertools.count[int], published: dict[Position, bytes]) -> list[int]:
    """Reopen from the files and check; the ledgers left."""
    store = MetadataStore(data / "metadata.db")
    ledger = SegmentLedger(data, TOPIC, ids.__next__, CONFIG, clock_ms=lambda: 0)
    try:
        kept = [info.ledger_id for info in ledger.ledgers()[:-1]]
        published_ledgers = sorted({pos.ledger_id for pos in published})
        assert kept == published_ledgers[len(published_ledgers) - len(kept):], "a suffix, never a hole"
        for pos, entry in published.items():
            if pos.ledger_id in kept:
                assert ledger.read(pos) == entry
        record = store.get_cursor(TOPIC, "s")
        assert record is not None
        for pos in published:
            if pos > record.mark_delete:
                assert pos.ledger_id in kept, f"{pos} not consumed by the stored cursor, yet gone"
        first_unread = ledger.next_position(record.mark_delete)
        last = ledger.last_position()
        assert last is None or first_unread > last or ledger.read(first_unread) == published[first_unread]
        return kept
    finally:
        ledger.close()
        store.close()


def test_crash_after_detaching_brings_the_ledgers_back_whole(tmp_path: Path) -> None:
    ids = itertools.count(1)
    topic, store, published = setup(tmp_path, ids)
    assert topic.apply_retention(10) == [1, 2, 3]
    assert topic.ledger.first_position() == Position(4, 0)
    assert check_consistent(tmp_path, ids, published) == [1, 2, 3, 4]
    store.close()


@pytest.mark.parametrize("unlinks_before_crash", [0, 1, 2, 3, 5])
def test_crash_in_the_middle_of_removing_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               unlinks_before_crash: int) -> None:
    ids = itertools.count(1)
    topic, store, published = setup(tmp_path, ids)
    assert topic.apply_retention(10) == [1, 2, 3]
    # the shell writes the cursors that moved past the detached ledgers, then removes files
    store.put_cursor(TOPIC, "s", CursorRecord(topic.subscriptions["s"].cursor.mark_delete))
    done = itertools.count()
    real_unlink = Path.unlink

    def dying_unlink(path: Path, missing_ok: bool = False) -> None:
        if next(done) >= unlinks_before_crash:
            raise Crash(str(path))
        real_unlink(path, missing_ok=missing_ok)
    monkeypatch.setattr(Path, "unlink", dying_unlink)
    with pytest.raises(Crash):
        topic.ledger.remove_detached()
    monkeypatch.undo()
    kept = check_consistent(tmp_path, ids, published)
    assert kept[-1] == 4 and len(kept) >= 1
    store.close()


def test_after_a_complete_removal_only_the_kept_ledgers_open(tmp_path: Path) -> None:
    ids = itertools.count(1)
    topic, store, published = setup(tmp_path, ids)
    topic.apply_retention(10)
    store.put_cursor(TOPIC, "s", CursorRecord(topic.subscriptions["s"].cursor.mark_delete))
    assert topic.ledger.remove_detached() == 3
    assert topic.ledger.remove_detached() == 0
    assert check_consistent(tmp_path, ids, published) == [4]
    directory = topic.ledger.directory  # type: ignore[attr-defined]
    assert not [i for i in (1, 2, 3) if (directory / segment_file_name(i)).exists()
                or (directory / index_file_name(i)).exists()]
    store.close()

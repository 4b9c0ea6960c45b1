"""Deduplication recovery in the broker shell: the fast replay of stored entries.

The replay reads each entry's metadata with the least work it can and folds the
entries into one highest id per producer. These tests hold it to the plain path: full
metadata parsing (``peek_metadata``) and one ``replay_entry`` per entry.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.dedup import MessageDeduplication
from magnetar.core.dedup.topic_dedup import replay
from magnetar.core.names import TopicName
from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.topics.publish import is_last_chunk, last_sequence_id, stored_metadata
from magnetar.core.topics.topic import Topic
from magnetar.storage import MemoryLedger
from magnetar.storage.interfaces import LedgerConfig
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.batch import compress, make_batch
from magnetar.wire.frames import MAGIC_BROKER_ENTRY_METADATA, make_entry, peek_metadata


def metadata(producer: str, sequence_id: int, **fields: object) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name=producer, sequence_id=sequence_id, publish_time=1, **fields)


def batch_entry(producer: str, sequence_ids: list[int], codec: int = pb.NONE) -> bytes:
    raw = make_batch([(pb.SingleMessageMetadata(payload_size=0, sequence_id=s), f"m{s}".encode())
                      for s in sequence_ids])
    meta = metadata(producer, sequence_ids[0], num_messages_in_batch=len(sequence_ids), compression=codec,
                    uncompressed_size=len(raw))
    return make_entry(meta, compress(codec, raw))


def with_broker_entry_metadata(entry: bytes, index: int) -> bytes:
    section = pb.BrokerEntryMetadata(broker_timestamp=123, index=index).SerializeToString()
    return struct.pack(">HI", MAGIC_BROKER_ENTRY_METADATA, len(section)) + section + entry


def topic_with(entries: list[bytes]) -> Topic:
    ledger = MemoryLedger("persistent://public/default/replay", config=LedgerConfig(max_entries_per_ledger=3))
    for entry in entries:
        ledger.append(entry)
    return Topic(TopicName.parse("persistent://public/default/replay"), ledger, BrokerConfig())


def recovering(properties: dict[str, int] | None = None, position: Position | None = None) -> MessageDeduplication:
    dedup = MessageDeduplication()
    dedup.set_enabled(True)
    dedup.begin_recovery(properties or {}, position)
    return dedup


def replay_one_by_one(topic: Topic, dedup: MessageDeduplication, after: Position) -> None:
    """The plain path the fast replay must agree with."""
    for pos, entry in topic.ledger.iter_entries(after):
        meta = peek_metadata(entry)
        dedup.replay_entry(meta.producer_name, last_sequence_id(meta), pos,
                           is_last_chunk=is_last_chunk(meta))


def both_ways(entries: list[bytes], after: Position = BEFORE_START,
              properties: dict[str, int] | None = None) -> MessageDeduplication:
    topic = topic_with(entries)
    snapshot_at = None if after == BEFORE_START else after
    fast, plain = recovering(properties, snapshot_at), recovering(properties, snapshot_at)
    assert replay(topic, fast, after) == sum(1 for _ in topic.ledger.iter_entries(after))
    replay_one_by_one(topic, plain, after)
    for dedup in (fast, plain):
        dedup.finish_recovery(0)
    assert fast.stats() == plain.stats()
    assert fast.highest_sequenced_pushed == plain.highest_sequenced_pushed
    return fast


def test_replay_reads_every_kind_of_entry_like_the_plain_path() -> None:
    entries = [
        make_entry(metadata("single", 5), b"x"),
        batch_entry("batch", [6, 7, 9]),  # the payload is not read: first id + count - 1
        batch_entry("zstd-batch", [1, 2], pb.ZSTD),
        make_entry(metadata("highest", 15, highest_sequence_id=20), b"x"),
        make_entry(metadata("highest-below", 15, highest_sequence_id=3), b"x"),
        make_entry(metadata("chunked", 30, uuid="u", num_chunks_from_msg=2, chunk_id=0), b"c0"),
        make_entry(metadata("whole-chunked", 40, uuid="v", num_chunks_from_msg=2, chunk_id=0), b"c0"),
        make_entry(metadata("whole-chunked", 40, uuid="v", num_chunks_from_msg=2, chunk_id=1), b"c1"),
        make_entry(metadata("no-checksum", 8), b"x", with_checksum=False),
        with_broker_entry_metadata(make_entry(metadata("broker-meta", 11), b"x"), 0),
        with_broker_entry_metadata(make_entry(metadata("broker-meta-plain", 12), b"x", with_checksum=False), 1),
        make_entry(metadata("single", 4), b"x"),  # lower than what is stored already: ids only go up
    ]
    dedup = both_ways(entries)
    assert dedup.highest_sequenced_persisted == {
        "single": 5, "batch": 8, "zstd-batch": 2, "highest": 20, "highest-below": 15, "whole-chunked": 40,
        "no-checksum": 8, "broker-meta": 11, "broker-meta-plain": 12}
    assert dedup.stats().entries_since_snapshot == len(entries)


def test_replay_starts_after_the_snapshot_and_keeps_its_producers() -> None:
    entries = [make_entry(metadata("p", i), b"x") for i in range(7)] + [make_entry(metadata("q", 3), b"x")]
    dedup = both_ways(entries, after=Position(1, 2), properties={"p": 2, "old": 9})
    assert dedup.highest_sequenced_persisted == {"p": 6, "q": 3, "old": 9}
    assert dedup.stats().entries_since_snapshot == 5


def test_replay_of_nothing_keeps_the_snapshot_position() -> None:
    entries = [make_entry(metadata("p", i), b"x") for i in range(3)]
    dedup = both_ways(entries, after=Position(1, 2), properties={"p": 2})
    assert dedup.highest_sequenced_persisted == {"p": 2}
    assert dedup.stats().snapshot_position == Position(1, 2)


_FIELDS = st.fixed_dictionaries({}, optional={
    "highest_sequence_id": st.integers(0, 2**64 - 1),
    "num_chunks_from_msg": st.integers(-2, 4),
    "chunk_id": st.integers(-1, 4),
    "uuid": st.text(max_size=5),
    "partition_key": st.text(max_size=5),
    "deliver_at_time": st.integers(0, 2**40),
    "properties": st.lists(st.builds(pb.KeyValue, key=st.text(max_size=4), value=st.text(max_size=4)), max_size=2),
})


@settings(max_examples=200, deadline=None)
@given(producer=st.text(min_size=1, max_size=20), sequence_id=st.integers(0, 2**64 - 1), fields=_FIELDS,
       checksum=st.booleans(), broker_entry=st.booleans())
def test_stored_metadata_is_what_full_parsing_reads(producer: str, sequence_id: int, fields: dict[str, object],
                                                    checksum: bool, broker_entry: bool) -> None:
    entry = make_entry(metadata(producer, sequence_id, **fields), b"payload", with_checksum=checksum)
    if broker_entry:
        entry = with_broker_entry_metadata(entry, 7)
    fast, full = stored_metadata(entry), peek_metadata(entry)
    assert fast == full
    assert is_last_chunk(fast) == is_last_chunk(full)


@pytest.mark.parametrize(("chunks", "chunk_id", "last"), [
    (None, None, True), (1, 0, True), (3, 0, False), (3, 1, False), (3, 2, True), (0, None, True)])
def test_is_last_chunk(chunks: int | None, chunk_id: int | None, last: bool) -> None:
    fields = {k: v for k, v in (("num_chunks_from_msg", chunks), ("chunk_id", chunk_id)) if v is not None}
    assert is_last_chunk(metadata("p", 0, **fields)) is last

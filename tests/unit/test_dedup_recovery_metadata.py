"""Deduplication recovery reads sequence ids from stored metadata alone.

Mirrors what the official client's ``test_producer_deduplication`` and
``test_producer_sequence_after_reconnection`` met: a stored batch whose payload the
broker cannot read (encrypted, compressed with any codec, chunked, cut short) must not
stop recovery. The rule: ``highest_sequence_id`` when set (never below
``sequence_id``), else ``sequence_id + num_messages_in_batch - 1`` for a batch (a count
below 1 counts as 1), else ``sequence_id``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.dedup import MessageDeduplication
from magnetar.core.dedup.topic_dedup import replay
from magnetar.core.names import TopicName
from magnetar.core.positions import BEFORE_START
from magnetar.core.topics.publish import is_last_chunk, last_sequence_id, stored_metadata
from magnetar.core.topics.topic import Topic
from magnetar.storage import MemoryLedger
from magnetar.storage.interfaces import LedgerConfig
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.batch import compress, make_batch
from magnetar.wire.frames import MAGIC_BROKER_ENTRY_METADATA, make_entry

CODECS = [pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY]
TOPIC = "persistent://public/default/recovery"


@dataclass(frozen=True)
class Stored:
    """One stored entry and the facts it was made from."""

    producer: str
    sequence_id: int
    highest: int | None
    count: int | None
    chunks: tuple[int, int] | None
    entry: bytes

    @property
    def expected_last(self) -> int:
        if self.highest is not None:
            return max(self.sequence_id, self.highest)
        if self.count is not None:
            return self.sequence_id + max(self.count, 1) - 1
        return self.sequence_id

    @property
    def counted(self) -> bool:
        """Only a whole message or the last chunk of one records its id."""
        return self.chunks is None or self.chunks[0] <= 0 or self.chunks[1] == self.chunks[0] - 1


@st.composite
def payloads(draw: st.DrawFn, codec: int) -> bytes:
    """A real (compressed) batch cut anywhere, or bytes that are no batch at all."""
    if draw(st.booleans()):
        records = draw(st.lists(st.binary(max_size=30), min_size=1, max_size=5))
        raw = make_batch([(pb.SingleMessageMetadata(payload_size=0, sequence_id=i), body)
                          for i, body in enumerate(records)])
        whole = compress(codec, raw)
        return whole[: draw(st.integers(0, len(whole)))]
    return draw(st.binary(max_size=80))


@st.composite
def stored_entries(draw: st.DrawFn) -> Stored:
    producer = draw(st.sampled_from(["p", "q", "r"]))
    sequence_id = draw(st.integers(0, 2**62))
    highest = draw(st.one_of(st.none(), st.integers(0, 2**62)))
    count = draw(st.one_of(st.none(), st.integers(-3, 5000)))
    codec = draw(st.sampled_from(CODECS))
    chunks = draw(st.one_of(st.none(), st.tuples(st.integers(-1, 4), st.integers(-1, 4))))
    meta = pb.MessageMetadata(producer_name=producer, sequence_id=sequence_id, publish_time=1, compression=codec,
                              uncompressed_size=draw(st.integers(0, 2**20)))
    if highest is not None:
        meta.highest_sequence_id = highest
    if count is not None:
        meta.num_messages_in_batch = count
    if chunks is not None:
        meta.uuid = f"{producer}-{sequence_id}"
        meta.num_chunks_from_msg, meta.chunk_id = chunks
    if draw(st.booleans()):  # encrypted: the payload is ciphertext the broker cannot read
        meta.encryption_keys.append(pb.EncryptionKeys(key="client-rsa.pem", value=draw(st.binary(max_size=16))))
        meta.encryption_algo = "RSA"
        meta.encryption_param = draw(st.binary(min_size=12, max_size=12))
    entry = make_entry(meta, draw(payloads(codec)), with_checksum=draw(st.booleans()))
    if draw(st.booleans()):
        section = pb.BrokerEntryMetadata(broker_timestamp=5, index=draw(st.integers(0, 100))).SerializeToString()
        entry = struct.pack(">HI", MAGIC_BROKER_ENTRY_METADATA, len(section)) + section + entry
    return Stored(producer, sequence_id, highest, count, chunks, entry)


@settings(max_examples=400, deadline=None)
@given(stored_entries())
def test_the_last_sequence_id_of_any_stored_entry_is_the_metadata_rule(stored: Stored) -> None:
    metadata = stored_metadata(stored.entry)
    assert last_sequence_id(metadata) == stored.expected_last
    assert is_last_chunk(metadata) is stored.counted


@settings(max_examples=150, deadline=None)
@given(st.lists(stored_entries(), max_size=12))
def test_recovery_from_any_stored_entries_never_raises_and_follows_the_metadata_rule(
        entries: list[Stored]) -> None:
    ledger = MemoryLedger(TOPIC, config=LedgerConfig(max_entries_per_ledger=4))
    for stored in entries:
        ledger.append(stored.entry)
    topic = Topic(TopicName.parse(TOPIC), ledger, BrokerConfig())
    dedup = MessageDeduplication()
    dedup.set_enabled(True)
    dedup.begin_recovery({}, None)
    assert replay(topic, dedup, BEFORE_START) == len(entries)
    dedup.finish_recovery(0)
    expected: dict[str, int] = {}
    for stored in entries:
        if stored.counted:
            expected[stored.producer] = max(expected.get(stored.producer, -1), stored.expected_last)
    assert dedup.highest_sequenced_persisted == expected

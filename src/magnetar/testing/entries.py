"""Appending entries to a core topic by hand, for tests and benchmarks that build topics
without a connection: the publish path's append of one send, with its metadata read."""

from __future__ import annotations

from magnetar.core.entry import EntryInfo
from magnetar.core.positions import Position
from magnetar.core.topics.producer import Producer
from magnetar.core.topics.publish import stored_metadata
from magnetar.core.topics.topic import Topic


def append_entry(topic: Topic, producer: Producer, sequence_id: int, highest_sequence_id: int,
                 num_messages: int, entry: bytes, now_ms: int) -> Position:
    info = EntryInfo.of(stored_metadata(entry))
    return topic.append(producer, [(sequence_id, highest_sequence_id, num_messages, entry, info)], now_ms)[0]

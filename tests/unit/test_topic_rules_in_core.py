"""The rules that moved from the broker shell into core, checked without the shell: a topic's
stored properties (creation time, termination) and the compaction cursor's naming of views."""

from __future__ import annotations

from test_core_dispatch import new_topic

from magnetar.core.compaction import compaction_cursor
from magnetar.core.compaction.compacted_topic import COMPACTED_TOPIC_LEDGER_PROPERTY
from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.topics import topic_properties
from magnetar.core.topics.topic_properties import CREATED_PROPERTY, TERMINATED_PROPERTY


def test_a_topic_without_stored_properties_is_created_now_and_nothing_is_written() -> None:
    topic = new_topic()
    assert topic_properties.restore(topic, None, now_ms=1234) is None
    assert topic.created_ms == 1234
    assert topic.terminated_at is None


def test_the_first_load_of_a_stored_topic_records_its_creation_time_once() -> None:
    topic = new_topic()
    written = topic_properties.restore(topic, {"other": 1}, now_ms=500)
    assert written == {"other": 1, CREATED_PROPERTY: 500}
    again = new_topic()
    assert topic_properties.restore(again, written, now_ms=900) is None
    assert again.created_ms == 500


def test_a_terminated_position_survives_a_restart_and_a_malformed_one_is_ignored() -> None:
    stored = topic_properties.terminated({CREATED_PROPERTY: 7}, Position(3, 4))
    assert stored == {CREATED_PROPERTY: 7, TERMINATED_PROPERTY: [3, 4]}
    topic = new_topic()
    assert topic_properties.restore(topic, stored, now_ms=9) is None
    assert topic.terminated_at == Position(3, 4)
    damaged = new_topic()
    topic_properties.restore(damaged, {CREATED_PROPERTY: 7, TERMINATED_PROPERTY: [3]}, now_ms=9)
    assert damaged.terminated_at is None


def test_the_compaction_cursor_names_a_new_view_and_puts_the_previous_one_back() -> None:
    topic = new_topic()
    assert compaction_cursor.compaction_subscription(topic) is None
    sub = compaction_cursor.ensure_subscription(topic)
    assert compaction_cursor.ensure_subscription(topic) is sub
    assert compaction_cursor.named_ledger(sub) is None
    assert compaction_cursor.scan_start(sub, has_view=False) == BEFORE_START
    first = compaction_cursor.name_view(sub, 11, Position(0, 5))
    assert compaction_cursor.named_ledger(sub) == 11
    assert compaction_cursor.scan_start(sub, has_view=True) == Position(0, 5)
    compaction_cursor.name_view(sub, 12, Position(0, 9))
    compaction_cursor.put_back(sub, (Position(0, 5), 11))
    assert (sub.cursor.mark_delete, compaction_cursor.named_ledger(sub)) == (Position(0, 5), 11)
    compaction_cursor.put_back(sub, first)
    assert COMPACTED_TOPIC_LEDGER_PROPERTY not in sub.cursor.properties
    assert sub.cursor.mark_delete == BEFORE_START


def test_a_view_name_that_is_not_a_number_names_no_view() -> None:
    sub = compaction_cursor.ensure_subscription(new_topic())
    sub.cursor.properties[COMPACTED_TOPIC_LEDGER_PROPERTY] = "not-a-ledger"
    assert compaction_cursor.named_ledger(sub) is None

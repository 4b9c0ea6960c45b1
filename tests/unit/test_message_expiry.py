"""Message TTL as Pulsar's ``PersistentMessageExpiryMonitor`` applies it: by publish time,
whole entries (a batch together), delayed messages by when they were published; driven by
the broker core's one timer with the clock injected."""

from __future__ import annotations

from core_sinks import RecordingSink
from hypothesis import given
from hypothesis import strategies as st

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.broker.broker_core import BrokerCore
from magnetar.core.names import TopicName
from magnetar.core.policies import AppliedPolicies, Policies, TopicPolicies
from magnetar.core.policies.message_expiry import expire, newest_expired
from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.topics.producer import Producer
from magnetar.core.topics.topic import Topic
from magnetar.storage.interfaces import LedgerConfig
from magnetar.storage.memory_ledger import MemoryLedger
from magnetar.testing.entries import append_entry
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import make_entry

#: ledgers are created long after every publish time in these tests, unless a test says
#: otherwise: only publish times decide
LATE_MS = 10**12


def topic_published_at(times_ms: list[int], per_ledger: int = 3, config: BrokerConfig | None = None,
                       created_ms: int = LATE_MS, **metadata: int) -> Topic:
    config = config or BrokerConfig()
    ledger = MemoryLedger("ttl", config=LedgerConfig(max_entries_per_ledger=per_ledger), clock_ms=lambda: created_ms)
    topic = Topic(TopicName.parse("persistent://public/default/ttl"), ledger, config)
    producer = Producer(0, "p", RecordingSink())  # type: ignore[arg-type]
    for i, published in enumerate(times_ms):
        meta = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=published, **metadata)
        pos = append_entry(topic, producer, i, i, max(1, metadata.get("num_messages_in_batch", 1)),
                            make_entry(meta, b"x"), published)
        topic.on_persisted(pos, published)
    return topic


def linear_newest_expired(topic: Topic, after: Position, cutoff_ms: int) -> Position | None:
    found = None
    pos = topic.next_position(after)
    last = topic.last_readable()
    while last is not None and pos <= last:
        if topic.read_entry_info(pos)[1].publish_time_ms < cutoff_ms:
            found = pos
        pos = topic.next_position(pos)
    return found


@given(st.lists(st.integers(0, 50), min_size=0, max_size=25), st.integers(1, 5), st.integers(0, 1300),
       st.integers(-1, 30))
def test_the_search_finds_what_a_scan_finds_when_publish_times_grow(steps: list[int], per_ledger: int,
                                                                    cutoff_ms: int, after_index: int) -> None:
    times = [sum(steps[:i + 1]) for i in range(len(steps))]
    topic = topic_published_at(times, per_ledger)
    positions = [p for p, _ in topic.ledger.iter_entries(BEFORE_START)]
    after = positions[after_index] if 0 <= after_index < len(positions) else BEFORE_START
    assert newest_expired(topic, after, cutoff_ms) == linear_newest_expired(topic, after, cutoff_ms)


def test_expiry_acknowledges_by_publish_time_and_counts_entries() -> None:
    topic = topic_published_at([1000, 2000, 3000, 4000, 5000])
    sub = topic.create_subscription("s", "Shared", durable=True, mark_delete=BEFORE_START)
    assert expire(sub, ttl_s=2, now_ms=5500) == 3, "published at 1000..3000: more than 2 s before 5500"
    assert sub.cursor.mark_delete == Position(1, 2)
    assert sub.expired.total_msgs == 3 and sub.expired.last_ms == 5500
    assert expire(sub, ttl_s=2, now_ms=5500) == 0
    assert sub.expired.last_ms == 5500


def test_a_batch_expires_whole_and_counts_as_pulsar_counts_its_backlog() -> None:
    """Pulsar counts ``totalMsgExpired`` as the drop in entries in the backlog."""
    topic = topic_published_at([1000, 9000], num_messages_in_batch=10)
    sub = topic.create_subscription("s", "Shared", durable=True, mark_delete=BEFORE_START)
    sub.cursor.ack(Position(1, 0), [0b1100])  # some of its indexes were acknowledged: all go anyway
    assert expire(sub, ttl_s=1, now_ms=5000) == 1
    assert sub.cursor.remaining_ack_set(Position(1, 0)) is None
    assert sub.cursor.mark_delete == Position(1, 0)


def test_a_closed_ledger_expires_by_its_close_time_whatever_its_publish_times_say() -> None:
    """Pulsar's ``checkExpiryByLedgerClosureTime``: a producer clock ten days ahead does not
    keep a ledger that closed long ago; the current ledger is judged by publish time."""
    ahead = 10 * 86_400_000
    topic = topic_published_at([ahead] * 4, per_ledger=3, created_ms=1000)
    sub = topic.create_subscription("s", "Shared", durable=True, mark_delete=BEFORE_START)
    assert expire(sub, ttl_s=1, now_ms=5000) == 3
    assert sub.cursor.mark_delete == Position(1, 2)


def test_a_delayed_message_expires_by_its_publish_time_not_its_delivery_time() -> None:
    topic = topic_published_at([1000], deliver_at_time=10**12)
    sub = topic.create_subscription("s", "Shared", durable=True, mark_delete=BEFORE_START)
    assert expire(sub, ttl_s=1, now_ms=3000) == 1


def test_the_core_timer_expires_every_subscription_at_the_configured_interval() -> None:
    config = BrokerConfig(messageExpiryCheckIntervalInMinutes=0.01)  # 600 ms
    core = BrokerCore(config)
    topic = topic_published_at([1000, 2000], config=config)
    core.topics[str(topic.name)] = topic
    subs = [topic.create_subscription(name, "Shared", durable=True, mark_delete=BEFORE_START) for name in "ab"]
    core.start(0, lambda now: None)
    assert core.expiry_check in core.timers.queue
    assert core.timers.queue.deadline_of(core.expiry_check) == 600
    core.on_timer(600)
    assert all(s.cursor.mark_delete == BEFORE_START for s in subs), "no TTL applies: nothing expires"
    topic.apply_policies(AppliedPolicies.resolve(TopicPolicies(messageTTLInSeconds=1), Policies(), config), 600)
    core.on_timer(1200)
    assert [s.cursor.mark_delete for s in subs] == [BEFORE_START, BEFORE_START], "none older than 1 s at 1.2 s"
    core.on_timer(3001)
    assert [s.cursor.mark_delete for s in subs] == [Position(1, 1), Position(1, 1)]
    assert not core.timers.failures

"""A topic's clients over its life: whether it has any, how long it has been idle, closing
them all when it is released, and termination (no more messages, ever)."""

from __future__ import annotations

from magnetar.core.positions import Position
from magnetar.core.topics.topic import Topic


def has_clients(topic: Topic) -> bool:
    return bool(topic.producers) or bool(topic.waiting_producers) or \
        any(s.consumers for s in topic.subscriptions.values())


def idle_for(topic: Topic, now_ms: int) -> int:
    """How long the topic has been without clients, as seen by the checks so far."""
    if has_clients(topic) or topic.pending_receipts or topic.compacted.state == "RUNNING":
        topic.idle_since_ms = None
        return 0
    if topic.idle_since_ms is None:
        topic.idle_since_ms = now_ms
    return now_ms - topic.idle_since_ms


def close_all_clients(topic: Topic) -> None:
    """Every producer and consumer is told to go (they reconnect, or find the topic gone);
    non-durable subscriptions go with their consumers."""
    for producer in list(topic.producers.values()) + list(topic.waiting_producers):
        producer.sink.close_producer(producer.producer_id)
        producer.closed = True
    topic.producers.clear()
    topic.waiting_producers.clear()
    for sub in topic.subscriptions.values():
        for consumer in list(sub.consumers):
            consumer.sink.close_consumer(consumer.consumer_id)
            sub.remove_consumer(consumer, 0)
    for name in [n for n, s in topic.subscriptions.items() if not s.durable]:
        del topic.subscriptions[name]


def terminate(topic: Topic) -> Position:
    """No more messages: producers are closed (new ones are refused with
    TopicTerminatedError) and consumers learn the end once they received everything.
    The last message id, (-1, -1) for a topic that never had one."""
    if topic.terminated_at is None:
        last = topic.ledger.last_position()
        topic.terminated_at = last if last is not None else Position(-1, -1)
        for producer in list(topic.producers.values()) + list(topic.waiting_producers):
            topic.remove_producer(producer)
            producer.sink.close_producer(producer.producer_id)
    topic.tell_end_of_topic()
    return topic.terminated_at

"""Which producer or consumer of its connection a command is about.

A PRODUCER or SUBSCRIBE may wait for its topic to load (a takeover on a cluster waits for
the store, and maybe for the previous owner's lease). Pulsar's broker meanwhile serves the
connection's other commands; only those about the producer or consumer being made must
come after it. The connection holds back just those: a command is about a producer
(``PRODUCER``, ``SEND``, ``CLOSE_PRODUCER``) or a consumer (``SUBSCRIBE`` and everything
that names a ``consumer_id``), or about neither (lookups, pings, schema queries).
"""

from __future__ import annotations

from magnetar.wire import pulsar_api_pb2 as pb

T = pb.BaseCommand

PRODUCER = 0
CONSUMER = 1

#: the command type, the field of BaseCommand that holds its body, and what it is about
_SUBJECTS: dict[int, tuple[str, int, str]] = {
    T.PRODUCER: ("producer", PRODUCER, "producer_id"),
    T.SEND: ("send", PRODUCER, "producer_id"),
    T.CLOSE_PRODUCER: ("close_producer", PRODUCER, "producer_id"),
    T.SUBSCRIBE: ("subscribe", CONSUMER, "consumer_id"),
    T.FLOW: ("flow", CONSUMER, "consumer_id"),
    T.ACK: ("ack", CONSUMER, "consumer_id"),
    T.CLOSE_CONSUMER: ("close_consumer", CONSUMER, "consumer_id"),
    T.REDELIVER_UNACKNOWLEDGED_MESSAGES: ("redeliverUnacknowledgedMessages", CONSUMER, "consumer_id"),
    T.UNSUBSCRIBE: ("unsubscribe", CONSUMER, "consumer_id"),
    T.SEEK: ("seek", CONSUMER, "consumer_id"),
    T.CONSUMER_STATS: ("consumerStats", CONSUMER, "consumer_id"),
    T.GET_LAST_MESSAGE_ID: ("getLastMessageId", CONSUMER, "consumer_id"),
}


def subject_of(cmd: pb.BaseCommand) -> tuple[int, int] | None:
    """``(PRODUCER, id)`` or ``(CONSUMER, id)`` the command is about; None for neither."""
    found = _SUBJECTS.get(cmd.type)
    if found is None:
        return None
    body, kind, field = found
    return kind, getattr(getattr(cmd, body), field)

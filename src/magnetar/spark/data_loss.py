"""Is a planned range still on the broker? The driver's checks behind ``failOnDataLoss``.

Before a micro-batch is planned, the driver asks the broker (admin REST internal stats)
whether the ledger of each range's start is still stored, and whether each topic
partition the query has read still exists. When not, retention or message TTL deleted
messages the query had not read (or the topic was deleted): with ``failOnDataLoss=true``
(the default, as Spark's Kafka source) the query fails with an error naming the topic,
the missing range and the retention in force; with ``false`` one warning says the same
and the query goes on from the earliest message still stored. Executors check the same
again as they read (:mod:`magnetar.spark.reading`), for what is deleted after planning.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from magnetar.spark.offsets import EARLIEST, MessagePosition
from magnetar.spark.options import ConnectionOptions
from magnetar.spark.rest import AdminClient, MagnetarAdminError, base_topic

log = logging.getLogger("magnetar.spark")


class MagnetarDataLossError(RuntimeError):
    """Messages a query needed are no longer in the topic."""


def retention_in_force(admin: AdminClient, topic: str) -> str:
    """The retention and message TTL that apply to the topic, as the broker reports them."""
    base = base_topic(topic)
    try:
        retention = admin.applied_policy(base, "retention")
        ttl = admin.applied_policy(base, "messageTTL")
        if retention is None or ttl is None:  # a deleted topic whose namespace sets none: the broker's
            config = admin.broker_configuration()
            if retention is None:
                retention = {"retentionTimeInMinutes": config.get("defaultRetentionTimeInMinutes"),
                             "retentionSizeInMB": config.get("defaultRetentionSizeInMB")}
            if ttl is None:
                ttl = config.get("ttlDurationDefaultInSeconds")
    except MagnetarAdminError as exc:
        return f"retention unknown ({exc})"
    text = "retention not reported"
    if isinstance(retention, dict):
        text = (f"retentionTimeInMinutes={retention.get('retentionTimeInMinutes')}, "
                f"retentionSizeInMB={retention.get('retentionSizeInMB')}")
    seconds = int(ttl) if isinstance(ttl, (int, str)) and str(ttl).lstrip("-").isdigit() else 0
    return text + (f", messageTTL={seconds}s" if seconds > 0 else ", no message TTL")


def describe_retention(connection: ConnectionOptions, topic: str) -> str:
    """:func:`retention_in_force` from an executor, which keeps no admin client: never raises."""
    try:
        with AdminClient(connection) as admin:
            return retention_in_force(admin, topic)
    except Exception as exc:  # the report of a loss must not hide it
        return f"retention unknown ({exc})"


def loss_message(topic: str, what: str, retention: str) -> str:
    return f"{topic}: {what}; retention in force: {retention}"


def report_loss(message: str, fail_on_data_loss: bool, going_on: str) -> None:
    """Raise (``failOnDataLoss=true``) or log one warning, with the same facts."""
    if fail_on_data_loss:
        raise MagnetarDataLossError(f"Data loss: {message}. Set failOnDataLoss=false to go on from {going_on}.")
    log.warning("Data loss (failOnDataLoss=false, going on from %s): %s", going_on, message)


@dataclass(frozen=True)
class ReadableStart:
    """Where a range of one topic partition can be read from.

    ``read_from`` is the exclusive start a task opens its Reader at; nothing is stored at or
    before ``nothing_through``, so a range that ends there has nothing to read (a Reader would
    wait for messages retention deleted). Both are the range's start when it is all stored.
    """

    read_from: MessagePosition
    nothing_through: MessagePosition

    @classmethod
    def at(cls, start: MessagePosition) -> ReadableStart:
        return cls(start, start)


class DataLossCheck:
    """The driver's checks; with ``failOnDataLoss=false`` each loss is warned of once."""

    def __init__(self, fail_on_data_loss: bool) -> None:
        self.fail_on_data_loss = fail_on_data_loss
        self._starts: dict[tuple[str, MessagePosition], ReadableStart] = {}
        self._gone: set[tuple[str, MessagePosition]] = set()
        self._behind: set[tuple[str, MessagePosition]] = set()

    def readable_start(self, admin: AdminClient, topic: str, start: MessagePosition) -> ReadableStart:
        """Where to read ``topic`` from: ``start`` when its ledger is still stored; else, once the
        loss is reported, from the first message still stored."""
        key = (topic, start)
        if key not in self._starts:
            self._starts[key] = self._check_start(admin, topic, start)
        return self._starts[key]

    def _check_start(self, admin: AdminClient, topic: str, start: MessagePosition) -> ReadableStart:
        ledgers = admin.ledgers(topic)
        if ledgers is None:
            return ReadableStart.at(start)
        stored = [info for info in ledgers if info.entries > 0]
        last = EARLIEST if stored else admin.last_message_id(topic)
        first_readable = ReadableStart.at(EARLIEST) if stored else ReadableStart(EARLIEST, max(start, last))
        if start.is_earliest:
            return first_readable  # "earliest" is what is stored: no loss
        if any(info.ledger_id == start.ledger_id for info in ledgers):
            return ReadableStart.at(start)
        if stored and stored[0].ledger_id > start.ledger_id:
            what = (f"the messages after {start} up to {stored[0].ledger_id}:0 (not included) are no longer "
                    f"stored: ledger {start.ledger_id} was deleted")
        elif stored:
            what = (f"the query's offset {start} is in ledger {start.ledger_id}, which the topic does not "
                    f"have (it stores ledgers {stored[0].ledger_id} to {stored[-1].ledger_id}): was the "
                    "topic deleted and created again?")
        elif last < start:
            what = (f"the topic ends before the query's offset {start} (it stores no message; "
                    f"{'none was written' if last.is_earliest else f'its last one is {last}'}): was the "
                    "topic deleted and created again?")
        else:
            what = (f"every message after {start} is gone: the topic stores no message any more "
                    f"(its last one was {first_readable.nothing_through})")
        report_loss(loss_message(topic, what, retention_in_force(admin, topic)), self.fail_on_data_loss,
                    "the earliest message still stored")
        return first_readable

    def topic_behind(self, topic: str, start: MessagePosition) -> None:
        """``topic`` ends before ``start``, which the query has read: deleted and created again
        (by a producer or a lookup, as auto-creation allows) between two plannings, or emptied?
        ``start`` is checked again, once, at the next :meth:`readable_start`."""
        key = (topic, start)
        if key not in self._behind:
            self._behind.add(key)
            self._starts.pop(key, None)

    def topic_gone(self, admin: AdminClient, topic: str, last: MessagePosition) -> None:
        """``topic``, read up to ``last``, no longer exists."""
        if (topic, last) in self._gone:
            return  # warned already
        what = (f"the topic no longer exists (deleted?): the messages after {last} that the query has not "
                "read are gone")
        report_loss(loss_message(topic, what, retention_in_force(admin, topic)), self.fail_on_data_loss,
                    "the other topics (this one is read again from its first message if it comes back)")
        self._gone.add((topic, last))


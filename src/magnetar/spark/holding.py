"""Holding what a streaming query has not committed: a durable subscription per topic partition.

Retention deletes what every durable subscription has consumed; Readers hold nothing.
So a streaming query keeps one durable subscription on each topic partition it reads,
as pulsar-spark and pulsar-flink do:

* **name** — the ``subscriptionName`` option, else ``magnetar-spark-<16 hex digits>``
  drawn once when the query starts and carried in every offset it checkpoints
  (:class:`~magnetar.spark.offsets.SourceOffset`), so a restart from the same checkpoint
  finds the same subscription and a new checkpoint gets a new one;
* **created** at the query's start position before the first batch is planned
  (``initialOffset``), and for a partition the query meets later (a new partition, a
  topic that starts matching ``topicsPattern``) at the position it reads it from, before
  the batch that reads it is planned; a restart re-creates one that was removed, at the
  checkpointed offset;
* **moved** (admin REST ``resetcursor``: the committed message becomes the first one the
  subscription has not consumed) only to the end of a batch Spark has committed: in
  ``commit(end)``, and in ``latestOffset(start)``, whose start is the end of the last
  batch in Spark's commit log.

The committed message itself stays in the backlog (one message or batch entry per
partition): its ledger is then kept, so the next batch can prove that nothing after it
was deleted. A batch query holds nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from magnetar.spark.offsets import MessagePosition
from magnetar.spark.rest import AdminClient, MagnetarAdminError

#: Generated subscription names start with this, so ``magnetar admin spark`` and stats show them as the source's.
SUBSCRIPTION_PREFIX = "magnetar-spark-"


def new_subscription_name() -> str:
    return SUBSCRIPTION_PREFIX + uuid.uuid4().hex[:16]


class QueryHold:
    """The subscriptions of one query, and where this driver last put each of them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._ensured: set[str] = set()
        self._at: dict[str, MessagePosition] = {}

    def ensure(self, admin: AdminClient, positions: Mapping[str, MessagePosition]) -> None:
        """Create the subscription at ``positions`` on every partition this driver has not yet
        seen; one that exists already stays where it is (at or before the position)."""
        for tp, position in sorted(positions.items()):
            if tp in self._ensured:
                continue
            try:
                if admin.create_subscription(tp, self.name, position):
                    self._at[tp] = position
            except MagnetarAdminError as exc:
                if exc.status != 404:
                    raise
                continue  # deleted meanwhile: the next planning reports it
            self._ensured.add(tp)

    def move(self, admin: AdminClient, committed: Mapping[str, MessagePosition]) -> None:
        """Move each partition's subscription to its committed position (forward only)."""
        for tp, position in sorted(committed.items()):
            at = self._at.get(tp)
            if at is not None and position <= at:
                continue
            try:
                admin.reset_cursor(tp, self.name, position)
            except MagnetarAdminError as exc:
                if exc.status != 404:
                    raise
                continue  # the topic was deleted: the next planning reports it
            self._at[tp] = position

"""A namespace policy change reaches every loaded topic of the namespace; a topic that
cannot follow it logs why and keeps what it had, and the change still succeeds for the
others (it never fails the admin call that made it).

The broker runs in this process over real files; one topic's stored deduplication
snapshot is damaged, so enabling deduplication cannot recover that topic."""

from __future__ import annotations

import asyncio
import gc
import logging
from pathlib import Path

import pytest

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.dedup.topic_dedup import DEDUP_CURSOR
from magnetar.core.names import TopicName
from magnetar.core.positions import BEFORE_START
from magnetar.core.subscriptions.cursor_record import CursorRecord
from magnetar.server.broker_service import BrokerService

NAMESPACE = "public/default"


async def enable_deduplication_with_one_damaged_topic(broker: BrokerService) -> list[bool]:
    names = [TopicName.parse(f"persistent://{NAMESPACE}/t{i}") for i in range(3)]
    topics = [await broker.load_topic(name, create=True) for name in names]
    damaged = CursorRecord(mark_delete=BEFORE_START, properties={"producer-1": "not a sequence id"})
    broker.metadata.put_cursor(str(names[1]), DEDUP_CURSOR, damaged)
    policies = broker.metadata.get_namespace_policies(NAMESPACE) or {}
    broker.metadata.put_namespace_policies(NAMESPACE, {**policies, "deduplicationEnabled": True})
    broker.policies_changed(NAMESPACE)
    return [topic.dedup is not None for topic in topics]


def test_a_topic_that_cannot_follow_a_policy_change_does_not_stop_the_others(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> list[bool]:
        broker = BrokerService(BrokerConfig(brokerServicePort=0, webServicePort=0), tmp_path / "data")
        broker.start(asyncio.get_running_loop())
        try:
            return await enable_deduplication_with_one_damaged_topic(broker)
        finally:
            await broker.close()

    with caplog.at_level(logging.ERROR, logger="magnetar.broker"):
        following = asyncio.run(run())
    gc.collect()
    assert following == [True, False, True]
    assert any("persistent://public/default/t1" in record.getMessage() for record in caplog.records)

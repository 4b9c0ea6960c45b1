"""``managedLedgerCacheSizeMB``: the tail caches of all topics together stay within it, and
what left the cache is read from the files, every message intact."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pulsar
import pytest
from e2e_helpers import new_topic, quiet_logger, read_topic

from magnetar.testing.broker_process import BrokerProcess

TOPICS = 8
MESSAGES = 20
SIZE = 20_000  # 8 topics x 20 messages x 20 KB: about 3 MB, three times the budget


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("entry-cache") / "data"
    proc = BrokerProcess(data, config={"managedLedgerCacheSizeMB": "1"}).start()
    yield proc
    proc.kill()


def cache_used_bytes(broker: BrokerProcess) -> float:
    text = httpx.get(f"{broker.web_url}/metrics", timeout=30).text
    found = re.search(r"^pulsar_ml_cache_used_size\{[^}]*\} (\S+)$", text, re.MULTILINE)
    assert found, "pulsar_ml_cache_used_size is exposed"
    return float(found.group(1))


def test_topics_share_one_cache_budget_and_lose_nothing(broker: BrokerProcess) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    try:
        topics = [new_topic("cached") for _ in range(TOPICS)]
        for index, topic in enumerate(topics):
            producer = client.create_producer(topic, batching_enabled=False)
            for n in range(MESSAGES):
                producer.send(f"{index}:{n}:".encode().ljust(SIZE, b"."))
            producer.close()
        used = cache_used_bytes(broker)
        assert 0 < used <= 1024 * 1024, used
        for index, topic in enumerate(topics):
            assert read_topic(client, topic) == [f"{index}:{n}:".encode().ljust(SIZE, b".") for n in range(MESSAGES)]
    finally:
        client.close()


def test_memory_does_not_follow_what_was_published(broker: BrokerProcess) -> None:
    """100 MB published into 50 topics; neither the caches nor anything else keeps it."""
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30, logger=quiet_logger())
    try:
        before = broker.rss_bytes()
        payload = b"m" * 100_000
        for _ in range(50):
            producer = client.create_producer(new_topic("volume"), batching_enabled=False)
            for _ in range(20):
                producer.send_async(payload, None)
            producer.flush()
            producer.close()
        grown = broker.rss_bytes() - before
        assert grown < 50 * 1024 * 1024, f"RSS grew {grown / 1e6:.0f} MB for 100 MB published"
    finally:
        client.close()

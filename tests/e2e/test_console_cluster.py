"""The console's overview on a broker of a two-broker cluster (real ZooKeeper): both brokers,
each with the bundles its own admin API says it owns, its load report and a link to its
console; a broker that does not answer is listed with the reason."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pulsar
import pytest
from cluster_helpers import CLUSTER, Cluster, one_topic_per_bundle, start_cluster
from console_helpers import ConsolePage, chromium_context
from e2e_helpers import quiet_logger

from magnetar.testing.zookeeper_process import ZooKeeperProcess


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = start_cluster(zookeeper, tmp_path_factory.mktemp("console-cluster") / "data")
    yield running
    running.stop()


def owned(cluster: Cluster, broker_id: str) -> list[str]:
    """What a broker's admin API says it owns, asked of that broker."""
    web_url = cluster.by_id(broker_id).web_url
    answer = httpx.get(f"{web_url}/admin/v2/brokers/{CLUSTER}/{broker_id}/ownedNamespaces", timeout=10)
    answer.raise_for_status()
    return sorted(answer.json())


def test_the_overview_lists_each_broker_with_the_bundles_it_owns(cluster: Cluster) -> None:
    a, b = cluster.brokers
    client = pulsar.Client(a.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    try:
        for topic in one_topic_per_bundle():
            client.create_producer(topic).send(b"placed")
    finally:
        client.close()
    ids = sorted(cluster.broker_id(broker) for broker in cluster.brokers)
    expected = {broker_id: owned(cluster, broker_id) for broker_id in ids}
    assert all(expected.values()), expected  # fresh bundles are spread over both

    view = httpx.get(f"{a.web_url}/admin/v2/broker-stats/brokers", timeout=10).json()
    assert view["clustered"] and [e["brokerId"] for e in view["brokers"]] == ids
    assert {e["brokerId"]: e["ownedBundles"] for e in view["brokers"]} == expected
    assert all(e["loadReport"]["clusterName"] == CLUSTER and e["error"] is None for e in view["brokers"])

    with chromium_context() as context:
        console = ConsolePage(context, a.web_url)
        page: Any = console.open("/overview")
        page.wait_for_selector("#broker-table")
        for broker_id in ids:
            row = page.locator(f"#broker-table tr[data-broker='{broker_id}']")
            bundles = row.locator("[data-bundle]").all_inner_texts()
            assert sorted(bundles) == expected[broker_id]
            link = row.locator("a").first
            assert link.get_attribute("href") == f"{cluster.by_id(broker_id).web_url}/console/"
            assert link.inner_text() == broker_id
            assert row.locator("td[data-field=numTopics]").inner_text() != "-"
        assert page.locator(f"#broker-table tr[data-broker='{cluster.broker_id(a)}']").inner_text()\
            .count("this broker") == 1
        console.screenshot("overview-cluster.png")
        assert console.errors == []

    # a broker that does not answer (killed, its registration not yet expired) is listed with the reason
    b.kill()
    view = httpx.get(f"{a.web_url}/admin/v2/broker-stats/brokers", timeout=30).json()
    gone = next(e for e in view["brokers"] if e["brokerId"] == cluster.broker_id(b))
    assert gone["error"] and gone["ownedBundles"] is None and gone["loadReport"] is None
    assert next(e for e in view["brokers"] if e["self"])["ownedBundles"] == expected[cluster.broker_id(a)]

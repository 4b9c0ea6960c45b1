"""The load manager's leader calls the other brokers' admin API with the broker's own
credentials (Pulsar's ``brokerClientAuthenticationPlugin`` / ``...Parameters``): in a
cluster with token authentication and authorization on, it splits a bundle another broker
owns."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pulsar
import pytest
from cluster_helpers import CLUSTER, Cluster, start_cluster
from e2e_helpers import quiet_logger, wait_until
from security_helpers import SECRET_DATA_URL, TOKEN_PROVIDER, token

from magnetar.core.cluster.bundles_data import bundles_of
from magnetar.core.cluster.namespace_bundles import NamespaceBundles
from magnetar.storage.zookeeper.store import ZooKeeperMetadataStore
from magnetar.testing.zookeeper_process import ZooKeeperProcess

ADMIN = token("admin")
SETTINGS = {
    "authenticationEnabled": "true",
    "authenticationProviders": TOKEN_PROVIDER,
    "tokenSecretKey": SECRET_DATA_URL,
    "authorizationEnabled": "true",
    "superUserRoles": "admin,broker",
    "brokerClientAuthenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
    "brokerClientAuthenticationParameters": "token:" + token("broker"),
    "loadBalancerReportUpdateMinIntervalMillis": "500",
    "loadBalancerSheddingEnabled": "false",
    "loadBalancerSplitIntervalMinutes": "0.02",
    "loadBalancerNamespaceBundleMaxTopics": "1",
    "loadBalancerAutoUnloadSplitBundlesEnabled": "false",
}


@pytest.fixture
def cluster(zookeeper: ZooKeeperProcess, tmp_path: Path) -> Iterator[Cluster]:
    running = start_cluster(zookeeper, tmp_path / "data", 2, SETTINGS)
    yield running
    running.stop()


def admin(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=30, follow_redirects=True,
                        headers={"Authorization": f"Bearer {ADMIN}"})


def test_the_leader_splits_another_brokers_bundle_with_the_brokers_credentials(cluster: Cluster) -> None:
    first = cluster.brokers[0]
    namespace = f"auth-{uuid.uuid4().hex[:8]}/ns"
    with admin(first.web_url) as http:
        assert http.put(f"/admin/v2/tenants/{namespace.split('/')[0]}",
                        json={"allowedClusters": [CLUSTER]}).status_code == 204
        assert http.put(f"/admin/v2/namespaces/{namespace}", json={"bundles": {"numBundles": 4}}).status_code == 204
        leader = wait_until(lambda: (r := http.get("/admin/v2/brokers/leaderBroker")).status_code == 200
                            and r.json()["brokerId"], 20, "a leader")
    store = ZooKeeperMetadataStore(cluster.url)
    client = pulsar.Client(first.service_url, authentication=pulsar.AuthenticationToken(ADMIN),
                           operation_timeout_seconds=30, logger=quiet_logger())
    try:
        before = bundles_of(namespace, store.get_namespace_policies(namespace))
        for bundle in before.bundles:  # two topics in each bundle: each is over the limit of 1
            topics = [t for t in (f"persistent://{namespace}/t{i}" for i in range(200))
                      if before.find_bundle(t) == bundle][:2]
            for topic in topics:
                client.create_producer(topic).send(b"x")
        owners = {b: store.get_bundle_owner(namespace, b) for b in (u.range_name for u in before.bundles)}
        elsewhere = {b for b, node in owners.items() if node is not None and node.data["brokerId"] != leader}
        assert elsewhere, f"every bundle of {namespace} went to the leader {leader}: {owners}"

        def split_elsewhere() -> bool:
            now: NamespaceBundles = bundles_of(namespace, store.get_namespace_policies(namespace))
            return not elsewhere & {b.range_name for b in now.bundles}
        wait_until(split_elsewhere, 60, f"the split of {sorted(elsewhere)}, owned by another broker than the leader")
        log = "\n".join(b.log_path.read_text(errors="replace") for b in cluster.brokers)
        assert "answered 401" not in log and "answered 403" not in log
    finally:
        client.close()
        store.close()

"""Which admin paths a cluster's broker serves only as the topic's owner (else 307)."""

from __future__ import annotations

import pytest

from magnetar.admin.cluster_redirect import topic_of_path


@pytest.mark.parametrize(("path", "topic"), [
    ("/admin/v2/persistent/public/default/t/stats", "persistent://public/default/t"),
    ("/admin/v2/persistent/public/default/t", "persistent://public/default/t"),
    ("/admin/v2/non-persistent/tn/ns/t-partition-2/subscriptions", "non-persistent://tn/ns/t-partition-2"),
    ("/admin/v2/persistent/public/default/t/subscription/s/skip_all", "persistent://public/default/t"),
    ("/lookup/v2/topic/persistent/public/default/t", "persistent://public/default/t"),
])
def test_a_topic_operation_names_its_topic(path: str, topic: str) -> None:
    name = topic_of_path(path)
    assert name is not None and str(name) == topic


@pytest.mark.parametrize("path", [
    "/admin/v2/persistent/public/default",  # the namespace's topics: any broker
    "/admin/v2/persistent/public/default/t/partitions",  # partitioned metadata: any broker
    "/admin/v2/persistent/public/default/t/partitioned-stats",
    "/admin/v2/namespaces/public/default",
    "/admin/v2/brokers/test-cluster",
    "/admin/v2/clusters",
    "/metrics",
    "/admin/v2/other/public/default/t/stats",  # not a domain
    "",
])
def test_other_paths_are_served_by_any_broker(path: str) -> None:
    assert topic_of_path(path) is None

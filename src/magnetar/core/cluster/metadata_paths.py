"""Where the cluster's records live in the metadata store: Pulsar's layout, so an operator
who knows Pulsar's ZooKeeper tree finds them where they expect."""

from __future__ import annotations

from magnetar.core.cluster.namespace_bundles import NamespaceBundle
from magnetar.core.names import TopicName

BROKERS_ROOT = "/loadbalance/brokers"
NAMESPACE_OWNERSHIP_ROOT = "/namespace"
MANAGED_LEDGERS_ROOT = "/managed-ledgers"


def bundle_ownership_path(bundle: NamespaceBundle) -> str:
    """The ephemeral node of a bundle's owner: ``/namespace/<tenant>/<ns>/<range>``."""
    return f"{NAMESPACE_OWNERSHIP_ROOT}/{bundle.namespace}/{bundle.range_name}"


def broker_registration_path(broker_id: str) -> str:
    """A broker's ephemeral registration: ``/loadbalance/brokers/<host:port>``."""
    return f"{BROKERS_ROOT}/{broker_id}"


def managed_ledger_path(topic: TopicName) -> str:
    """A topic's ledger list: ``/managed-ledgers/<tenant>/<ns>/persistent/<topic>``."""
    return f"{MANAGED_LEDGERS_ROOT}/{topic.tenant}/{topic.namespace}/{topic.domain}/{topic.local_name}"

"""``magnetar initialize-cluster-metadata``: a cluster's first records in its metadata store.

Pulsar's ``PulsarClusterMetadataSetup`` with what a Magnetar cluster needs of it: the
cluster's ``ClusterData`` (its service URLs), the ``public`` tenant allowed on the cluster,
and the ``public/default`` namespace. Running it again keeps what is there, so it is safe
to run from every broker's start-up script.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from magnetar.core.metadata.records import AlreadyExists
from magnetar.core.metadata.store_url import parse_metadata_store_url
from magnetar.core.names import DEFAULT_NAMESPACE, DEFAULT_TENANT
from magnetar.storage.zookeeper.store import ZooKeeperMetadataStore

_URL_SCHEMES = {"webServiceUrl": ("http://",), "brokerServiceUrl": ("pulsar://",),
                "webServiceUrlTls": ("https://",), "brokerServiceUrlTls": ("pulsar+ssl://",)}


@dataclass(frozen=True)
class ClusterInit:
    cluster: str
    metadata_store: str
    web_service_url: str | None = None
    broker_service_url: str | None = None
    web_service_url_tls: str | None = None
    broker_service_url_tls: str | None = None

    def cluster_data(self) -> dict[str, str]:
        """Pulsar's ``ClusterData`` JSON; a URL of the wrong scheme is refused by name."""
        data = {"serviceUrl": self.web_service_url, "brokerServiceUrl": self.broker_service_url,
                "serviceUrlTls": self.web_service_url_tls, "brokerServiceUrlTls": self.broker_service_url_tls}
        for key, value in data.items():
            field = "webServiceUrl" if key == "serviceUrl" else "webServiceUrlTls" if key == "serviceUrlTls" else key
            if value is not None and not value.startswith(_URL_SCHEMES[field]):
                raise ValueError(f"{value!r} is not a {field}: it must start with {_URL_SCHEMES[field][0]}")
        return {key: value for key, value in data.items() if value is not None}


def check_cluster_name(name: str) -> None:
    if not name or "/" in name:
        raise ValueError(f"--cluster {name!r}: a cluster name is one non-empty path segment")


def initialize(init: ClusterInit) -> list[str]:
    """Create what is missing; one line per record, saying whether it was created or kept."""
    check_cluster_name(init.cluster)
    url = parse_metadata_store_url(init.metadata_store, key="--metadata-store")
    data = init.cluster_data()
    namespace = f"{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}"
    with ZooKeeperMetadataStore(url) as store:
        return [
            _create(f"cluster {init.cluster}", lambda: store.create_cluster(init.cluster, data)),
            _create(f"tenant {DEFAULT_TENANT}", lambda: store.create_tenant(
                DEFAULT_TENANT, {"adminRoles": [], "allowedClusters": [init.cluster]})),
            _create(f"namespace {namespace}", lambda: store.create_namespace(namespace, {})),
        ]


def _create(what: str, create: Callable[[], None]) -> str:
    try:
        create()
    except AlreadyExists:
        return f"{what}: already there, kept"
    return f"{what}: created"

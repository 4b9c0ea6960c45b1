"""Where each record lives in ZooKeeper: Pulsar's layout where Pulsar has one.

- ``/admin/clusters/<cluster>``                                ``ClusterData`` JSON
- ``/admin/policies/<tenant>``                                 ``TenantInfo`` JSON
- ``/admin/policies/<tenant>/<ns>``                            ``Policies`` JSON
- ``/admin/partitioned-topics/<tenant>/<ns>/<domain>/<topic>``  ``PartitionedTopicMetadata`` JSON
- ``/managed-ledgers/<tenant>/<ns>/<domain>/<topic>``           the topic's managed ledger
- ``/managed-ledgers/<tenant>/<ns>/<domain>/<topic>/<cursor>``  its cursor's ``ManagedCursorInfo``
- ``/schemas/<tenant>/<ns>/<topic>/<version>``                  one schema version
- ``/loadbalance/brokers/<host:port>``                          a live broker and its load report (ephemeral)
- ``/loadbalance/leader``                                       the load manager's leader (ephemeral)
- ``/loadbalance/bundle-data/<tenant>/<ns>/<range>``            a bundle's ``BundleData`` (the leader's)
- ``/namespace/<tenant>/<ns>/<0xXXXXXXXX_0xXXXXXXXX>``          a bundle's owner (ephemeral)

Pulsar keeps topic policies in a system topic, not in the metadata store; here they are
``/admin/topic-policies/<tenant>/<ns>/<domain>/<topic>`` beside the other policies. The
ledger id counter is ``/magnetar/ledger-ids`` and other keys ``/magnetar/kv/<key>``.
Topic, cursor and key names are encoded as Pulsar's ``Codec.encode`` (URL encoding).
"""

from __future__ import annotations

from urllib.parse import quote_plus, unquote_plus

from magnetar.storage.metadata_checks import split_topic

CLUSTERS = "/admin/clusters"
POLICIES = "/admin/policies"
PARTITIONED_TOPICS = "/admin/partitioned-topics"
TOPIC_POLICIES = "/admin/topic-policies"
MANAGED_LEDGERS = "/managed-ledgers"
SCHEMAS = "/schemas"
BROKERS = "/loadbalance/brokers"
#: a leaving broker's mark, of its session: it unregistered but serves until its bundles go
LEAVING = "/magnetar/leaving"
LEADER = "/loadbalance/leader"
BUNDLE_DATA = "/loadbalance/bundle-data"
OWNERSHIP = "/namespace"
LEDGER_IDS = "/magnetar/ledger-ids"
KEYS = "/magnetar/kv"
DOMAINS = ("persistent", "non-persistent")


def encode(name: str) -> str:
    """Java's ``URLEncoder.encode`` (Pulsar's ``Codec.encode``): letters, digits and ``.-*_`` stay."""
    return quote_plus(name, safe="*").replace("~", "%7E")


def decode(name: str) -> str:
    return unquote_plus(name)


def topic_path(root: str, topic: str) -> str:
    """``root/<tenant>/<ns>/<domain>/<encoded local name>`` for a full topic name."""
    domain, tenant, namespace, local = split_topic(topic)
    return f"{root}/{tenant}/{namespace}/{domain}/{encode(local)}"


def topic_of(domain: str, namespace: str, encoded: str) -> str:
    """The full topic name of a node under ``<root>/<namespace>/<domain>``."""
    return f"{domain}://{namespace}/{decode(encoded)}"


def schema_path(topic: str) -> str:
    """Pulsar's schema id: ``tenant/ns/topic``, shared by both domains."""
    _, tenant, namespace, local = split_topic(topic)
    return f"{SCHEMAS}/{tenant}/{namespace}/{encode(local)}"


def is_listing(path: str) -> bool:
    """Whether a change of the data at ``path`` may change a list of stored topics: a
    partitioned topic's node (its partition count) or a managed ledger's (its data says
    whether the topic was created); not a cursor's, however often those are written.
    Nodes created or deleted change their parent's children, which is counted apart."""
    if path.startswith(MANAGED_LEDGERS + "/"):
        return path.count("/") == 5
    return path.startswith(PARTITIONED_TOPICS + "/") and path.count("/") == 6


def is_policy(path: str) -> bool:
    """Whether a write at ``path`` changes policies: a namespace's or a topic's."""
    if path.startswith(TOPIC_POLICIES + "/"):
        return True
    return path.startswith(POLICIES + "/") and path.count("/") == 4

"""Topic and namespace names as Pulsar spells them.

``persistent://tenant/namespace/topic``; a short name ``t`` means
``persistent://public/default/t``; ``tenant/ns/t`` gets the persistent domain.
Partitions are topics named ``<topic>-partition-<i>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from magnetar.core.errors import InvalidTopicName

PARTITION_SUFFIX = "-partition-"
DOMAINS = ("persistent", "non-persistent")
DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"

# Pulsar's NamedEntity rule for tenants, namespaces and clusters.
_NAMED_ENTITY = re.compile(r"^[-=:.\w]+$")
_PARTITION = re.compile(r"^(.*)-partition-(\d+)$")


def check_named_entity(kind: str, name: str) -> str:
    """Tenants, namespaces and clusters: letters, digits and ``-=:._`` only."""
    if not name or not _NAMED_ENTITY.match(name):
        raise InvalidTopicName(f"Invalid {kind} name '{name}': use letters, digits and -=:._ only")
    return name


@dataclass(frozen=True)
class TopicName:
    domain: str
    tenant: str
    namespace: str
    local_name: str

    @property
    def namespace_name(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    @property
    def persistent(self) -> bool:
        return self.domain == "persistent"

    @property
    def partition_index(self) -> int:
        """-1 for a topic that is not a partition, else its index."""
        match = _PARTITION.match(self.local_name)
        return int(match.group(2)) if match else -1

    @property
    def partitioned_topic(self) -> TopicName:
        """The parent partitioned topic of a partition; itself otherwise."""
        match = _PARTITION.match(self.local_name)
        return TopicName(self.domain, self.tenant, self.namespace, match.group(1)) if match else self

    def partition(self, index: int) -> TopicName:
        return TopicName(self.domain, self.tenant, self.namespace, f"{self.local_name}{PARTITION_SUFFIX}{index}")

    def __str__(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local_name}"

    @classmethod
    def parse(cls, text: str) -> TopicName:
        domain, sep, rest = text.partition("://")
        if not sep:
            domain, rest = "persistent", text
            if "/" not in rest:
                rest = f"{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}/{rest}"
        if domain not in DOMAINS:
            raise InvalidTopicName(f"Invalid topic name '{text}': domain must be persistent or non-persistent")
        parts = rest.split("/", 2)
        if len(parts) != 3 or not all(parts):
            raise InvalidTopicName(
                f"Invalid topic name '{text}': expected <domain>://<tenant>/<namespace>/<topic>"
            )
        tenant, namespace, local = parts
        check_named_entity("tenant", tenant)
        check_named_entity("namespace", namespace)
        if "/" in local or any(ch in local for ch in "\x00\n\r") or local.strip() != local:
            raise InvalidTopicName(f"Invalid topic name '{text}': illegal characters in the local name")
        return cls(domain, tenant, namespace, local)

"""What the binary protocol's commands need of the broker around them.

The rules they ask (policies, access, topic records, schemas) are core's own objects;
the rest is what only the shell can do: say when metadata or a topic's cursors are
durable (a handle the connection waits on before it answers), give the time, load a
topic on the admin path, and keep its subscriptions' cursors and throttles in step.
The server's broker service implements it, and so can a simulation.
"""

from __future__ import annotations

from typing import Any, Protocol

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.broker.listeners import BrokerAddresses
from magnetar.core.names import TopicName
from magnetar.core.policies.policy_cache import PolicyCache
from magnetar.core.schemas.topic_schemas import SchemaHistory, TopicSchemas
from magnetar.core.security.access_rules import AccessRules
from magnetar.core.topics.topic import Topic
from magnetar.core.topics.topic_records import TopicRecords


class CommandShell(Protocol):
    config: BrokerConfig
    #: false while the broker starts or stops: new producers and consumers are refused
    ready: bool
    policies: PolicyCache
    access: AccessRules
    records: TopicRecords
    topic_schemas: TopicSchemas
    addresses: BrokerAddresses

    @property
    def schemas(self) -> SchemaHistory: ...

    @property
    def metadata_changes(self) -> int:
        """Metadata writes so far: an answer that follows none needs no durability wait."""

    def metadata_durable(self) -> Any:
        """A handle done once every metadata write made so far is durable."""

    def cursors_durable(self, topic: Topic) -> Any:
        """Write the topic's changed cursors; a handle done once they are durable."""

    def now_ms(self) -> int: ...

    def get_topic(self, name: TopicName, create: bool) -> Topic: ...

    def generate_producer_name(self) -> str: ...

    def ensure_subscription(self, topic: Topic, name: str) -> None: ...

    def delete_subscription(self, topic: Topic, name: str) -> None: ...

    def apply_dispatch_rates(self, topic: Topic) -> None: ...

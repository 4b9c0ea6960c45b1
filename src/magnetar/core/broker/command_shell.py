"""What the binary protocol's commands need of the broker around them.

The rules they ask (policies, access, topic records, schemas) are core's own objects,
reached through the facade the admin REST API reaches as well
(:mod:`magnetar.core.broker.broker_facade`); the rest is what only the shell can do:
say when metadata or a topic's cursors are durable (a handle the connection waits on
before it answers), give the time, load a topic on the admin path, and keep its
subscriptions' cursors and throttles in step.
The server's broker service implements it, and so can a simulation.
"""

from __future__ import annotations

from typing import Any, Protocol

from magnetar.core.broker.broker_facade import BrokerFacade
from magnetar.core.topics.topic import Topic


class CommandShell(BrokerFacade, Protocol):
    """The shared facade (rules, durability, the clock, loading a topic), and what only
    the commands ask: a topic's cursors durable, producer names, subscriptions and
    throttles kept in step."""

    def cursors_durable(self, topic: Topic) -> Any:
        """Write the topic's changed cursors; a handle done once they are durable."""

    def generate_producer_name(self) -> str: ...

    def ensure_subscription(self, topic: Topic, name: str) -> None: ...

    def apply_dispatch_rates(self, topic: Topic) -> None: ...

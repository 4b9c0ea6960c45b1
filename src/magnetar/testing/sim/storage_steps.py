"""The schedule's storage steps: appends flushed, synced or failed, completions delivered in
any order the real store allows, cursor writes made or failed. Each fault is injected where the
real shell would meet it, and the checker learns what the ledger holds after a write failed."""

from __future__ import annotations

from typing import Protocol

from magnetar.core.topics.topic import Topic
from magnetar.testing.sim.broker_gateway import NAMESPACE, BrokerGateway
from magnetar.testing.sim.broker_storage import SimLedger


class StorageWorld(Protocol):
    """What the storage steps use of the world."""

    gateway: BrokerGateway
    take_backs: int
    unloads: int

    def rescan(self, topic: Topic) -> None: ...


class StorageSteps:
    VERBS = frozenset({"flush", "fail_append", "fail_flush", "sync", "fail_sync", "complete", "cursors",
                       "fail_cursors"})

    def __init__(self, world: StorageWorld) -> None:
        self.world = world

    # -- storage and time ---------------------------------------------------------------
    def ledger(self, topic: str) -> SimLedger | None:
        loaded = self.world.gateway.loaded_topic(NAMESPACE + topic)
        if loaded is None:
            return None
        assert isinstance(loaded.ledger, SimLedger)
        return loaded.ledger

    def flush(self, topic: str) -> bool:
        ledger = self.ledger(topic)
        if ledger is None or ledger.unflushed_from is None:
            return False
        if self.world.gateway.flush(NAMESPACE + topic) is not None:
            self.storage_changed(topic)
        return True

    def storage_changed(self, topic: str) -> None:
        """A write failed and took entries back: the checker learns what the ledger holds now."""
        self.world.take_backs += 1
        loaded = self.world.gateway.loaded_topic(NAMESPACE + topic)
        assert loaded is not None
        self.world.rescan(loaded)

    def fail_append(self, topic: str) -> bool:
        ledger = self.ledger(topic)
        if ledger is None or ledger.unflushed_from is None:
            return False
        ledger.fail_next_append = True
        return True

    def fail_flush(self, topic: str) -> bool:
        ledger = self.ledger(topic)
        if ledger is None or ledger.unflushed_from is None:
            return False
        ledger.fail_next_flush = True
        return self.flush(topic)

    def sync(self, topic: str) -> bool:
        ledger = self.ledger(topic)
        if ledger is None or not ledger.written_unsynced():
            return False
        self.world.gateway.sync(NAMESPACE + topic, keep_written=False)
        return True

    def fail_sync(self, topic: str, keep: str) -> bool:
        ledger = self.ledger(topic)
        if ledger is None:
            return False
        ledger.fail_next_sync = True
        self.world.unloads += 1
        self.world.gateway.sync(NAMESPACE + topic, keep_written=keep == "1")
        return True

    def complete(self, topic: str) -> bool:
        return self.world.gateway.complete(NAMESPACE + topic)

    def cursors(self) -> bool:
        self.world.gateway.persist()
        return True

    def fail_cursors(self) -> bool:
        self.world.gateway.persist(fail=True)
        return True

"""What the cluster decisions need of a metadata store with sessions
(``magnetar.core.cluster.metadata_store.MetadataStoreExtended``), as one suite that every
implementation runs: today the simulation's store; a ZooKeeper store adds itself to
``Harness`` implementations below."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import pytest

from magnetar.core.cluster.metadata_store import (
    NOT_EXISTS,
    AlreadyExists,
    BadVersion,
    MetadataStoreExtended,
    NotFound,
    Notification,
    NotificationType,
    SessionEvent,
    SessionExpired,
    SessionNotification,
)
from magnetar.testing.sim.cluster_store import SimMetadataStore

SESSION_TIMEOUT_MS = 1000


class Harness(Protocol):
    def connect(self, name: str) -> MetadataStoreExtended: ...

    def expire(self, client: MetadataStoreExtended) -> None:
        """Make the store expire the client's session (it stays silent past the timeout)."""


class SimHarness:
    def __init__(self) -> None:
        self.store = SimMetadataStore(SESSION_TIMEOUT_MS)

    def connect(self, name: str) -> MetadataStoreExtended:
        client = self.store.client(name)
        client.connect()
        return client

    def expire(self, client: MetadataStoreExtended) -> None:
        for _ in range(3):
            for other in self.store.clients.values():
                if other is not client and other.current_session_id() is not None:
                    other.heartbeat()  # the others keep talking
            self.store.advance(self.store.now_ms + SESSION_TIMEOUT_MS // 2 + 1)


@pytest.fixture(params=["sim"])
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    yield SimHarness()


def test_versions_and_compare_and_set(harness: Harness) -> None:
    store = harness.connect("b0")
    assert store.get("/a") is None
    assert store.put("/a", b"1", NOT_EXISTS).version == 0
    with pytest.raises(AlreadyExists):
        store.put("/a", b"x", NOT_EXISTS)
    assert store.put("/a", b"2", 0).version == 1
    with pytest.raises(BadVersion):
        store.put("/a", b"3", 0)
    assert store.put("/a", b"4", None).version == 2
    got = store.get("/a")
    assert got is not None and (got.value, got.stat.version, got.stat.ephemeral) == (b"4", 2, False)
    with pytest.raises(NotFound):
        store.put("/missing", b"", 3)
    with pytest.raises(BadVersion):
        store.delete("/a", 0)
    store.delete("/a", 2)
    with pytest.raises(NotFound):
        store.delete("/a", None)


def test_ephemeral_nodes_name_their_session_and_go_with_it(harness: Harness) -> None:
    b0, b1 = harness.connect("b0"), harness.connect("b1")
    stat = b0.create_ephemeral("/namespace/public/default/0x00000000_0x40000000", b"b0")
    assert stat.session_id == b0.current_session_id() and stat.ephemeral
    with pytest.raises(AlreadyExists) as exists:
        b1.create_ephemeral("/namespace/public/default/0x00000000_0x40000000", b"b1")
    assert exists.value.existing is not None and exists.value.existing.value == b"b0"
    assert exists.value.existing.stat.session_id == b0.current_session_id()
    assert b1.get_children("/namespace/public/default") == ["0x00000000_0x40000000"]
    harness.expire(b0)
    assert b1.get("/namespace/public/default/0x00000000_0x40000000") is None
    assert b1.create_ephemeral("/namespace/public/default/0x00000000_0x40000000", b"b1").session_id \
        == b1.current_session_id()


def test_an_expired_session_is_told_in_order_and_refused(harness: Harness) -> None:
    b0, b1 = harness.connect("b0"), harness.connect("b1")
    seen: list[object] = []
    b0.register_listener(seen.append)
    session = b0.current_session_id()
    assert session is not None and b0.heartbeat() == session
    b0.create_ephemeral("/loadbalance/brokers/b0", b"")
    harness.expire(b0)
    assert seen[-2:] == [Notification(NotificationType.DELETED, "/loadbalance/brokers/b0"),
                         SessionNotification(SessionEvent.SESSION_LOST, session)]
    assert b0.current_session_id() is None
    with pytest.raises(SessionExpired):
        b0.heartbeat()
    assert b1.heartbeat() == b1.current_session_id()

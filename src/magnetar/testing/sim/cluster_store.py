"""The simulation's metadata store: versioned nodes, sessions that expire when their client
is silent for the session timeout, ephemeral nodes that go with their session, and
notifications queued to each client in the order the store made them (ZooKeeper's order).

One :class:`SimMetadataStore` is the ensemble; each broker talks to it through its own
:class:`SimStoreClient`, which implements ``MetadataStoreExtended`` of
``magnetar.core.cluster.metadata_store`` for the calls the world delivers. Time is the
world's (the store's own clock); a restart makes the store unreachable for a while and then
gives every live session a fresh timeout, as a ZooKeeper leader does after an election.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from magnetar.core.cluster.metadata_store import (
    NOT_EXISTS,
    AlreadyExists,
    BadVersion,
    GetResult,
    NotFound,
    Notification,
    NotificationType,
    SessionEvent,
    SessionExpired,
    SessionNotification,
    Stat,
    StoreUnavailable,
)

if TYPE_CHECKING:
    from magnetar.core.cluster.metadata_store import MetadataStoreExtended

StoreMessage = SessionNotification | Notification
Listener = Callable[[StoreMessage], None]


@dataclass
class _Node:
    value: bytes
    version: int
    session_id: int | None


@dataclass
class _Session:
    client: str
    last_heard_ms: int
    alive: bool = True


class SimMetadataStore:
    def __init__(self, session_timeout_ms: int) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.now_ms = 0
        self.available = True
        self.nodes: dict[str, _Node] = {}
        self.sessions: dict[int, _Session] = {}
        self.clients: dict[str, SimStoreClient] = {}
        self._next_session = 0x100

    def client(self, name: str) -> SimStoreClient:
        self.clients[name] = SimStoreClient(self, name)
        return self.clients[name]

    def advance(self, now_ms: int) -> None:
        """Time passes at the store: sessions silent for the timeout expire."""
        self.now_ms = now_ms
        if not self.available:
            return
        for session_id, session in sorted(self.sessions.items()):
            if session.alive and now_ms - session.last_heard_ms > self.session_timeout_ms:
                self._expire(session_id)

    def restart(self) -> None:
        self.available = False

    def come_back(self, sessions_lost: bool = False) -> None:
        """After a restart every live session starts a fresh timeout, as ZooKeeper's do; with
        ``sessions_lost`` the store came back without them (restored from an older backup,
        or a new ensemble), so every session and ephemeral node is gone at once."""
        self.available = True
        for session_id, session in sorted(self.sessions.items()):
            session.last_heard_ms = self.now_ms
            if sessions_lost and session.alive:
                self._expire(session_id)

    def _expire(self, session_id: int) -> None:
        session = self.sessions[session_id]
        session.alive = False
        for path in sorted(p for p, n in self.nodes.items() if n.session_id == session_id):
            self.remove(path)
        self.clients[session.client].notify(SessionNotification(SessionEvent.SESSION_LOST, session_id))

    def remove(self, path: str) -> None:
        del self.nodes[path]
        for client in self.clients.values():
            client.notify(Notification(NotificationType.DELETED, path))

    def new_session(self, client: str) -> int:
        self._next_session += 1
        self.sessions[self._next_session] = _Session(client, self.now_ms)
        return self._next_session

    def session_alive(self, session_id: int | None) -> bool:
        return session_id is not None and session_id in self.sessions and self.sessions[session_id].alive

    def read(self, path: str) -> GetResult | None:
        node = self.nodes.get(path)
        return None if node is None else GetResult(node.value, Stat(path, node.version, node.session_id))


class SimStoreClient:
    """One broker's connection to the store; every call runs at the store at once."""

    def __init__(self, store: SimMetadataStore, name: str) -> None:
        self.store = store
        self.name = name
        self.session_timeout_ms = store.session_timeout_ms
        self.session_id: int | None = None
        #: the link to the store (a cut network makes calls fail)
        self.linked = True
        self._listeners: list[Listener] = []
        self._held: list[StoreMessage] = []

    def register_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def notify(self, message: StoreMessage) -> None:
        """Tell the client, or, while it cannot be reached, when it is reached again (a
        ZooKeeper client learns of an expiry and of missed changes when it reconnects)."""
        self._held.append(message)
        if self.linked:
            self.flush()

    def flush(self) -> None:
        held, self._held = self._held, []
        for message in held:
            for listener in self._listeners:
                listener(message)

    def current_session_id(self) -> int | None:
        return self.session_id if self.store.session_alive(self.session_id) else None

    def connect(self) -> int:
        """A new session (the client library does this after the old one was lost)."""
        self._reach()
        self.session_id = self.store.new_session(self.name)
        self.notify(SessionNotification(SessionEvent.SESSION_REESTABLISHED, self.session_id))
        return self.session_id

    def _reach(self) -> None:
        if not (self.linked and self.store.available):
            raise StoreUnavailable(f"{self.name} cannot reach the store")

    def _session(self) -> int:
        self._reach()
        session_id = self.session_id
        if session_id is None or not self.store.session_alive(session_id):
            raise SessionExpired(f"{self.name} has no live session")
        self.store.sessions[session_id].last_heard_ms = self.store.now_ms
        return session_id

    def heartbeat(self) -> int:
        return self._session()

    def get(self, path: str) -> GetResult | None:
        self._session()
        return self.store.read(path)

    def get_children(self, path: str) -> list[str]:
        self._session()
        prefix = path.rstrip("/") + "/"
        return sorted({p[len(prefix):].split("/")[0] for p in self.store.nodes if p.startswith(prefix)})

    def put(self, path: str, value: bytes, expected_version: int | None) -> Stat:
        self._session()
        node = self.store.nodes.get(path)
        if node is None:
            if expected_version not in (None, NOT_EXISTS):
                raise NotFound(path)
            self.store.nodes[path] = _Node(value, 0, None)
            return Stat(path, 0)
        if expected_version == NOT_EXISTS:
            raise AlreadyExists(path, self.store.read(path))
        if expected_version is not None and expected_version != node.version:
            raise BadVersion(f"{path} is at version {node.version}, not {expected_version}")
        node.value, node.version = value, node.version + 1
        return Stat(path, node.version, node.session_id)

    def create_ephemeral(self, path: str, value: bytes) -> Stat:
        session_id = self._session()
        if path in self.store.nodes:
            raise AlreadyExists(path, self.store.read(path))
        self.store.nodes[path] = _Node(value, 0, session_id)
        return Stat(path, 0, session_id)

    def delete(self, path: str, expected_version: int | None) -> None:
        self._session()
        node = self.store.nodes.get(path)
        if node is None:
            raise NotFound(path)
        if expected_version is not None and expected_version != node.version:
            raise BadVersion(f"{path} is at version {node.version}, not {expected_version}")
        self.store.remove(path)


if TYPE_CHECKING:
    def _implements_the_protocol(client: SimStoreClient) -> MetadataStoreExtended:
        return client

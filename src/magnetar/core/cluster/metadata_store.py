"""What the brokers' decisions need of a metadata store with sessions (ZooKeeper through
kazoo, the simulation's store, ...): the narrow interface the shell calls and feeds back.

Pulsar's ``MetadataStore`` and ``MetadataStoreExtended`` (pulsar-metadata): versioned
``get``/``put``/``delete``, ephemeral nodes bound to the client's session, session events
with Pulsar's names, change notifications. Core never calls a store: the shell runs these
calls (off the event loop) and hands their answers to the core objects, in the order the
store delivered them. That order matters: ZooKeeper sends a watch notification before the
answer to any later request of the same client, so a broker learns its node is gone before
a later heartbeat answer could renew its lease (see ``session_lease``).

A call runs in the session it was sent in: the calls of a session that expired fail
(:class:`SessionExpired`), they never run in the next session.

Versions follow ZooKeeper: a node is created at version 0 and each ``put`` adds one;
``expected_version`` ``None`` means any, :data:`NOT_EXISTS` (-1) means the node must not
exist (Pulsar's convention).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

#: ``expected_version`` of a put that must create the node
NOT_EXISTS = -1


class SessionEvent(StrEnum):
    """Pulsar's ``SessionEvent``: what happened to the client's session with the store."""

    #: the connection dropped; the session may still be valid at the store
    CONNECTION_LOST = "ConnectionLost"
    #: reconnected within the same session (its ephemeral nodes are still there)
    RECONNECTED = "Reconnected"
    #: the session expired at the store: its ephemeral nodes are gone
    SESSION_LOST = "SessionLost"
    #: a new session was established after one was lost
    SESSION_REESTABLISHED = "SessionReestablished"


class NotificationType(StrEnum):
    """Pulsar's ``NotificationType`` of a watched node."""

    CREATED = "Created"
    MODIFIED = "Modified"
    DELETED = "Deleted"
    CHILDREN_CHANGED = "ChildrenChanged"


@dataclass(frozen=True, slots=True)
class Stat:
    """A node's version and, for an ephemeral node, the session that owns it (ZooKeeper's
    ``ephemeralOwner``; ``None`` for a persistent node)."""

    path: str
    version: int
    session_id: int | None = None

    @property
    def ephemeral(self) -> bool:
        return self.session_id is not None


@dataclass(frozen=True, slots=True)
class GetResult:
    value: bytes
    stat: Stat


@dataclass(frozen=True, slots=True)
class Notification:
    """A change to a watched path, delivered to the session listener in store order."""

    type: NotificationType
    path: str


@dataclass(frozen=True, slots=True)
class SessionNotification:
    """A session event; ``session_id`` is the session it concerns (the new one on
    :attr:`SessionEvent.SESSION_REESTABLISHED`)."""

    event: SessionEvent
    session_id: int


class MetadataStoreError(Exception):
    """A store call failed; the subclasses say how."""


class BadVersion(MetadataStoreError):
    """``expected_version`` did not match (ZooKeeper's BADVERSION): someone wrote in between."""


class NotFound(MetadataStoreError):
    """The node does not exist (ZooKeeper's NONODE)."""


class AlreadyExists(MetadataStoreError):
    """An ephemeral node, or a node put with :data:`NOT_EXISTS`, is already there
    (ZooKeeper's NODEEXISTS); ``existing`` is what it holds, when the store read it back."""

    def __init__(self, path: str, existing: GetResult | None = None) -> None:
        super().__init__(f"{path} already exists")
        self.existing = existing


class StoreUnavailable(MetadataStoreError):
    """No answer (connection loss, operation timeout): the call may or may not have taken
    effect, so the caller reads again before it acts on it."""


class SessionExpired(MetadataStoreError):
    """The call was refused because the client's session is gone."""


class MetadataStore(Protocol):
    """Versioned nodes (Pulsar's ``MetadataStore``)."""

    def get(self, path: str) -> GetResult | None:
        """The node's value and stat, or ``None`` when there is no such node."""
        ...

    def put(self, path: str, value: bytes, expected_version: int | None) -> Stat:
        """Write ``value``; with ``expected_version`` only over that version (:class:`BadVersion`
        otherwise), with :data:`NOT_EXISTS` only if the node is absent (:class:`AlreadyExists`)."""
        ...

    def delete(self, path: str, expected_version: int | None) -> None:
        """Remove the node (:class:`NotFound`, :class:`BadVersion` as for ``put``)."""
        ...

    def get_children(self, path: str) -> list[str]:
        """The names (not paths) of the node's children, sorted; empty when it has none."""
        ...


class MetadataStoreExtended(MetadataStore, Protocol):
    """Sessions and ephemeral nodes (Pulsar's ``MetadataStoreExtended``)."""

    #: the session timeout the store granted (ZooKeeper may lower the one asked for)
    session_timeout_ms: int

    def current_session_id(self) -> int | None:
        """The client's session, ``None`` while it has none."""
        ...

    def create_ephemeral(self, path: str, value: bytes) -> Stat:
        """Create a node that lives as long as the current session; :class:`AlreadyExists`
        (with what the node holds, and its session in ``existing.stat``) if it is there."""
        ...

    def heartbeat(self) -> int:
        """One round trip to the store within the current session, answered after every
        notification the store sent before it; returns that session's id. Raises
        :class:`StoreUnavailable` or :class:`SessionExpired`. The caller notes the time it
        *sent* the call: the store heard from it no earlier than that."""
        ...

    def register_listener(self, listener: Callable[[SessionNotification | Notification], None]) -> None:
        """Call ``listener`` with every session event and every change to a path this
        client read, in the order the store sent them."""
        ...

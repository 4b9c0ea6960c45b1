"""A broker's ownership of namespace bundles: one state machine per bundle, driven by the
answers of the metadata store.

Pulsar's ``OwnershipCache``: a broker owns a bundle while its ephemeral node
``/namespace/<tenant>/<ns>/<range>`` exists under the broker's session. Per bundle:

    UNOWNED --acquire--> ACQUIRING --created / exists (ours)--> OWNED --release--> RELEASING
       ^                    |  exists (another's) / failed          |   topics closed: delete node
       +--------------------+-----------session lost / node deleted-+--------deleted--+

Every answer carries the session it was given in; an answer of a session that is no longer
the broker's (late news of a lost session) changes nothing. A lost session loses every
bundle at once, and nothing is assumed afterwards: ownership is only ever re-established
by a new ephemeral create that the store accepts. (apache/pulsar #24478: after a ZooKeeper
restart, a broker whose wait for the owner timed out answered with its own stale view, and
two brokers loaded one topic.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from magnetar.core.cluster.metadata_store import SessionEvent
from magnetar.core.cluster.namespace_bundles import NamespaceBundle


class BundleState(StrEnum):
    UNOWNED = "unowned"
    ACQUIRING = "acquiring"
    OWNED = "owned"
    RELEASING = "releasing"


class OwnershipEvent(StrEnum):
    #: this broker should own the bundle (a lookup placed it here)
    ACQUIRE = "acquire"
    #: the store created our ephemeral node
    CREATED = "created"
    #: the node exists and is ours: same broker, current session (a create retried after
    #: a lost answer)
    EXISTS_OURS = "exists-ours"
    #: the node exists and belongs to another broker or to another session
    EXISTS_OTHER = "exists-other"
    #: the create got no answer: it may or may not have happened
    FAILED = "failed"
    #: unload: hand the bundle back
    RELEASE = "release"
    #: the shell closed the bundle's topics (ledgers closed in the store, clients told)
    TOPICS_CLOSED = "topics-closed"
    #: the store deleted our node at our request
    DELETED = "deleted"
    #: the node vanished without our asking (a watch fired)
    NODE_DELETED = "node-deleted"
    SESSION_LOST = "session-lost"


class OwnershipAction(StrEnum):
    NONE = "none"
    #: create the ephemeral ownership node with this broker's NamespaceEphemeralData
    CREATE_NODE = "create-node"
    #: the bundle is ours: topics of it may be taken over and served
    SERVE = "serve"
    #: stop acknowledging at once, close the bundle's topics and their ledgers, tell the
    #: clients to look up again; then report TOPICS_CLOSED
    CLOSE_TOPICS = "close-topics"
    #: delete the ownership node (expected: our session's node)
    DELETE_NODE = "delete-node"
    #: the bundle is lost: stop acknowledging and serving at once, write nothing to the
    #: store for it (another broker may own it already), tell the clients to look up again
    STOP_SERVING = "stop-serving"


S, E, A = BundleState, OwnershipEvent, OwnershipAction

#: (state, event) -> (next state, action). Pairs not listed change nothing.
TRANSITIONS: Mapping[tuple[BundleState, OwnershipEvent], tuple[BundleState, OwnershipAction]] = {
    (S.UNOWNED, E.ACQUIRE): (S.ACQUIRING, A.CREATE_NODE),
    (S.ACQUIRING, E.CREATED): (S.OWNED, A.SERVE),
    (S.ACQUIRING, E.EXISTS_OURS): (S.OWNED, A.SERVE),
    (S.ACQUIRING, E.EXISTS_OTHER): (S.UNOWNED, A.NONE),
    (S.ACQUIRING, E.FAILED): (S.UNOWNED, A.NONE),
    (S.ACQUIRING, E.SESSION_LOST): (S.UNOWNED, A.NONE),
    (S.OWNED, E.RELEASE): (S.RELEASING, A.CLOSE_TOPICS),
    (S.OWNED, E.NODE_DELETED): (S.UNOWNED, A.STOP_SERVING),
    (S.OWNED, E.SESSION_LOST): (S.UNOWNED, A.STOP_SERVING),
    (S.RELEASING, E.TOPICS_CLOSED): (S.RELEASING, A.DELETE_NODE),
    (S.RELEASING, E.DELETED): (S.UNOWNED, A.NONE),
    (S.RELEASING, E.NODE_DELETED): (S.UNOWNED, A.STOP_SERVING),
    (S.RELEASING, E.SESSION_LOST): (S.UNOWNED, A.STOP_SERVING),
}

#: the events that come from the store (answers to this broker's calls, and notifications),
#: each given with the session it came in: the session the call was sent in, or for a
#: notification the broker's session when it is handled (notifications arrive in store
#: order, so one of a lost session is handled before that session's loss)
ANSWERS = frozenset({E.CREATED, E.EXISTS_OURS, E.EXISTS_OTHER, E.FAILED, E.DELETED, E.NODE_DELETED})


@dataclass(frozen=True, slots=True)
class OwnershipEffect:
    bundle: NamespaceBundle
    action: OwnershipAction


class BundleOwnership:
    """Every bundle's state on one broker, and since when it owns the bundles it owns."""

    __slots__ = ("broker_id", "session_id", "_states", "_owned_since_ms")

    def __init__(self, broker_id: str) -> None:
        self.broker_id = broker_id
        self.session_id: int | None = None
        self._states: dict[NamespaceBundle, BundleState] = {}
        self._owned_since_ms: dict[NamespaceBundle, int] = {}

    def state(self, bundle: NamespaceBundle) -> BundleState:
        return self._states.get(bundle, BundleState.UNOWNED)

    def owned(self) -> list[NamespaceBundle]:
        return sorted(b for b, s in self._states.items() if s is BundleState.OWNED)

    def owned_since_ms(self, bundle: NamespaceBundle) -> int | None:
        """When the store confirmed our node (our clock): the successor's wait counts from
        here, because at that moment the store held no other owner's node."""
        return self._owned_since_ms.get(bundle) if self.state(bundle) is BundleState.OWNED else None

    def handle(self, bundle: NamespaceBundle, event: OwnershipEvent, now_ms: int,
               session_id: int | None = None) -> list[OwnershipEffect]:
        """Apply one event; an answer given in a session other than ours is dropped."""
        if event in ANSWERS and (session_id is None or session_id != self.session_id):
            return []
        if event is E.ACQUIRE and self.session_id is None:
            return []
        state = self.state(bundle)
        transition = TRANSITIONS.get((state, event))
        if transition is None:
            return []
        next_state, action = transition
        self._set(bundle, next_state, now_ms)
        return [] if action is A.NONE else [OwnershipEffect(bundle, action)]

    def on_exists(self, bundle: NamespaceBundle, owner_broker_id: str, owner_session_id: int | None,
                  now_ms: int, session_id: int) -> list[OwnershipEffect]:
        """The create found a node: ours only if it names us and our current session."""
        ours = owner_broker_id == self.broker_id and owner_session_id == self.session_id
        return self.handle(bundle, E.EXISTS_OURS if ours else E.EXISTS_OTHER, now_ms, session_id)

    def on_session_event(self, event: SessionEvent, session_id: int, now_ms: int) -> list[OwnershipEffect]:
        """A lost session loses every bundle; a new session starts with none."""
        if event is SessionEvent.SESSION_LOST and session_id == self.session_id:
            self.session_id = None
            return self._lose_all(now_ms)
        if event is SessionEvent.SESSION_REESTABLISHED and session_id != self.session_id:
            effects = self._lose_all(now_ms) if self.session_id is not None else []
            self.session_id = session_id
            return effects
        return []

    def _lose_all(self, now_ms: int) -> list[OwnershipEffect]:
        effects: list[OwnershipEffect] = []
        for bundle in sorted(self._states):
            effects.extend(self.handle(bundle, E.SESSION_LOST, now_ms))
        return effects

    def _set(self, bundle: NamespaceBundle, state: BundleState, now_ms: int) -> None:
        if state is BundleState.UNOWNED:
            self._states.pop(bundle, None)
            self._owned_since_ms.pop(bundle, None)
            return
        if state is BundleState.OWNED and self.state(bundle) is not BundleState.OWNED:
            self._owned_since_ms[bundle] = now_ms
        self._states[bundle] = state

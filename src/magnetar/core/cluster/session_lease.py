"""Whether this broker may acknowledge an append: its metadata-store session is still
valid, judged by its own monotonic clock.

The fencing rule of docs/cluster.md. The store expires a session when it has not heard
from the client for the session timeout; it heard from the client no earlier than the
client *sent* its last answered heartbeat. So the session lives at least until
``sent + timeout`` at the store, and the broker may treat it as valid until
``sent + timeout - margin`` by its own clock (the margin absorbs different clock rates).
A successor waits ``timeout + margin`` after it saw the owner gone before it reads the
ledger's end (``topic_takeover``), so every append this broker acknowledges is durable
before the successor looks.

The shell consults :meth:`SessionLease.may_acknowledge` after an append's fsync and before
its receipt; a ``False`` gets the producer a retriable error. Connection loss changes
nothing (the session may live on; the lease just runs out unless a heartbeat is answered);
a lost session ends the lease at once, and a new session has none until a heartbeat of its
own is answered. Each ledger is written under one session (``LedgerWriter``): an append
on a ledger opened under an earlier session is never acknowledged.
"""

from __future__ import annotations

from magnetar.core.cluster.metadata_store import SessionEvent

#: Pulsar's ``metadataStoreSessionTimeoutMillis`` default
DEFAULT_SESSION_TIMEOUT_MS = 30_000


class SessionLease:
    """One broker's lease on its store session; all times are its own monotonic clock."""

    __slots__ = ("session_timeout_ms", "margin_ms", "session_id", "_answered_sent_ms")

    def __init__(self, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS, margin_ms: int | None = None) -> None:
        if session_timeout_ms <= 0:
            raise ValueError(f"session timeout must be positive, not {session_timeout_ms} ms")
        self.session_timeout_ms = session_timeout_ms
        #: default: a tenth of the timeout, so clocks may differ in rate by up to 5 %
        self.margin_ms = session_timeout_ms // 10 if margin_ms is None else margin_ms
        if not 0 <= self.margin_ms < session_timeout_ms:
            raise ValueError(f"margin {self.margin_ms} ms must be in [0, session timeout)")
        self.session_id: int | None = None
        self._answered_sent_ms: int | None = None

    def on_session_event(self, event: SessionEvent, session_id: int) -> None:
        """A session event from the store, in the order the store sent it."""
        if event is SessionEvent.SESSION_LOST and session_id == self.session_id:
            self.session_id = None
            self._answered_sent_ms = None
        elif event is SessionEvent.SESSION_REESTABLISHED and session_id != self.session_id:
            self.session_id = session_id
            self._answered_sent_ms = None

    def on_heartbeat_answered(self, session_id: int, sent_ms: int) -> None:
        """A heartbeat sent at ``sent_ms`` was answered within ``session_id``. Answers of
        another session (late answers of a lost one) renew nothing."""
        if session_id != self.session_id:
            return
        if self._answered_sent_ms is None or sent_ms > self._answered_sent_ms:
            self._answered_sent_ms = sent_ms

    def valid_until_ms(self) -> int | None:
        """The instant (exclusive) the lease ends, or ``None`` when there is none."""
        if self._answered_sent_ms is None:
            return None
        return self._answered_sent_ms + self.session_timeout_ms - self.margin_ms

    def may_acknowledge(self, now_ms: int, session_id: int | None = None) -> bool:
        """True while the lease holds at ``now_ms`` and, when given, ``session_id`` (the
        session the ledger was opened under) is the current one."""
        until = self.valid_until_ms()
        if until is None or now_ms >= until:
            return False
        return session_id is None or session_id == self.session_id

    def takeover_wait_ms(self) -> int:
        """How long a successor waits after it saw an owner gone: the owner's lease at its
        longest, plus the margin on the successor's side."""
        return self.session_timeout_ms + self.margin_ms

    def heartbeat_interval_ms(self) -> int:
        """A third of the timeout, as ZooKeeper's client pings: two may be lost in a row."""
        return max(1, self.session_timeout_ms // 3)

"""Taking a topic over on a broker that now owns its bundle: fence the previous writer's
ledger, then serve. BookKeeper's recovery rule, for ledgers that are files on a shared
filesystem (docs/cluster.md has the argument).

The steps, each an effect the shell performs and answers:

1. ``READ_LEDGERS`` — read the topic's ledger list and its version.
2. ``WAIT_PREVIOUS_SESSION`` — if its last ledger is open and written by any other writer
   (another broker, or this broker in an earlier session), wait until
   ``owned_since + session timeout + margin`` by this broker's clock: ``owned_since`` is
   when the store confirmed this broker's ownership node, a moment the store held no other
   owner's node, so the previous writer's lease has ended by then. The wait is cut short
   when the store shows the previous writer's session ended and this broker's own session
   is older than the wait (``CheckPreviousSession``): a session the store expired had its
   lease run out first, and a store that dropped every session at once would have dropped
   this broker's too.
3. ``READ_LEDGER_END`` — open the previous ledger's file, fsync it, count its entries:
   every entry the previous writer acknowledged was fsynced before its lease ended, so it
   is there.
4. ``FENCE`` — one compare-and-set on the list: the previous ledger closed at that count,
   a new open ledger with this broker as writer. A lost race (bad version) or no answer
   goes back to step 1.
5. ``SERVING`` — create the new ledger's file and accept appends.

An open ledger of this very writer (a fence whose answer was lost, a topic reloaded after
a failed close) needs no wait, but goes through steps 3 and 4 like any other: serving
always begins with a compare-and-set that won, so a write still in flight from a broker
that lost the bundle (its node removed while its session lived) cannot close a ledger
under a broker that serves it.

An ownership or session loss at any step abandons the takeover. A previous writer that
closed its own ledger (a graceful unload) leaves nothing to wait for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from magnetar.core.cluster.managed_ledger_info import LedgerWriter, ManagedLedgerInfo


class TakeoverStep(StrEnum):
    READ_LEDGERS = "read-ledgers"
    WAIT_PREVIOUS_SESSION = "wait-previous-session"
    READ_LEDGER_END = "read-ledger-end"
    FENCE = "fence"
    SERVING = "serving"
    ABANDONED = "abandoned"


class TakeoverEvent(StrEnum):
    LEDGERS_READ_OTHER_OPEN = "ledgers-read-other-open"
    LEDGERS_READ_CLOSED = "ledgers-read-closed"
    LEDGERS_READ_OURS_OPEN = "ledgers-read-ours-open"
    WAITED = "waited"
    PREVIOUS_SESSION_ENDED = "previous-session-ended"
    LEDGER_END_READ = "ledger-end-read"
    WRITTEN = "written"
    WRITE_FAILED = "write-failed"
    ABANDON = "abandon"


T, V = TakeoverStep, TakeoverEvent

#: (step, event) -> next step. Any other pair is a caller's error.
TRANSITIONS: Mapping[tuple[TakeoverStep, TakeoverEvent], TakeoverStep] = {
    (T.READ_LEDGERS, V.LEDGERS_READ_OTHER_OPEN): T.WAIT_PREVIOUS_SESSION,
    (T.READ_LEDGERS, V.LEDGERS_READ_CLOSED): T.FENCE,
    (T.READ_LEDGERS, V.LEDGERS_READ_OURS_OPEN): T.READ_LEDGER_END,
    (T.WAIT_PREVIOUS_SESSION, V.WAITED): T.READ_LEDGER_END,
    (T.WAIT_PREVIOUS_SESSION, V.PREVIOUS_SESSION_ENDED): T.READ_LEDGER_END,
    (T.READ_LEDGER_END, V.LEDGER_END_READ): T.FENCE,
    (T.FENCE, V.WRITTEN): T.SERVING,
    (T.FENCE, V.WRITE_FAILED): T.READ_LEDGERS,
    **{(step, V.ABANDON): T.ABANDONED for step in T if step is not T.ABANDONED},
}


class TakeoverError(RuntimeError):
    """An answer arrived at a step that does not expect it (a stale or duplicated answer)."""


@dataclass(frozen=True, slots=True)
class ReadLedgerList:
    pass


@dataclass(frozen=True, slots=True)
class CheckPreviousSession:
    """Whether ``writer``'s store session still lives: an ephemeral node of that session is
    there. The answer goes to :meth:`TopicTakeover.on_previous_session`."""

    writer: LedgerWriter


@dataclass(frozen=True, slots=True)
class ReadLedgerEnd:
    """Open the ledger's file, fsync it and count its complete entries."""

    ledger_id: int


@dataclass(frozen=True, slots=True)
class WriteLedgerList:
    """Put ``info`` over ``expected_version`` (``-1``: the node must not exist yet)."""

    info: ManagedLedgerInfo
    expected_version: int


@dataclass(frozen=True, slots=True)
class StartServing:
    """Create the ledger's file and accept appends on it."""

    ledger_id: int


TakeoverEffect = ReadLedgerList | CheckPreviousSession | ReadLedgerEnd | WriteLedgerList | StartServing


class TopicTakeover:
    """One topic's takeover on one broker; see the module docstring for the steps."""

    __slots__ = ("writer", "wait_ms", "wait_until_ms", "session_since_ms", "step", "info", "version")

    def __init__(self, writer: LedgerWriter, owned_since_ms: int, wait_ms: int,
                 session_since_ms: int | None = None) -> None:
        self.writer = writer
        self.wait_ms = wait_ms
        #: the earliest moment the previous writer's ledger may be read and closed
        self.wait_until_ms = owned_since_ms + wait_ms
        #: since when this broker's own session has lived (None: unknown, always wait)
        self.session_since_ms = session_since_ms
        self.step = TakeoverStep.READ_LEDGERS
        #: the ledger list as last read or written, and its version (-1: no list yet)
        self.info = ManagedLedgerInfo()
        self.version = -1

    def start(self) -> list[TakeoverEffect]:
        return [ReadLedgerList()]

    def _move(self, event: TakeoverEvent) -> None:
        next_step = TRANSITIONS.get((self.step, event))
        if next_step is None:
            raise TakeoverError(f"{event} at step {self.step}")
        self.step = next_step

    def on_ledger_list(self, info: ManagedLedgerInfo | None, version: int, now_ms: int) -> list[TakeoverEffect]:
        """The list as read (``None``, version -1: the topic has no list yet)."""
        self.info, self.version = info or ManagedLedgerInfo(), version
        last = self.info.open_ledger
        if last is None:
            self._move(V.LEDGERS_READ_CLOSED)
            return [self._fence_write()]
        if last.writer == self.writer:
            # our own (a fence whose answer was lost, a topic reloaded): nobody else's lease
            # to wait out, but it is closed and replaced all the same, so that serving
            # always starts with a write that wins over any other in flight
            self._move(V.LEDGERS_READ_OURS_OPEN)
            return [ReadLedgerEnd(last.ledger_id)]
        self._move(V.LEDGERS_READ_OTHER_OPEN)
        waited = self.on_timer(now_ms)
        if waited or last.writer is None:  # a ledger of files, no writer named: waited out
            return waited
        return [CheckPreviousSession(last.writer)]

    def next_deadline_ms(self) -> int | None:
        return self.wait_until_ms if self.step is TakeoverStep.WAIT_PREVIOUS_SESSION else None

    def on_timer(self, now_ms: int) -> list[TakeoverEffect]:
        if self.step is not TakeoverStep.WAIT_PREVIOUS_SESSION or now_ms < self.wait_until_ms:
            return []
        self._move(V.WAITED)
        last = self.info.open_ledger
        assert last is not None
        return [ReadLedgerEnd(last.ledger_id)]

    def on_previous_session(self, alive: bool, now_ms: int) -> list[TakeoverEffect]:
        """The answer to :class:`CheckPreviousSession`. A session the store ended has no
        lease left (the store heard nothing from it for the timeout, so its heartbeats went
        unanswered for longer than its lease runs), unless it was ended at once with every
        other session (a store restored without them). This broker's own session would have
        ended then too: a session of its own older than the wait rules that out, and the
        previous ledger is read at once. Otherwise the wait goes on."""
        if self.step is not TakeoverStep.WAIT_PREVIOUS_SESSION or alive or self.session_since_ms is None \
                or now_ms - self.session_since_ms < self.wait_ms:
            return []
        self._move(V.PREVIOUS_SESSION_ENDED)
        last = self.info.open_ledger
        assert last is not None
        return [ReadLedgerEnd(last.ledger_id)]

    def on_ledger_end(self, entries: int) -> list[TakeoverEffect]:
        self._move(V.LEDGER_END_READ)
        self.info = self.info.with_open_closed_at(entries)
        return [self._fence_write()]

    def _fence_write(self) -> WriteLedgerList:
        return WriteLedgerList(self.info.with_new_ledger(self.writer), self.version)

    def on_written(self, info: ManagedLedgerInfo, version: int) -> list[TakeoverEffect]:
        """The fence's write landed: ``info`` at ``version`` is the list now."""
        self._move(V.WRITTEN)
        self.info, self.version = info, version
        last = info.open_ledger
        assert last is not None and last.writer == self.writer
        return [StartServing(last.ledger_id)]

    def on_write_failed(self) -> list[TakeoverEffect]:
        """Bad version or no answer: read again (a landed write shows as our open ledger)."""
        self._move(V.WRITE_FAILED)
        return [ReadLedgerList()]

    def abandon(self) -> None:
        """The bundle or the session was lost: nothing more is done for this takeover."""
        if self.step is not TakeoverStep.ABANDONED:
            self._move(V.ABANDON)

"""Producer deduplication by sequence id, for one topic.

Corresponds to Pulsar's ``MessageDeduplication`` (broker/service/persistent), PIP-6.
For every producer name the topic keeps two numbers:

* ``pushed``: the highest sequence id accepted for writing (the write may still be
  in flight);
* ``persisted``: the highest sequence id whose write is durable.

A send carries the first and the last sequence id of its entry (the same number
for a single message; for a batch, the last id comes from ``highest_sequence_id``
or from the batch payload, which the caller resolves). It is classified by
:func:`classify_send`: new, already stored, not yet knowable, or a batch that mixes
stored and new messages.

The class is sans-IO: the shell reads the dedup cursor, writes entries and
snapshots, and reports back; time comes in as ``now_ms``. Every ``NOT_DUP`` verdict
must be followed by exactly one :meth:`MessageDeduplication.on_persisted` or
:meth:`MessageDeduplication.on_write_failed` for that write.

Where Magnetar departs from Pulsar 4.x, and why:

* A batch whose first ids are already stored but whose last id is new gets
  ``PARTIAL_DUP`` (Pulsar answers ``Dup`` and silently drops the new messages,
  apache/pulsar#6273). A batch whose last id is still in flight gets ``UNKNOWN``.
* While recovering or after a failed recovery, sends get ``UNKNOWN`` (Pulsar lets
  them through undeduplicated).
* After a failed write, no send is let through until the writes in flight have
  drained; then pushed is reset to persisted for every producer. This is what
  Pulsar's topic fencing achieves around ``resetHighestSequenceIdPushed``; here it
  is part of the state machine so the guarantee does not depend on the caller.
* Replay skips chunks other than the last of a chunked message; Pulsar records
  them, so a retried message whose last chunk was never stored is judged a
  duplicate and lost.
* Sequence ids only ever move up (Pulsar overwrites them).
* Producers recovered from a snapshot can be purged when inactive (Pulsar never
  purges them unless they reconnect and leave again).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import Enum, StrEnum

from magnetar.core.dedup.dedup_snapshot import DedupSnapshot, select_producers
from magnetar.core.dedup.deduplication_config import DeduplicationConfig
from magnetar.core.positions import Position

#: A producer with no sequence id recorded; also what PRODUCER_SUCCESS carries then.
NO_SEQUENCE_ID = -1


class DedupOutcome(Enum):
    """How a send is answered."""

    #: New: write it.
    NOT_DUP = "NotDup"
    #: Already stored: answer with the duplicate receipt (ledger = entry = -1), write nothing.
    DUP = "Dup"
    #: May or may not be stored yet: answer with a retryable error, write nothing.
    UNKNOWN = "Unknown"
    #: A batch holding both stored and new messages. A batch cannot be split, so
    #: reject it with an explicit, non-retryable error; the producer must re-batch.
    PARTIAL_DUP = "PartialDup"


class DedupStatus(StrEnum):
    """The ``deduplicationStatus`` of topic stats, with Pulsar's names."""

    INITIALIZED = "Initialized"
    DISABLED = "Disabled"
    RECOVERING = "Recovering"
    ENABLED = "Enabled"
    #: Pulsar's state while it deletes the dedup cursor. Magnetar drops the state
    #: at once and lets the shell delete the cursor, so it never reports it.
    REMOVING = "Removing"
    FAILED = "Failed"


class DedupAction(Enum):
    """What the shell must do after :meth:`MessageDeduplication.set_enabled`."""

    NONE = "none"
    #: Open the ``pulsar.dedup`` cursor, call ``begin_recovery`` with its properties and
    #: mark-delete position, ``replay_entry`` every entry after it (or ``replay_entries`` for
    #: runs of them), then ``finish_recovery``.
    RECOVER = "recover"
    #: Delete the ``pulsar.dedup`` cursor; it must not hold back retention.
    DELETE_CURSOR = "delete-cursor"


class DedupStateError(RuntimeError):
    """A recovery call arrived in a state that does not expect it (for example a stale replay)."""


#: (status, should be enabled) -> (next status, action). Pairs not listed change nothing.
TRANSITIONS: Mapping[tuple[DedupStatus, bool], tuple[DedupStatus, DedupAction]] = {
    (DedupStatus.INITIALIZED, True): (DedupStatus.RECOVERING, DedupAction.RECOVER),
    (DedupStatus.DISABLED, True): (DedupStatus.RECOVERING, DedupAction.RECOVER),
    (DedupStatus.FAILED, True): (DedupStatus.RECOVERING, DedupAction.RECOVER),
    (DedupStatus.INITIALIZED, False): (DedupStatus.DISABLED, DedupAction.DELETE_CURSOR),
    (DedupStatus.RECOVERING, False): (DedupStatus.DISABLED, DedupAction.DELETE_CURSOR),
    (DedupStatus.ENABLED, False): (DedupStatus.DISABLED, DedupAction.DELETE_CURSOR),
    (DedupStatus.FAILED, False): (DedupStatus.DISABLED, DedupAction.DELETE_CURSOR),
}


def classify_send(first_sequence_id: int, last_sequence_id: int, pushed: int, persisted: int) -> DedupOutcome:
    """Judge a send of ids ``first..last`` against a producer's ``pushed`` and ``persisted``.

    For a single message (first == last) this is exactly Pulsar's rule: above pushed
    is new, at or below persisted is a duplicate, in between is unknown.
    """
    if first_sequence_id > pushed:
        return DedupOutcome.NOT_DUP
    if first_sequence_id > persisted or pushed >= last_sequence_id > persisted:
        return DedupOutcome.UNKNOWN
    if last_sequence_id > pushed:
        return DedupOutcome.PARTIAL_DUP
    return DedupOutcome.DUP


@dataclass(slots=True)
class _ProducerSequences:
    pushed: int = NO_SEQUENCE_ID
    persisted: int = NO_SEQUENCE_ID
    last_active_ms: int = 0
    pending_writes: int = 0


@dataclass(frozen=True, slots=True)
class DeduplicationStats:
    """Counters for topic stats and metrics."""

    status: str
    producers: int
    duplicates_dropped: int
    unknown_rejected: int
    partial_dup_rejected: int
    pending_writes: int
    entries_since_snapshot: int
    snapshot_position: Position | None
    last_snapshot_ms: int | None
    producers_left_out_of_last_snapshot: int


class MessageDeduplication:
    """Sequence-id deduplication state of one topic; see the module docstring."""

    def __init__(self, config: DeduplicationConfig | None = None) -> None:
        self._config = config or DeduplicationConfig()
        self._status = DedupStatus.INITIALIZED
        self._producers: dict[str, _ProducerSequences] = {}
        self._pending_total = 0
        self._fenced = False
        self._replaying = False
        self._replayed_entries = 0
        self._last_position: Position | None = None
        self._entries_since_snapshot = 0
        self._snapshot_due = False
        self._snapshot_in_flight: DedupSnapshot | None = None
        self._snapshot_position: Position | None = None
        self._last_snapshot_ms: int | None = None
        self._left_out_of_last_snapshot = 0
        self._duplicates_dropped = 0
        self._unknown_rejected = 0
        self._partial_dup_rejected = 0

    # -- status -------------------------------------------------------------------

    @property
    def config(self) -> DeduplicationConfig:
        return self._config

    @property
    def status(self) -> DedupStatus:
        return self._status

    @property
    def is_enabled(self) -> bool:
        return self._status is DedupStatus.ENABLED

    @property
    def is_fenced(self) -> bool:
        """True after a failed write until the writes in flight have drained."""
        return self._fenced

    def set_enabled(self, enabled: bool) -> DedupAction:
        """Apply the effective policy (topic over namespace over broker) at load or at run time.

        Disabling drops all state at once. Enabling enters ``Recovering``; the shell
        must not accept producers until :meth:`finish_recovery`.
        """
        next_status, action = TRANSITIONS.get((self._status, enabled), (self._status, DedupAction.NONE))
        if action is DedupAction.NONE:
            return action
        self._clear()
        self._status = next_status
        return action

    def _clear(self) -> None:
        self._producers.clear()
        self._pending_total = 0
        self._fenced = False
        self._replaying = False
        self._replayed_entries = 0
        self._last_position = None
        self._entries_since_snapshot = 0
        self._snapshot_due = False
        self._snapshot_in_flight = None
        self._snapshot_position = None
        self._last_snapshot_ms = None

    # -- publishing ---------------------------------------------------------------

    def check(
        self,
        producer_name: str,
        first_sequence_id: int,
        last_sequence_id: int,
        now_ms: int,
        *,
        is_last_chunk: bool = True,
        store_partial: bool = False,
    ) -> DedupOutcome:
        """Classify a send and, when it is new, record it as pushed.

        ``first_sequence_id`` is CommandSend.sequence_id; ``last_sequence_id`` is the
        batch's last id (equal to the first for a single message). A chunk other than
        the last of a chunked message is always new and records nothing, as in Pulsar:
        a chunked message is judged on its last chunk.
        """
        gate = self._gate()
        if gate is not None:
            return gate
        if first_sequence_id < 0 or last_sequence_id < 0:
            raise ValueError(
                f"producer {producer_name!r} sent negative sequence ids ({first_sequence_id}, {last_sequence_id})"
            )
        last_sequence_id = max(first_sequence_id, last_sequence_id)
        producer = self._producers.get(producer_name)
        if producer is None:
            producer = self._producers[producer_name] = _ProducerSequences()
        producer.last_active_ms = max(producer.last_active_ms, now_ms)
        if is_last_chunk:
            outcome = classify_send(first_sequence_id, last_sequence_id, producer.pushed, producer.persisted)
        else:
            outcome = DedupOutcome.NOT_DUP
        writes = (DedupOutcome.NOT_DUP, DedupOutcome.PARTIAL_DUP) if store_partial else (DedupOutcome.NOT_DUP,)
        if outcome in writes and self._fenced:
            outcome = DedupOutcome.UNKNOWN
        self._count(outcome)
        if outcome in writes:
            producer.pending_writes += 1
            self._pending_total += 1
            if is_last_chunk:
                producer.pushed = last_sequence_id
        return outcome

    def _gate(self) -> DedupOutcome | None:
        if self._status is DedupStatus.ENABLED:
            return None
        if self._status in (DedupStatus.RECOVERING, DedupStatus.FAILED):
            self._unknown_rejected += 1
            return DedupOutcome.UNKNOWN
        return DedupOutcome.NOT_DUP

    def _count(self, outcome: DedupOutcome) -> None:
        if outcome is DedupOutcome.DUP:
            self._duplicates_dropped += 1
        elif outcome is DedupOutcome.UNKNOWN:
            self._unknown_rejected += 1
        elif outcome is DedupOutcome.PARTIAL_DUP:
            self._partial_dup_rejected += 1

    def on_persisted(
        self,
        producer_name: str,
        last_sequence_id: int,
        position: Position,
        now_ms: int,
        *,
        is_last_chunk: bool = True,
    ) -> None:
        """A write that :meth:`check` let through is durable at ``position``.

        Counts the entry toward the next snapshot; the shell then calls
        :meth:`maybe_snapshot`.
        """
        if not self.is_enabled:
            return
        producer = self._producers.get(producer_name)
        if producer is None:
            producer = self._producers[producer_name] = _ProducerSequences()
        self._settle(producer)
        producer.last_active_ms = max(producer.last_active_ms, now_ms)
        if is_last_chunk:
            producer.persisted = max(producer.persisted, last_sequence_id)
            producer.pushed = max(producer.pushed, producer.persisted)
        self._advance(position)
        self._entries_since_snapshot += 1
        if self._entries_since_snapshot >= self._config.entries_interval:
            self._snapshot_due = True
        self._maybe_unfence()

    def on_write_failed(self, producer_name: str) -> None:
        """A write that :meth:`check` let through failed.

        As in Pulsar, a failed write resets pushed to persisted for every producer of
        the topic, so the retry is stored (apache/pulsar#5218). The reset waits until
        no write is in flight; until then new sends get ``UNKNOWN``.
        """
        if not self.is_enabled:
            return
        producer = self._producers.get(producer_name)
        if producer is not None:
            self._settle(producer)
        self._fenced = True
        self._maybe_unfence()

    def _settle(self, producer: _ProducerSequences) -> None:
        if producer.pending_writes > 0:
            producer.pending_writes -= 1
            self._pending_total -= 1

    def _maybe_unfence(self) -> None:
        if not self._fenced or self._pending_total > 0:
            return
        for producer in self._producers.values():
            producer.pushed = producer.persisted
        self._fenced = False

    def _advance(self, position: Position) -> None:
        if self._last_position is None or position > self._last_position:
            self._last_position = position

    def last_sequence_id(self, producer_name: str) -> int:
        """Highest pushed sequence id, -1 when unknown: what PRODUCER_SUCCESS carries."""
        producer = self._producers.get(producer_name)
        return NO_SEQUENCE_ID if producer is None else producer.pushed

    @property
    def highest_sequenced_pushed(self) -> dict[str, int]:
        return {n: p.pushed for n, p in self._producers.items() if p.pushed != NO_SEQUENCE_ID}

    @property
    def highest_sequenced_persisted(self) -> dict[str, int]:
        return {n: p.persisted for n, p in self._producers.items() if p.persisted != NO_SEQUENCE_ID}

    # -- snapshots ----------------------------------------------------------------

    def maybe_snapshot(self, now_ms: int) -> DedupSnapshot | None:
        """The snapshot to store now, if one is due and none is being stored.

        Due every ``entries_interval`` persisted entries, every ``snapshot_interval_s``
        when there is something new, and after producers were purged. The shell
        mark-deletes the dedup cursor at ``position`` with ``properties`` and reports
        back with :meth:`on_snapshot_stored` or :meth:`on_snapshot_failed`.
        """
        if not self.is_enabled or self._snapshot_in_flight is not None or self._last_position is None:
            return None
        if not (self._snapshot_due or self._time_snapshot_due(now_ms)):
            return None
        persisted = {n: p.persisted for n, p in self._producers.items() if p.persisted != NO_SEQUENCE_ID}
        last_active = {n: p.last_active_ms for n, p in self._producers.items()}
        properties = select_producers(persisted, last_active, self._config.max_number_of_producers)
        self._left_out_of_last_snapshot = len(persisted) - len(properties)
        snapshot = DedupSnapshot(self._last_position, properties)
        self._snapshot_in_flight = snapshot
        self._snapshot_due = False
        self._entries_since_snapshot = 0
        return snapshot

    def _time_snapshot_due(self, now_ms: int) -> bool:
        deadline = self.next_snapshot_deadline_ms()
        return deadline is not None and now_ms >= deadline

    def next_snapshot_deadline_ms(self) -> int | None:
        """When a time-based snapshot falls due, or None if none will without new entries."""
        interval_ms = self._config.snapshot_interval_ms
        if not self.is_enabled or interval_ms <= 0 or self._last_position is None:
            return None
        if self._snapshot_position is not None and self._last_position <= self._snapshot_position:
            return None
        return 0 if self._last_snapshot_ms is None else self._last_snapshot_ms + interval_ms

    def on_snapshot_stored(self, snapshot: DedupSnapshot, now_ms: int) -> None:
        """The dedup cursor now holds ``snapshot``."""
        if snapshot != self._snapshot_in_flight:
            return
        self._snapshot_in_flight = None
        self._snapshot_position = snapshot.position
        self._last_snapshot_ms = now_ms

    def on_snapshot_failed(self, snapshot: DedupSnapshot) -> None:
        """Storing ``snapshot`` failed; the next :meth:`maybe_snapshot` tries again."""
        if snapshot != self._snapshot_in_flight:
            return
        self._snapshot_in_flight = None
        self._snapshot_due = True

    # -- inactive producers -------------------------------------------------------

    def purge_inactive_producers(self, now_ms: int, connected_names: Collection[str]) -> list[str]:
        """Forget producers that are not connected and were inactive past the timeout.

        A connected producer counts as active now. A purge makes a snapshot due, so
        the forgotten producers do not come back after a restart. Returns the names.
        """
        if not self.is_enabled:
            return []
        cutoff_ms = now_ms - self._config.producer_inactivity_timeout_ms
        purged: list[str] = []
        for name, producer in self._producers.items():
            if name in connected_names:
                producer.last_active_ms = max(producer.last_active_ms, now_ms)
            elif producer.pending_writes == 0 and producer.last_active_ms < cutoff_ms:
                purged.append(name)
        for name in purged:
            del self._producers[name]
        if purged:
            self._snapshot_due = True
        return sorted(purged)

    # -- recovery -----------------------------------------------------------------

    def begin_recovery(self, snapshot_properties: Mapping[str, int], position: Position | None = None) -> None:
        """Load the dedup cursor's properties; ``position`` is its mark-delete position.

        The shell then replays every entry after ``position`` in order and calls
        :meth:`finish_recovery`. Only one replay may run at a time (apache/pulsar#25954).
        """
        if self._status is not DedupStatus.RECOVERING or self._replaying:
            raise DedupStateError(
                f"begin_recovery needs status Recovering with no replay running; status is {self._status}"
                + (" and a replay is running" if self._replaying else "")
            )
        self._clear()
        for name, sequence_id in snapshot_properties.items():
            value = int(sequence_id)
            if value >= 0:
                self._producers[name] = _ProducerSequences(pushed=value, persisted=value)
        self._last_position = position
        self._snapshot_position = position
        self._replaying = True

    def replay_entry(
        self,
        producer_name: str,
        last_sequence_id: int,
        position: Position,
        *,
        is_last_chunk: bool = True,
    ) -> None:
        """Apply one stored entry read back from the ledger.

        ``last_sequence_id`` is max(highest_sequence_id, sequence_id) of its metadata,
        or the batch's last id; pass ``is_last_chunk=False`` for earlier chunks.
        """
        if not self._replaying:
            raise DedupStateError(f"replay_entry without begin_recovery (status {self._status})")
        if is_last_chunk and last_sequence_id >= 0:
            producer = self._producers.get(producer_name)
            if producer is None:
                producer = self._producers[producer_name] = _ProducerSequences()
            producer.persisted = max(producer.persisted, last_sequence_id)
            producer.pushed = max(producer.pushed, producer.persisted)
        self._advance(position)
        self._replayed_entries += 1

    def replay_entries(self, last_sequence_ids: Mapping[str, int], entries: int, position: Position) -> None:
        """Apply ``entries`` stored entries at once, ``position`` being the last of them.

        ``last_sequence_ids`` holds, per producer, the highest id that
        :meth:`replay_entry` would have been given for those entries (earlier chunks
        left out). Replay only ever raises ids, so the result is the same as one call
        per entry, without a method call per entry: a replay of a million entries is
        what stands between a restart and the first producer.
        """
        if not self._replaying:
            raise DedupStateError(f"replay_entries without begin_recovery (status {self._status})")
        producers = self._producers
        for name, last_sequence_id in last_sequence_ids.items():
            if last_sequence_id < 0:
                continue
            producer = producers.get(name)
            if producer is None:
                producer = producers[name] = _ProducerSequences()
            producer.persisted = max(producer.persisted, last_sequence_id)
            producer.pushed = max(producer.pushed, producer.persisted)
        if entries:
            self._advance(position)
            self._replayed_entries += entries

    def finish_recovery(self, now_ms: int) -> None:
        """The replay reached the last entry: deduplication is in effect."""
        if not self._replaying:
            raise DedupStateError(f"finish_recovery without begin_recovery (status {self._status})")
        self._replaying = False
        self._status = DedupStatus.ENABLED
        for producer in self._producers.values():
            producer.last_active_ms = now_ms
        self._entries_since_snapshot = self._replayed_entries
        if self._replayed_entries > 0 and self._replayed_entries >= self._config.entries_interval:
            self._snapshot_due = True

    def fail_recovery(self) -> None:
        """Reading the cursor or the ledger failed; sends get ``UNKNOWN`` until enabled again."""
        if self._status is not DedupStatus.RECOVERING:
            raise DedupStateError(f"fail_recovery while {self._status}")
        self._clear()
        self._status = DedupStatus.FAILED

    # -- stats --------------------------------------------------------------------

    def stats(self) -> DeduplicationStats:
        return DeduplicationStats(
            status=self._status.value,
            producers=len(self._producers),
            duplicates_dropped=self._duplicates_dropped,
            unknown_rejected=self._unknown_rejected,
            partial_dup_rejected=self._partial_dup_rejected,
            pending_writes=self._pending_total,
            entries_since_snapshot=self._entries_since_snapshot,
            snapshot_position=self._snapshot_position,
            last_snapshot_ms=self._last_snapshot_ms,
            producers_left_out_of_last_snapshot=self._left_out_of_last_snapshot,
        )

"""Which ledgers of a topic retention deletes (Pulsar's ``ManagedLedgerImpl.internalTrimLedgers``).

The rule, as Pulsar 4.x applies it every ``retentionCheckIntervalInSeconds``:

- Only ledgers every durable cursor has consumed are candidates: those before the
  slowest durable cursor's ledger, and that ledger too once its last entry is
  acknowledged. Without durable cursors every ledger is a candidate. Readers
  (non-durable cursors) hold nothing; they move past what is deleted.
- The current ledger is never deleted.
- Candidates are taken oldest first. A ledger goes when it has expired (closed more than
  ``retentionTimeInMinutes`` ago) or when what would remain without it is still at least
  ``retentionSizeInMB`` (``isLedgerRetentionOverSizeQuota`` counts the whole topic, the
  current ledger included). The first ledger that is neither stops the walk. -1 turns a
  limit off; 0 for both deletes consumed ledgers at once.

So consumed data is kept while it is within both limits, and goes as soon as it is past
either. A ledger closes when the next one opens, so a ledger's age is counted from the
next ledger's creation time (its close time in Pulsar).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from magnetar.core.policies import RetentionPolicies
from magnetar.core.positions import Position
from magnetar.core.topics.managed_ledger import LedgerInfo

MB = 1024 * 1024


def consumed_ledgers(ledgers: Sequence[LedgerInfo], durable_marks: Iterable[Position]) -> int:
    """How many of the oldest ledgers every durable cursor has consumed (the current
    ledger, the last of ``ledgers``, never counts)."""
    marks = list(durable_marks)
    closed = ledgers[:-1]
    if not marks:
        return len(closed)
    slowest = min(marks)
    count = 0
    for info in closed:
        fully_consumed = info.ledger_id == slowest.ledger_id and slowest.entry_id >= info.entries - 1
        if info.ledger_id >= slowest.ledger_id and not fully_consumed:
            break
        count += 1
    return count


def ledgers_to_delete(ledgers: Sequence[LedgerInfo], durable_marks: Iterable[Position],
                      retention: RetentionPolicies, now_ms: int) -> int:
    """How many of the oldest ``ledgers`` (oldest first, the current one last) to delete."""
    candidates = consumed_ledgers(ledgers, durable_marks)
    time_ms = retention.retentionTimeInMinutes * 60_000
    size_bytes = retention.retentionSizeInMB * MB
    total_bytes = sum(info.size_bytes for info in ledgers)
    deleted_bytes = 0
    for index in range(candidates):
        deleted_bytes += ledgers[index].size_bytes
        closed_ms = ledgers[index + 1].timestamp_ms
        expired = time_ms >= 0 and now_ms - closed_ms > time_ms
        over_quota = size_bytes >= 0 and total_bytes - deleted_bytes >= size_bytes
        if not (expired or over_quota):
            return index
    return candidates

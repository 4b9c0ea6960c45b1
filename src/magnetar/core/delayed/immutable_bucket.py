"""A sealed bucket whose indexes live in a stored snapshot: Pulsar's ``ImmutableBucket``.

Only one segment of it is in memory at a time, in the tracker's shared queue. The bucket
remembers which segment that is (segment entry ids run 1..``last_segment_entry_id``) and
the key of that segment's last index: when the shared queue pops that key, every index of
the segment has been handed out and the next one is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.core.delayed.bucket import bucket_key


@dataclass(eq=False)
class ImmutableBucket:
    start_ledger_id: int
    end_ledger_id: int
    bucket_id: int
    last_segment_entry_id: int
    current_segment_entry_id: int
    #: Indexes the snapshot held when written or recovered (merge picks by this, as Pulsar).
    number_bucket_delayed_messages: int
    #: Min schedule time of each segment; index ``i`` is segment ``i + 1``.
    first_schedule_timestamps: list[int] = field(default_factory=list)
    snapshot_length_bytes: int = 0
    #: Packed key of the last index of the loaded segment still in the shared queue.
    trigger_key: int | None = None

    @property
    def bucket_key(self) -> str:
        return bucket_key(self.start_ledger_id, self.end_ledger_id)

    def has_unloaded_segments(self) -> bool:
        return self.current_segment_entry_id < self.last_segment_entry_id

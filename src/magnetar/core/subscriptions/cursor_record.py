"""A cursor's persisted state, the value core hands the metadata store to write.

It lives in core because core decides when a cursor is written (the mark-delete
rate limit) and builds the record; storage only encodes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.core.positions import Position


@dataclass(frozen=True)
class CursorRecord:
    """A cursor's persisted state (Pulsar's ``ManagedCursorInfo``/``PositionInfo``)."""

    mark_delete: Position
    #: Acknowledged ranges past the mark-delete position, as the cursor layer defines
    #: them (Pulsar: lower bound exclusive, upper inclusive), in position order.
    individually_deleted: list[tuple[Position, Position]] = field(default_factory=list)
    properties: dict[str, int | str] = field(default_factory=dict)
    last_active_ms: int = 0

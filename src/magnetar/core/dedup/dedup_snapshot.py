"""A snapshot of the persisted sequence-id map, stored in the dedup cursor.

Pulsar keeps deduplication state in the properties of a dedicated managed cursor
(``pulsar.dedup``, PersistentTopic.DEDUPLICATION_CURSOR_NAME): the cursor's
mark-delete position says up to which entry the properties are complete, and the
properties map each producer name to its highest persisted sequence id. Recovery
loads the properties and replays the entries after the mark-delete position.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from magnetar.core.positions import Position

#: Name of the cursor whose properties hold the snapshot (Pulsar's name).
DEDUPLICATION_CURSOR_NAME = "pulsar.dedup"


class DedupSnapshot(NamedTuple):
    """Mark-delete the dedup cursor at ``position`` with ``properties`` as its properties.

    ``properties`` maps producer name -> highest persisted sequence id and reflects
    every entry up to and including ``position``.
    """

    position: Position
    properties: dict[str, int]


def select_producers(
    persisted: Mapping[str, int], last_active_ms: Mapping[str, int], max_producers: int
) -> dict[str, int]:
    """The producers a snapshot keeps, at most ``max_producers`` of them.

    Pulsar keeps whichever producers its hash map yields first. Keeping the most
    recently active ones instead means the producers most likely to retry are the
    ones that survive a crash. The result is sorted by name, as Pulsar's TreeMap is.
    """
    names = list(persisted)
    if len(names) > max_producers:
        names.sort(key=lambda name: (-last_active_ms.get(name, 0), name))
        names = names[:max_producers]
    return {name: persisted[name] for name in sorted(names)}

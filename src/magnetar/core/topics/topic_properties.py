"""What a topic keeps in its stored properties so that it survives a restart: its creation
time (recorded on first load, Pulsar's ``topicCreationTimeStamp``) and the position it was
terminated at. The shell reads and writes the properties; this module says what they hold.
"""

from __future__ import annotations

from typing import Any

from magnetar.core.positions import Position
from magnetar.core.topics.topic import Topic

CREATED_PROPERTY = "topicCreationTimeStamp"
TERMINATED_PROPERTY = "terminatedPosition"


def restore(topic: Topic, properties: dict[str, Any] | None, now_ms: int) -> dict[str, Any] | None:
    """Give a loading topic its creation time and terminated position from its stored
    properties; the properties to store when they must change (a creation time is
    recorded the first time a stored topic loads), else None."""
    if properties is None:
        topic.created_ms = now_ms
        return None
    terminated = properties.get(TERMINATED_PROPERTY)
    if isinstance(terminated, list) and len(terminated) == 2:
        topic.terminated_at = Position(int(terminated[0]), int(terminated[1]))
    changed = recorded_creation(properties, now_ms)
    topic.created_ms = (changed or properties)[CREATED_PROPERTY]
    return changed


def recorded_creation(properties: dict[str, Any] | None, now_ms: int) -> dict[str, Any] | None:
    """The stored properties with ``now_ms`` as the creation time when they hold none,
    to be stored before the topic loads; None when there is nothing to record."""
    if properties is None or isinstance(properties.get(CREATED_PROPERTY), int):
        return None
    return {**properties, CREATED_PROPERTY: now_ms}


def terminated(properties: dict[str, Any] | None, last: Position) -> dict[str, Any]:
    """The stored properties of a topic terminated at ``last``."""
    return {**(properties or {}), TERMINATED_PROPERTY: [last.ledger_id, last.entry_id]}

"""The values and errors every metadata store shares, whichever backs it."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class MetadataError(Exception):
    """The metadata store could not do what was asked."""


class AlreadyExists(MetadataError):
    """A create found the record already there."""


class NotFound(MetadataError):
    """An update found no record to change."""


class InvalidMetadata(MetadataError, ValueError):
    """A name or value the store refuses; the message says which and why."""


class VersionConflict(MetadataError):
    """A versioned update or delete found the record at another version: someone else
    changed it since it was read (ZooKeeper's ``BadVersion``)."""


class MetadataUnavailable(MetadataError):
    """The store could not be reached within the operation timeout; the call may be retried."""


@dataclass(frozen=True)
class SchemaRecord:
    """One version of a topic's schema (Pulsar's ``SchemaData``)."""

    #: Pulsar's schema type name, e.g. ``"AVRO"``, ``"JSON"``, ``"STRING"``.
    schema_type: str
    data: bytes
    properties: dict[str, str] = field(default_factory=dict)
    #: when the version was stored (ms since the epoch), as Pulsar's ``timestamp``
    timestamp_ms: int = 0
    #: a soft delete: the marker version Pulsar writes, after which older versions are gone
    deleted: bool = False


@dataclass(frozen=True)
class Versioned:
    """A record with the version a conditional update or delete names (ZooKeeper's
    ``Stat.version``; 0 when created, one more at each update)."""

    data: dict[str, Any]
    version: int


class SessionState(enum.Enum):
    """The store's session, as kazoo reports it (Pulsar's ``SessionEvent``): ephemeral
    records live while it is ``CONNECTED`` or ``SUSPENDED``; ``LOST`` means they are gone."""

    CONNECTED = "connected"
    #: the connection dropped; the session may still be alive on the servers
    SUSPENDED = "suspended"
    #: the session expired (or the store was closed): its ephemeral records are deleted
    LOST = "lost"

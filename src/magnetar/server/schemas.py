"""A minimal schema registry: versions per topic, an 8-byte big-endian version id.

Full compatibility checks come later; the same schema gets its existing version,
a different one becomes the next version.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass


@dataclass(frozen=True)
class SchemaVersion:
    version: int
    schema_type: int
    name: str
    data: bytes
    properties: tuple[tuple[str, str], ...]

    @property
    def version_bytes(self) -> bytes:
        return struct.pack(">q", self.version)


def decode_version(raw: bytes) -> int:
    if len(raw) != 8:
        raise ValueError("schema version must be 8 bytes (big-endian int64)")
    return int(struct.unpack(">q", raw)[0])

"""The simulation's shared filesystem: one append-only file per ledger that every broker
reaches. What a writer appended is in the file; an fsync makes a prefix durable. A reader
that opens and fsyncs the file sees at least the durable prefix and perhaps more of what
was written (a local disk shows the page cache, NFS shows only what the writer flushed);
what it saw is durable afterwards, and what it did not see lies beyond the end it records,
where no reader looks. A killed writer's unsynced tail may vanish.

The assumption the protocol makes of a real filesystem is exactly the first half: a
writer's fsync is visible to a process that opens the file afterwards.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

FileKey = tuple[str, int]


@dataclass
class SimFile:
    creator: str
    #: the entries written, in order (each names the message it holds)
    entries: list[str] = field(default_factory=list)
    durable: int = 0


class SimSharedFiles:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.files: dict[FileKey, SimFile] = {}

    def create(self, key: FileKey, writer: str) -> SimFile:
        """A new ledger file; creating one that exists is a second writer on one ledger."""
        if key in self.files:
            raise FileExistsError(f"ledger file {key} already exists, created by {self.files[key].creator}")
        self.files[key] = SimFile(writer)
        return self.files[key]

    def append(self, key: FileKey, message: str) -> int:
        """Write one entry; its index in the file."""
        file = self.files[key]
        file.entries.append(message)
        return len(file.entries) - 1

    def fsync(self, key: FileKey) -> int:
        """The writer's fsync: everything written is durable; the durable count."""
        file = self.files[key]
        file.durable = len(file.entries)
        return file.durable

    def open_and_sync(self, key: FileKey) -> int:
        """A reader opens the file and fsyncs it: the entries it sees, durable from now on."""
        file = self.files.get(key)
        if file is None:
            return 0
        seen = self.rng.randint(file.durable, len(file.entries))
        file.durable = seen
        return seen

    def crash_writer(self, key: FileKey) -> None:
        """A killed writer: part of what it had not synced is lost."""
        file = self.files[key]
        del file.entries[self.rng.randint(file.durable, len(file.entries)):]

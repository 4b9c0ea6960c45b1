"""A cluster's broker taking a topic over: its ledger list in the metadata store, the
previous writer's ledger fenced, then the topic served.

The steps are core's (:mod:`magnetar.core.cluster.topic_takeover`, docs/cluster.md rule T):
read the list and its version, wait out the previous writer's session, count the entries
of its open ledger's file after an fsync, one compare-and-set that closes it there and
adds this broker's new ledger, and only then create that ledger's file. Here they run
with the store's calls and the file's reading on the membership's thread pool, never on
the event loop. A compare-and-set that loses means another broker changed the list: the
load fails with ``ServiceNotReady`` and the client looks up again.

While the topic is served, :class:`TopicLedgerList` keeps its list: a rollover is
recorded by the group commit's thread before an entry of the new ledger is reported
durable, and a release records the close; nothing is written per entry. A writer whose
compare-and-set loses was fenced: its ledger stops taking writes, the producers waiting
get a retriable error, and the topic is unloaded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol, TypeVar

from magnetar.core.cluster.managed_ledger_info import InvalidLedgerList, LedgerInfo, LedgerWriter, ManagedLedgerInfo
from magnetar.core.cluster.topic_takeover import (
    CheckPreviousSession,
    ReadLedgerEnd,
    ReadLedgerList,
    StartServing,
    TakeoverEffect,
    TopicTakeover,
    WriteLedgerList,
)
from magnetar.core.errors import ServiceNotReady
from magnetar.core.metadata.interfaces import LedgerIdStore, ManagedLedgerStore
from magnetar.core.metadata.records import AlreadyExists, MetadataError, NotFound, VersionConflict
from magnetar.core.names import TopicName
from magnetar.server.clock import monotonic_ms
from magnetar.server.store_calls import StoreCalls
from magnetar.storage.interfaces import ManagedLedger, StorageError
from magnetar.storage.recorded_ledgers import LedgerFenced
from magnetar.storage.segment_ledger import (
    SegmentLedger,
    load_segment_index,
    scan_segment,
    segment_file_name,
    topic_dir_name,
)

log = logging.getLogger("magnetar.cluster")
R = TypeVar("R")
#: compare-and-sets of a list tried while only the topic's properties moved its version
WRITE_ATTEMPTS = 10
CACHE_CATCH_UP_S = 0.02


class LedgerListStore(ManagedLedgerStore, LedgerIdStore, Protocol):
    """What taking topics over uses of the metadata store."""

    def session_alive(self, broker_id: str, session_id: int) -> bool: ...


class Takeovers(Protocol):
    """What taking a topic over needs of the broker's membership in the cluster."""

    broker_id: str

    def takeover_start(self, name: TopicName) -> tuple[int, int, int, int | None]:
        """The session the topic is written under, when the store confirmed this broker's
        ownership of its bundle (monotonic ms), how long a previous writer is waited out
        from then, and since when that session has lived (monotonic ms; None: unknown);
        ``ServiceNotReady`` when the bundle is not owned here."""
        ...

    def still_serves(self, name: TopicName, session_id: int) -> bool: ...

    @property
    def calls(self) -> StoreCalls:
        """The pool store calls run on."""
        ...


class TopicLedgerList:
    """One topic's ledger list as its writer last wrote it (a
    :class:`~magnetar.storage.recorded_ledgers.RecordedLedgers`). ``rolled`` and
    ``closed`` run on worker threads and block on the store."""

    def __init__(self, store: ManagedLedgerStore, topic: str, writer: LedgerWriter, info: ManagedLedgerInfo,
                 version: int) -> None:
        self._store = store
        self.topic = topic
        self.writer = writer
        self.info = info
        self.version = version
        self._lock = threading.Lock()
        self.fenced = False

    @property
    def recorded(self) -> Mapping[int, int]:
        return {ledger.ledger_id: ledger.entries for ledger in self.info.ledgers if ledger.entries is not None}

    def rolled(self, closed_id: int, entries: int, new_id: int, kept: Sequence[int]) -> None:
        with self._lock:
            closing = self._closing(closed_id, entries, kept)
            self._write(ManagedLedgerInfo((*closing.ledgers, LedgerInfo(new_id, None, self.writer))))

    def closed(self, ledger_id: int, entries: int, kept: Sequence[int]) -> None:
        with self._lock:
            self._write(self._closing(ledger_id, entries, kept))

    def deleted(self) -> None:
        with self._lock:
            if not self.fenced:
                def delete(version: int) -> int:
                    self._store.delete_managed_ledger(self.topic, version)
                    return -1
                self._compare_and_set(delete)
                self.fenced = True

    def _closing(self, ledger_id: int, entries: int, kept: Sequence[int]) -> ManagedLedgerInfo:
        """The list with its open ledger (``ledger_id``, this writer's) closed at ``entries``,
        and of the earlier ones only those the ledger still keeps (retention removed the rest)."""
        last = self.info.open_ledger
        if self.fenced or last is None or last.ledger_id != ledger_id or last.writer != self.writer:
            raise LedgerFenced(f"{self.topic}: ledger {ledger_id} is not the open ledger this writer recorded")
        keep = set(kept)
        earlier = tuple(ledger for ledger in self.info.ledgers[:-1] if ledger.ledger_id in keep)
        return ManagedLedgerInfo((*earlier, replace(last, entries=entries)))

    def _write(self, info: ManagedLedgerInfo) -> None:
        data = json.loads(info.to_json())
        self.version = self._compare_and_set(lambda version: self._store.put_managed_ledger(self.topic, data, version))
        self.info = info

    def _compare_and_set(self, change: Callable[[int], int]) -> int:
        """``change`` at the version this writer holds; the new version. The node also holds
        the topic's properties, whose writes move its version too: a version that moved over
        the very list this writer wrote is taken as the new one; a list that changed means
        another broker fenced this writer."""
        for _ in range(WRITE_ATTEMPTS):
            try:
                return change(self.version)
            except (VersionConflict, AlreadyExists, NotFound) as exc:
                conflict: MetadataError = exc
            except MetadataError as exc:
                raise StorageError(f"{self.topic}: its ledger list could not be written: {exc}") from exc
            held = self._held()
            if held is None or held[0] != self.info:
                self.fenced = True
                raise LedgerFenced(f"{self.topic}: its ledger list was changed by another broker ({conflict})")
            if held[1] == self.version:
                time.sleep(CACHE_CATCH_UP_S)  # the store's cache has not seen the write yet
            self.version = held[1]
        raise StorageError(f"{self.topic}: its ledger list kept changing version under it; not written")

    def _held(self) -> tuple[ManagedLedgerInfo, int] | None:
        try:
            got = self._store.get_managed_ledger(self.topic)
            return None if got is None else (ManagedLedgerInfo.from_json(json.dumps(got.data).encode()), got.version)
        except MetadataError as exc:
            raise StorageError(f"{self.topic}: its ledger list could not be read: {exc}") from exc
        except InvalidLedgerList:
            return None


def ledger_end(directory: Path, ledger_id: int) -> int:
    """How many whole entries a ledger's file holds, after an fsync of it: every entry its
    writer acknowledged is among them (its fsync returned before it acknowledged). A file
    that was never created holds none. The file is only read, never cut: its writer may
    still be running."""
    path = directory / segment_file_name(ledger_id)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    scan = scan_segment(path, ledger_id)
    return 0 if scan is None else len(scan.offsets)


def ledgers_of_files(directory: Path) -> ManagedLedgerInfo | None:
    """A topic with files but no list yet (written before its list was kept): its files as
    closed ledgers. None when it has no files."""
    if not directory.is_dir():
        return None
    ids = sorted(int(path.name[:-4]) for path in directory.glob("*.seg") if path.name[:-4].isdigit())
    ledgers = []
    for ledger_id in ids:
        path = directory / segment_file_name(ledger_id)
        scan = load_segment_index(path, ledger_id)
        entries = len(scan.offsets) if scan is not None else ledger_end(directory, ledger_id)
        if entries:
            ledgers.append(LedgerInfo(ledger_id, entries))
    return ManagedLedgerInfo(tuple(ledgers)) if ledgers else None


class LedgerLists:
    """The cluster's broker's ledger lists: takeovers, and whether a ledger's writer may
    still acknowledge."""

    def __init__(self, store: LedgerListStore, takeovers: Takeovers, ledgers_dir: Path,
                 open_ledger: Callable[[str, int, TopicLedgerList], SegmentLedger],
                 next_ledger_id: Callable[[], int],
                 ids_at_hand: Callable[[], Awaitable[None]] | None = None) -> None:
        """``ids_at_hand``: awaited before an id is taken, so that taking it never reserves
        a block on the event loop (``LedgerIds.at_hand``)."""
        self.store = store
        self.takeovers = takeovers
        self.ledgers_dir = ledgers_dir
        self._open_ledger = open_ledger
        self._next_ledger_id = next_ledger_id
        self._ids_at_hand = ids_at_hand

    def may_acknowledge(self, ledger: ManagedLedger, session_id: int | None) -> bool:
        """Whether appends on ``ledger`` may be acknowledged by this writer now: it was
        opened under the current session (``session_id``) and its list was not fenced."""
        recorded = ledger.ledger_list if isinstance(ledger, SegmentLedger) else None
        if not isinstance(recorded, TopicLedgerList):
            return True  # not a list-kept ledger (non-persistent)
        return not recorded.fenced and recorded.writer.session_id == session_id

    async def open(self, name: TopicName) -> SegmentLedger:
        """Take the topic over (docs/cluster.md, rule T) and open its ledger; ``ServiceNotReady``
        when another broker changed its list meanwhile or the bundle was lost."""
        key = str(name)
        session_id, owned_since_ms, wait_ms, session_since_ms = self.takeovers.takeover_start(name)
        writer = LedgerWriter(self.takeovers.broker_id, session_id)
        takeover = TopicTakeover(writer, owned_since_ms, wait_ms, session_since_ms)
        directory = self.ledgers_dir / topic_dir_name(key)
        effects: list[TakeoverEffect] = takeover.start()
        listed, attempts = ManagedLedgerInfo(), WRITE_ATTEMPTS
        fenced = ""
        try:
            while True:
                while not effects:  # the previous writer's session is waited out
                    deadline = takeover.next_deadline_ms()
                    assert deadline is not None
                    log.info("%s: waiting %d ms for the previous writer of its ledger to stop",
                             key, deadline - int(monotonic_ms()))
                    await asyncio.sleep(max(0, deadline - int(monotonic_ms())) / 1000)
                    self._check_serving(name, session_id)
                    effects = takeover.on_timer(int(monotonic_ms()))
                effect = effects[0]
                if isinstance(effect, StartServing):
                    break
                if isinstance(effect, ReadLedgerList):
                    listed, version = await self.takeovers.calls.run(self._read_list, key, directory)
                    effects = takeover.on_ledger_list(listed, version, int(monotonic_ms()))
                elif isinstance(effect, CheckPreviousSession):
                    previous = effect.writer
                    try:
                        alive = await self.takeovers.calls.run(self.store.session_alive, previous.broker_id,
                                                               previous.session_id)
                    except MetadataError:
                        alive = True  # not known to have ended: waited out
                    effects = takeover.on_previous_session(alive, int(monotonic_ms()))
                    if effects:
                        log.info("%s: the previous writer of its ledger, %s, has no session left; no wait",
                                 key, previous)
                elif isinstance(effect, ReadLedgerEnd):
                    entries = await asyncio.get_running_loop().run_in_executor(None, ledger_end, directory,
                                                                             effect.ledger_id)
                    effects = takeover.on_ledger_end(entries)
                    fenced = f" after closing ledger {effect.ledger_id} at {entries} entries"
                elif isinstance(effect, WriteLedgerList):
                    self._check_serving(name, session_id)
                    info = await self._with_fresh_id(effect.info)
                    written = await self._write(key, info, effect.expected_version, listed)
                    if written is None and attempts > 0:
                        attempts -= 1
                        effects = takeover.on_write_failed()  # read again, as core says
                    elif written is None:
                        raise ServiceNotReady(f"Topic {key}: its ledger list kept changing; look up again")
                    else:
                        effects = takeover.on_written(info, written)
        except BaseException:
            takeover.abandon()
            raise
        recorded = TopicLedgerList(self.store, key, writer, takeover.info, takeover.version)
        opened = takeover.info.open_ledger
        assert opened is not None
        # recovering the files is disk work, on the loop's default executor as any topic's load
        ledger = await asyncio.get_running_loop().run_in_executor(None, self._open_ledger, key, opened.ledger_id,
                                                                  recorded)
        log.info("%s: serving ledger %d as %s%s", key, opened.ledger_id, writer, fenced)
        return ledger

    def _read_list(self, key: str, directory: Path) -> tuple[ManagedLedgerInfo, int]:
        """On the pool: the list and its version; a topic without one, its files (version -1)."""
        got = self.store.get_managed_ledger(key)
        if got is None:
            return ledgers_of_files(directory) or ManagedLedgerInfo(), -1
        try:
            return ManagedLedgerInfo.from_json(json.dumps(got.data).encode()), got.version
        except InvalidLedgerList as exc:
            raise ServiceNotReady(f"Topic {key}: {exc}") from exc

    async def _with_fresh_id(self, info: ManagedLedgerInfo) -> ManagedLedgerInfo:
        """Core numbers the new ledger after the last one; the file's id comes from the
        store's counter instead, so no two writers (a fenced one still rolling over among
        them) ever make the same file. One above the list's ledgers: ids reserved before
        them may be lower, so a fresh block is reserved then."""
        *earlier, new = info.ledgers
        floor = earlier[-1].ledger_id if earlier else 0
        if self._ids_at_hand is not None:
            await self._ids_at_hand()
        ledger_id = self._next_ledger_id()
        if ledger_id <= floor:
            ledger_id = (await self.takeovers.calls.run(self.store.reserve_ledger_ids, 1))[0]
        if ledger_id <= floor:
            raise ServiceNotReady(f"ledger id {ledger_id} reserved is not above {floor}; look up again")
        return ManagedLedgerInfo((*earlier, replace(new, ledger_id=ledger_id)))

    async def _write(self, key: str, info: ManagedLedgerInfo, expected_version: int,
                     listed: ManagedLedgerInfo) -> int | None:
        """The fence's compare-and-set; its new version, or None when only the topic's
        properties (which share the node) moved the version since ``listed`` was read."""
        try:
            return await self.takeovers.calls.run(self.store.put_managed_ledger, key,
                                                 json.loads(info.to_json()), expected_version)
        except (VersionConflict, AlreadyExists) as exc:
            lost = exc
        except MetadataError as exc:
            raise ServiceNotReady(f"Topic {key}: its ledger list could not be written ({exc}); retry") from exc
        try:
            held, _ = await self.takeovers.calls.run(self._read_list, key, self.ledgers_dir / topic_dir_name(key))
        except MetadataError as exc:
            raise ServiceNotReady(f"Topic {key}: its ledger list could not be read ({exc}); retry") from exc
        if held == listed and expected_version != -1:
            return None
        raise ServiceNotReady(f"Topic {key} was taken over by another broker meanwhile; look up again") from lost

    def _check_serving(self, name: TopicName, session_id: int) -> None:
        if not self.takeovers.still_serves(name, session_id):
            raise ServiceNotReady(f"Topic {name}: its bundle or this broker's session was lost while it was "
                                  "taken over; look up again")

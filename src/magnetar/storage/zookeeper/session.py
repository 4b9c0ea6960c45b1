"""One kazoo session to a ZooKeeper ensemble, as the metadata store uses it.

Reads come from a cache that ZooKeeper's watches keep current: the first read of a node
(or of a node's children) fetches it and leaves a watch; the watch's event drops the
entry, so the next read fetches the new value. A policy node's entry is not dropped: it
keeps its value until a thread of the session has fetched the new one, since a broker's
event loop reads policies and must never wait for ZooKeeper. Dropped entries carry a
generation, so a fetch that raced a change is not cached. A write goes to ZooKeeper and
drops what it changed from the cache (a watched policy node takes the value written), so
a store reads its own writes. kazoo lets go of every watch when the connection drops: what
was cached is then served as it was until the connection is back (a broker keeps its
policies through a blip), and read again after; a lost session drops it all.

Every call waits at most the operation timeout (``metadataStoreOperationTimeoutSeconds``),
then raises :class:`MetadataUnavailable`. Errors are the store's own
(:class:`AlreadyExists`, :class:`NotFound`, :class:`VersionConflict`), never kazoo's.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, WatchedEvent

from magnetar.core.metadata.records import (
    AlreadyExists,
    MetadataError,
    MetadataUnavailable,
    NotFound,
    SessionState,
    VersionConflict,
)
from magnetar.core.metadata.store_url import ZooKeeperUrl, parse_metadata_store_url
from magnetar.storage.zookeeper import paths

#: Pulsar's ``metadataStoreSessionTimeoutMillis`` and ``metadataStoreOperationTimeoutSeconds``
DEFAULT_SESSION_TIMEOUT_MS = 30_000
DEFAULT_OPERATION_TIMEOUT_S = 30
_STATES = {KazooState.CONNECTED: SessionState.CONNECTED, KazooState.SUSPENDED: SessionState.SUSPENDED,
           KazooState.LOST: SessionState.LOST}
T = TypeVar("T")
#: a node that is absent, in the data cache
_ABSENT: tuple[bytes | None, int] = (None, -1)


class ZooKeeperSession:
    """The kazoo client, its session's state and the watched cache; paths are absolute
    within the store (the URL's chroot is prefixed here)."""

    def __init__(self, url: ZooKeeperUrl | str, *, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 operation_timeout_s: float = DEFAULT_OPERATION_TIMEOUT_S) -> None:
        self.url = url if isinstance(url, ZooKeeperUrl) else parse_metadata_store_url(url)
        self.operation_timeout_s = operation_timeout_s
        self.session_timeout_ms = session_timeout_ms
        self._root = self.url.chroot
        self._lock = threading.Lock()
        self._data: dict[str, tuple[bytes | None, int]] = {}
        self._children: dict[str, list[str]] = {}
        #: what was cached when the connection dropped, served until it is back
        self._stale_data: dict[str, tuple[bytes | None, int]] = {}
        self._stale_children: dict[str, list[str]] = {}
        self._generation: dict[str, int] = {}
        self._listeners: list[Callable[[SessionState], None]] = []
        self._state = SessionState.LOST
        self._changes = 0
        self._policy_changes = 0
        self._topic_list_changes = 0
        self._refresher = ThreadPoolExecutor(1, thread_name_prefix="magnetar-zk-refresh")
        self._client = KazooClient(hosts=self.url.hosts, timeout=session_timeout_ms / 1000,
                                   connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1.0})
        self._client.add_listener(self._on_state)
        try:
            self._client.start(timeout=operation_timeout_s)
        except KazooTimeoutError:
            self._client.close()
            raise MetadataUnavailable(
                f"cannot reach ZooKeeper at {self.url.hosts} within {operation_timeout_s} s") from None
        self._state = SessionState.CONNECTED

    # -- session -------------------------------------------------------------------------

    @property
    def session_state(self) -> SessionState:
        return self._state

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        """The session's id and password, None before it is established."""
        found = self._client.client_id
        return None if found is None else (int(found[0]), bytes(found[1]))

    def add_session_listener(self, listener: Callable[[SessionState], None]) -> None:
        """``listener`` is called, on kazoo's thread, at each change of the session's state."""
        self._listeners.append(listener)

    def _on_state(self, state: str) -> None:
        self._state = _STATES[state]
        if self._state is SessionState.CONNECTED:
            with self._lock:
                self._stale_data.clear()
                self._stale_children.clear()
        else:
            # kazoo forgets every watch when the connection drops: nothing cached can be kept
            # current, so it is read again once connected (and meanwhile served as it was)
            self._drop_cache(keep_stale=self._state is SessionState.SUSPENDED)
        for listener in list(self._listeners):
            listener(self._state)

    def close(self) -> None:
        """End the session: ZooKeeper deletes its ephemeral nodes now, not at its timeout."""
        self._refresher.shutdown(wait=False, cancel_futures=True)
        self._client.stop()
        self._client.close()

    @property
    def changes(self) -> int:
        """Writes made or seen (through watches) by this session so far."""
        return self._changes

    @property
    def topic_list_changes(self) -> int:
        """Writes made or seen by this session that may change a list of stored topics:
        a node's children (a namespace's topics, a tenant's namespaces), or the data of a
        partitioned topic's or a managed ledger's node (``paths.is_listing``)."""
        return self._topic_list_changes

    @property
    def policy_changes(self) -> int:
        """Policy writes made or seen by this session so far."""
        return self._policy_changes

    # -- cache ---------------------------------------------------------------------------

    def _drop_cache(self, *, keep_stale: bool) -> None:
        with self._lock:
            for path in list(self._data) + list(self._children):
                self._generation[path] = self._generation.get(path, 0) + 1
            if keep_stale:
                self._stale_data.update(self._data)
                self._stale_children.update(self._children)
            else:
                self._stale_data.clear()
                self._stale_children.clear()
            self._data.clear()
            self._children.clear()
            self._changes += 1
            self._policy_changes += 1
            self._topic_list_changes += 1

    def _forget(self, path: str, written: tuple[bytes | None, int] | None = None, *,
                children_changed: bool = False) -> None:
        """Drop ``path`` from the cache; a watched policy node takes the value ``written``
        instead, in the same step, so that no read (the event loop's included) has to fetch
        it: its watch's event is on its way and fetches it again ahead of the reads."""
        policy = self._is_policy(path)
        with self._lock:
            self._generation[path] = self._generation.get(path, 0) + 1
            if written is not None and policy and path in self._data:
                self._data[path] = written
            else:
                self._data.pop(path, None)
            listed = self._children.pop(path, None) is not None or children_changed
            self._changes += 1
            if policy:
                self._policy_changes += 1
            if listed or paths.is_listing(path[len(self._root):]):
                self._topic_list_changes += 1

    def _is_policy(self, full: str) -> bool:
        return paths.is_policy(full[len(self._root):])

    def _on_watch(self, event: WatchedEvent) -> None:
        if event.path is None:  # kazoo let go of its watches (the connection dropped)
            self._drop_cache(keep_stale=self._state is SessionState.SUSPENDED)
        elif event.type != EventType.CHILD and self._refreshed_ahead(event.path):
            self._refresher.submit(self._refresh, event.path)
        else:
            self._forget(event.path, children_changed=event.type == EventType.CHILD)

    def _refreshed_ahead(self, full: str) -> bool:
        """Policies are read on a broker's event loop, which must never wait for ZooKeeper:
        a cached policy node that changed keeps its value until the new one is fetched."""
        with self._lock:
            return full in self._data and self._is_policy(full)

    def _refresh(self, full: str) -> None:
        with self._lock:
            generation = self._generation[full] = self._generation.get(full, 0) + 1
        try:
            found = self._fetch(full, self._fetch_data, _ABSENT)
        except Exception:  # noqa: BLE001 - the connection went: read again on the next read
            self._forget(full)
            return
        with self._lock:
            if self._generation.get(full, 0) != generation:
                return  # written or dropped meanwhile
            self._data[full] = found
            self._changes += 1
            self._policy_changes += 1

    def read(self, path: str) -> tuple[bytes | None, int]:
        """A node's data and version, ``(None, -1)`` when it does not exist."""
        return self._cached(path, self._data, self._stale_data, self._fetch_data, _ABSENT)

    def _fetch_data(self, full: str) -> tuple[bytes | None, int]:
        data, stat = self._wait(self._client.get_async(full, watch=self._on_watch))
        return data, stat.version

    def read_json(self, path: str) -> dict[str, Any] | None:
        """A node's JSON object; None when the node is absent or holds no data (a node that
        only holds others, such as a tenant's namespaces after the tenant was deleted)."""
        data, _ = self.read(path)
        return json.loads(data) if data else None

    def children(self, path: str) -> list[str]:
        """A node's children, sorted; none when it does not exist."""

        def fetch(full: str) -> list[str]:
            return sorted(self._wait(self._client.get_children_async(full, watch=self._on_watch)))

        found: list[str] = self._cached(path, self._children, self._stale_children, fetch, [])
        return list(found)

    def _cached(self, path: str, cache: dict[str, T], stale: dict[str, T], fetch: Callable[[str], T], absent: T) -> T:
        """The cached value of ``path``, else ``fetch(path)`` leaving a watch (``absent``, and a
        watch for its creation, when the node does not exist), cached unless a change raced it."""
        full = self._root + path
        with self._lock:
            found = cache.get(full)
            if found is None and self._state is SessionState.SUSPENDED:
                found = stale.get(full)
            generation = self._generation.get(full, 0)
        if found is not None:
            return found
        with self._errors(path):
            found = self._fetch(full, fetch, absent)
        with self._lock:
            if self._generation.get(full, 0) == generation:
                cache[full] = found
        return found

    def _fetch(self, full: str, fetch: Callable[[str], T], absent: T) -> T:
        """``fetch(full)`` leaving a watch; ``absent``, and a watch for its creation, when the
        node does not exist."""
        while True:
            try:
                return fetch(full)
            except NoNodeError:
                if self._wait(self._client.exists_async(full, watch=self._on_watch)) is None:
                    return absent

    # -- writes --------------------------------------------------------------------------

    def create(self, path: str, data: bytes, *, ephemeral: bool = False) -> None:
        """Create a node, and its parents as empty nodes; :class:`AlreadyExists` if it is there."""
        full = self._root + path
        with self._errors(path):
            self._wait(self._client.create_async(full, data, ephemeral=ephemeral, makepath=True))
        self._written(full, (data, 0))

    def set(self, path: str, data: bytes, version: int = -1) -> int:
        """Replace a node's data (at ``version`` if not -1); its new version."""
        full = self._root + path
        with self._errors(path):
            stat = self._wait(self._client.set_async(full, data, version))
        self._forget(full, (data, int(stat.version)))  # its parent's children are as they were
        return int(stat.version)

    def delete(self, path: str, version: int = -1) -> bool:
        """Delete a node without children; False if it was not there. A node with children
        raises :class:`MetadataError`."""
        full = self._root + path
        try:
            with self._errors(path):
                self._wait(self._client.delete_async(full, version))
        except NotFound:
            self._written(full, _ABSENT)
            return False
        except BaseException:
            self._written(full)
            raise
        self._written(full, _ABSENT)
        return True

    def ensure(self, path: str) -> None:
        """The node exists (empty if this call made it), and so do its parents."""
        full = self._root + path
        with self._errors(path):
            self._wait(self._client.ensure_path_async(full))
        self._written(full)

    def ephemeral_owner(self, path: str) -> int | None:
        """The session id owning the node (read from ZooKeeper, not the cache); None when
        the node is absent or not ephemeral."""
        with self._errors(path):
            stat = self._wait(self._client.exists_async(self._root + path))
        return None if stat is None or not stat.ephemeralOwner else int(stat.ephemeralOwner)

    def fresh(self, path: str) -> tuple[bytes | None, int]:
        """A node's data and version read from ZooKeeper, not the cache (for a compare-and-set)."""
        full = self._root + path
        try:
            with self._errors(path):
                data, stat = self._wait(self._client.get_async(full))
        except NotFound:
            return _ABSENT
        return data, stat.version

    def transaction(self, operations: list[tuple[str, str, bytes, int]]) -> None:
        """``("create" | "create-ephemeral" | "set" | "delete", path, data, version)`` all
        applied or none; the first failed operation's error is raised."""
        tx = self._client.transaction()
        for kind, path, data, version in operations:
            full = self._root + path
            if kind in ("create", "create-ephemeral"):
                tx.create(full, data, ephemeral=kind == "create-ephemeral")
            elif kind == "set":
                tx.set_data(full, data, version)
            else:
                tx.delete(full, version)
        with self._errors(operations[0][1] if operations else "/"):
            results = self._wait(tx.commit_async())
        for kind, path, _, _ in operations:
            if kind == "set":
                self._forget(self._root + path)
            else:
                self._written(self._root + path)
        for (_, path, _, _), result in zip(operations, results, strict=True):
            if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                with self._errors(path):
                    raise result

    def _written(self, full: str, now: tuple[bytes | None, int] | None = None) -> None:
        """After ``full`` was created or deleted: it and its parent's children are read again."""
        self._forget(full, now)
        self._forget(full.rsplit("/", 1)[0] or "/", children_changed=True)

    def _wait(self, result: Any) -> Any:
        return result.get(timeout=self.operation_timeout_s)

    @contextmanager
    def _errors(self, path: str) -> Iterator[None]:
        try:
            yield
        except NodeExistsError:
            raise AlreadyExists(f"{path} already exists") from None
        except NoNodeError:
            raise NotFound(f"{path} does not exist") from None
        except BadVersionError:
            raise VersionConflict(f"{path} was changed by someone else (version mismatch)") from None
        except NotEmptyError:
            raise MetadataError(f"{path} still has children") from None
        except (KazooTimeoutError, ConnectionLoss, SessionExpiredError) as exc:
            raise MetadataUnavailable(
                f"ZooKeeper at {self.url.hosts} did not answer for {path} within "
                f"{self.operation_timeout_s} s ({type(exc).__name__}); retry later") from None

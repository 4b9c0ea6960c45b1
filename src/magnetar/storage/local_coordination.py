"""Coordination records of a store that one broker alone uses (the standalone broker's
SQLite store and the in-memory twin): broker registrations and bundle ownership live in
the store object, as ephemeral records live in a ZooKeeper session, and go when it
closes. The session never drops, so its state stays ``CONNECTED`` until the store closes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from magnetar.core.metadata.records import AlreadyExists, NotFound, SessionState, VersionConflict, Versioned
from magnetar.storage.metadata_checks import check_broker_id, check_bundle, dump_json


class LocalCoordination:
    """The :class:`~magnetar.core.metadata.interfaces.CoordinationStore` of one process."""

    def __init__(self) -> None:
        self._brokers: dict[str, dict[str, Any]] = {}
        self._leaving: set[str] = set()
        self._bundles: dict[tuple[str, str], Versioned] = {}
        self._leader: dict[str, Any] | None = None
        self._bundle_data: dict[str, dict[str, Any]] = {}
        self._session_listeners: list[Callable[[SessionState], None]] = []
        self._session_state = SessionState.CONNECTED

    @property
    def session_state(self) -> SessionState:
        return self._session_state

    def add_session_listener(self, listener: Callable[[SessionState], None]) -> None:
        self._session_listeners.append(listener)

    def ping(self) -> int | None:
        """The one process's session: 1 until it ends."""
        return None if self._session_state is SessionState.LOST else 1

    def end_session(self) -> None:
        """The ephemeral records go, and listeners hear that the session is lost."""
        self._brokers.clear()
        self._leaving.clear()
        self._bundles.clear()
        self._leader = None
        if self._session_state is not SessionState.LOST:
            self._session_state = SessionState.LOST
            for listener in self._session_listeners:
                listener(SessionState.LOST)

    def register_broker(self, broker_id: str, data: dict[str, Any]) -> None:
        dump_json("broker data", data)
        if check_broker_id(broker_id) in self._brokers:
            raise AlreadyExists(f"broker {broker_id!r} is already registered")
        self._brokers[broker_id] = copy.deepcopy(data)

    def update_broker(self, broker_id: str, data: dict[str, Any]) -> None:
        """Replace a registered broker's data (its load report, say); NotFound if it is not registered."""
        dump_json("broker data", data)
        if broker_id not in self._brokers:
            raise NotFound(f"broker {broker_id!r} is not registered")
        self._brokers[broker_id] = copy.deepcopy(data)

    def unregister_broker(self, broker_id: str) -> bool:
        if self._brokers.pop(broker_id, None) is None:
            return False
        self._leaving.add(broker_id)
        return True

    def session_alive(self, broker_id: str, session_id: int) -> bool:
        return session_id == self.ping() and (broker_id in self._brokers or broker_id in self._leaving)

    def get_broker(self, broker_id: str) -> dict[str, Any] | None:
        found = self._brokers.get(broker_id)
        return None if found is None else copy.deepcopy(found)

    def list_brokers(self) -> list[str]:
        return sorted(self._brokers)

    def acquire_bundle(self, namespace: str, bundle_range: str, data: dict[str, Any]) -> int:
        key = (namespace, check_bundle(namespace, bundle_range))
        dump_json("ownership data", data)
        if key in self._bundles:
            raise AlreadyExists(f"bundle {namespace}/{bundle_range} is already owned")
        self._bundles[key] = Versioned(copy.deepcopy(data), 0)
        return 0

    def get_bundle_owner(self, namespace: str, bundle_range: str) -> Versioned | None:
        found = self._bundles.get((namespace, check_bundle(namespace, bundle_range)))
        return None if found is None else Versioned(copy.deepcopy(found.data), found.version)

    def update_bundle_owner(self, namespace: str, bundle_range: str, data: dict[str, Any], version: int) -> int:
        key = (namespace, bundle_range)
        dump_json("ownership data", data)
        self._check_version(key, version)
        self._bundles[key] = Versioned(copy.deepcopy(data), version + 1)
        return version + 1

    def release_bundle(self, namespace: str, bundle_range: str, version: int) -> None:
        key = (namespace, bundle_range)
        self._check_version(key, version)
        del self._bundles[key]

    def list_owned_bundles(self, namespace: str) -> dict[str, Versioned]:
        return {bundle: Versioned(copy.deepcopy(found.data), found.version)
                for (ns, bundle), found in sorted(self._bundles.items()) if ns == namespace}

    def elect_leader(self, data: dict[str, Any]) -> bool:
        dump_json("leader data", data)
        if self._leader is not None:
            return False
        self._leader = copy.deepcopy(data)
        return True

    def get_leader(self) -> dict[str, Any] | None:
        return None if self._leader is None else copy.deepcopy(self._leader)

    def put_bundle_data(self, bundle: str, data: dict[str, Any]) -> None:
        namespace, _, bundle_range = bundle.rpartition("/")
        check_bundle(namespace, bundle_range)
        dump_json("bundle data", data)
        self._bundle_data[bundle] = copy.deepcopy(data)

    def get_bundle_data(self, bundle: str) -> dict[str, Any] | None:
        found = self._bundle_data.get(bundle)
        return None if found is None else copy.deepcopy(found)

    def _check_version(self, key: tuple[str, str], version: int) -> None:
        found = self._bundles.get((key[0], check_bundle(*key)))
        if found is None:
            raise NotFound(f"bundle {key[0]}/{key[1]} is not owned")
        if found.version != version:
            raise VersionConflict(f"bundle {key[0]}/{key[1]} is at version {found.version}, not {version}")

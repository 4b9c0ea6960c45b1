"""The metadata store's records in ZooKeeper, one class per concept, each a view of the one
:class:`~magnetar.storage.zookeeper.session.ZooKeeperSession`; the layout is
:mod:`magnetar.storage.zookeeper.paths`. Records are JSON with Pulsar's field names.

A node that holds others can outlive its own record (a tenant deleted while namespaces
remain, as the SQLite store allows; a topic whose cursors are still stored): it is then
kept with no data, and reads as absent.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable, Iterable
from typing import Any

from magnetar.core.metadata.records import (
    AlreadyExists,
    InvalidMetadata,
    NotFound,
    SchemaRecord,
    SessionState,
    VersionConflict,
    Versioned,
)
from magnetar.core.positions import Position
from magnetar.core.subscriptions.cursor_record import CursorRecord
from magnetar.storage.metadata_checks import (
    check_broker_id,
    check_bundle,
    check_cursor,
    check_int,
    check_managed_ledger,
    check_name,
    check_schema,
    check_text,
    decode_ranges,
    dump_json,
    namespace_tenant,
    topic_namespace,
)
from magnetar.storage.sqlite_metadata import FIRST_LEDGER_ID
from magnetar.storage.zookeeper import paths
from magnetar.storage.zookeeper.session import ZooKeeperSession


def _valid(check: Callable[..., object], *args: object) -> bool:
    try:
        check(*args)
    except InvalidMetadata:
        return False
    return True


def _bytes(kind: str, value: Any) -> bytes:
    return dump_json(kind, value).encode()


class ZooKeeperRecords:
    """What every concept shares: the session and the writes that name their record."""

    _zk: ZooKeeperSession

    def _create(self, what: str, path: str, data: bytes) -> None:
        """Create the record; a node kept empty for its children takes it, any other is AlreadyExists."""
        try:
            self._zk.create(path, data)
        except AlreadyExists:
            held, version = self._zk.read(path)
            if held:
                raise AlreadyExists(f"{what} already exists") from None
            self._zk.set(path, data, version)

    def _update(self, what: str, path: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """Replace an existing record with ``change(record)``, at the version it was read at."""
        held, version = self._zk.read(path)
        if not held:
            raise NotFound(f"{what} does not exist")
        self._zk.set(path, json.dumps(change(json.loads(held)), separators=(",", ":")).encode(), version)

    def _put(self, path: str, data: bytes) -> None:
        """Create or replace."""
        try:
            self._zk.set(path, data)
        except NotFound:
            try:
                self._zk.create(path, data)
            except AlreadyExists:
                self._zk.set(path, data)

    def _remove(self, path: str) -> bool:
        """Delete the record; a node that holds others is kept, empty. Whether there was one."""
        held, version = self._zk.read(path)
        if not held:
            return False
        if self._zk.children(path):
            self._zk.set(path, b"", version)
        else:
            self._zk.delete(path, version)
        return True

    def _prune(self, path: str) -> None:
        """Delete a node kept empty once nothing is under it any more."""
        held, version = self._zk.read(path)
        if version >= 0 and not held and not self._zk.children(path):
            try:
                self._zk.delete(path, version)
            except Exception:  # noqa: BLE001 - someone wrote under it meanwhile: it stays
                pass


class ZooKeeperAdmin(ZooKeeperRecords):
    """Clusters (``/admin/clusters``), tenants and namespaces (``/admin/policies``)."""

    def create_cluster(self, name: str, data: dict[str, Any]) -> None:
        path = f"{paths.CLUSTERS}/{check_name('cluster', name)}"
        self._create(f"cluster {name!r}", path, _bytes("cluster data", data))

    def get_cluster(self, name: str) -> dict[str, Any] | None:
        return self._zk.read_json(f"{paths.CLUSTERS}/{name}") if _valid(check_name, "cluster", name) else None

    def update_cluster(self, name: str, data: dict[str, Any]) -> None:
        body = _bytes("cluster data", data)
        self._update(f"cluster {name!r}", f"{paths.CLUSTERS}/{name}", lambda _: json.loads(body))

    def list_clusters(self) -> list[str]:
        return self._zk.children(paths.CLUSTERS)

    def delete_cluster(self, name: str) -> bool:
        return _valid(check_name, "cluster", name) and self._remove(f"{paths.CLUSTERS}/{name}")

    def create_tenant(self, name: str, info: dict[str, Any]) -> None:
        path = f"{paths.POLICIES}/{check_name('tenant', name)}"
        self._create(f"tenant {name!r}", path, _bytes("tenant info", info))

    def get_tenant(self, name: str) -> dict[str, Any] | None:
        return self._zk.read_json(f"{paths.POLICIES}/{name}") if _valid(check_name, "tenant", name) else None

    def update_tenant(self, name: str, info: dict[str, Any]) -> None:
        body = _bytes("tenant info", info)
        if not _valid(check_name, "tenant", name):
            raise NotFound(f"tenant {name!r} does not exist")
        self._update(f"tenant {name!r}", f"{paths.POLICIES}/{name}", lambda _: json.loads(body))

    def list_tenants(self) -> list[str]:
        return [name for name in self._zk.children(paths.POLICIES) if self.get_tenant(name) is not None]

    def delete_tenant(self, name: str) -> bool:
        return _valid(check_name, "tenant", name) and self._remove(f"{paths.POLICIES}/{name}")

    def create_namespace(self, name: str, policies: dict[str, Any] | None = None) -> None:
        """Create ``tenant/namespace``; the caller checks that the tenant exists."""
        namespace_tenant(name)
        self._create(f"namespace {name!r}", f"{paths.POLICIES}/{name}", _bytes("namespace policies", policies or {}))

    def get_namespace_policies(self, name: str) -> dict[str, Any] | None:
        return self._zk.read_json(f"{paths.POLICIES}/{name}") if _valid(namespace_tenant, name) else None

    def put_namespace_policies(self, name: str, policies: dict[str, Any]) -> None:
        """Replace an existing namespace's policies; :class:`NotFound` if it was never created."""
        body = _bytes("namespace policies", policies)
        if not _valid(namespace_tenant, name):
            raise NotFound(f"namespace {name!r} does not exist")
        self._update(f"namespace {name!r}", f"{paths.POLICIES}/{name}", lambda _: json.loads(body))

    def get_versioned_namespace_policies(self, name: str) -> Versioned | None:
        if not _valid(namespace_tenant, name):
            return None
        held, version = self._zk.fresh(f"{paths.POLICIES}/{name}")
        return Versioned(json.loads(held), version) if held else None

    def put_versioned_namespace_policies(self, name: str, policies: dict[str, Any], version: int) -> int:
        body = _bytes("namespace policies", policies)
        check_int("namespace policies version", version, 0)
        if self.get_versioned_namespace_policies(name) is None:
            raise NotFound(f"namespace {name!r} does not exist")
        return self._zk.set(f"{paths.POLICIES}/{name}", body, version)

    def list_namespaces(self, tenant: str) -> list[str]:
        if not _valid(check_name, "tenant", tenant):
            return []
        return [f"{tenant}/{ns}" for ns in self._zk.children(f"{paths.POLICIES}/{tenant}")]

    def delete_namespace(self, name: str) -> bool:
        if not _valid(namespace_tenant, name):
            return False
        deleted = self._remove(f"{paths.POLICIES}/{name}")
        self._prune(f"{paths.POLICIES}/{name.split('/')[0]}")
        return deleted


class ZooKeeperTopics(ZooKeeperRecords):
    """Partitioned-topic metadata (``/admin/partitioned-topics``) and created topics
    (``/managed-ledgers``: the managed ledger's record, its ``properties`` the topic's)."""

    def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        path = paths.topic_path(paths.PARTITIONED_TOPICS, topic)
        body = _bytes("partitioned topic", {"partitions": check_int("partition count", partitions, 1)})
        self._create(f"partitioned topic {topic!r}", path, body)

    def get_partitioned_topic(self, topic: str) -> int | None:
        """The topic's partition count, None if it is not a partitioned topic."""
        if not _valid(topic_namespace, topic):
            return None
        found = self._zk.read_json(paths.topic_path(paths.PARTITIONED_TOPICS, topic))
        return None if found is None else int(found["partitions"])

    def update_partitioned_topic(self, topic: str, partitions: int) -> None:
        check_int("partition count", partitions, 1)
        if not _valid(topic_namespace, topic):
            raise NotFound(f"partitioned topic {topic!r} does not exist")
        self._update(f"partitioned topic {topic!r}", paths.topic_path(paths.PARTITIONED_TOPICS, topic),
                     lambda held: {**held, "partitions": partitions})

    def list_partitioned_topics(self, namespace: str) -> dict[str, int]:
        """The namespace's partitioned topics and their partition counts, sorted by name."""
        found = {topic: self.get_partitioned_topic(topic) for topic in self._topics_under(paths.PARTITIONED_TOPICS,
                                                                                          namespace)}
        return {topic: partitions for topic, partitions in sorted(found.items()) if partitions is not None}

    def delete_partitioned_topic(self, topic: str) -> bool:
        return _valid(topic_namespace, topic) and self._remove(paths.topic_path(paths.PARTITIONED_TOPICS, topic))

    # A created topic and its managed ledger share the node, as in Pulsar: "properties" is
    # the created topic's (absent: never created), the other keys the managed ledger's.

    def create_topic(self, topic: str, properties: dict[str, Any] | None = None) -> None:
        record = {"properties": properties or {}}
        dump_json("topic properties", record["properties"])
        path = paths.topic_path(paths.MANAGED_LEDGERS, topic)
        try:
            self._zk.create(path, _bytes("topic", record))
        except AlreadyExists:
            held, version = self._ledger_node(path)
            if "properties" in held:
                raise AlreadyExists(f"topic {topic!r} already exists") from None
            self._zk.set(path, _bytes("topic", {**held, **record}), version)

    def get_topic(self, topic: str) -> dict[str, Any] | None:
        """The created topic's properties, None if it was never created."""
        if not _valid(topic_namespace, topic):
            return None
        held, _ = self._ledger_node(paths.topic_path(paths.MANAGED_LEDGERS, topic))
        return held.get("properties")

    def update_topic_properties(self, topic: str, properties: dict[str, Any]) -> None:
        dump_json("topic properties", properties)
        if self.get_topic(topic) is None:
            raise NotFound(f"topic {topic!r} does not exist")
        self._update(f"topic {topic!r}", paths.topic_path(paths.MANAGED_LEDGERS, topic),
                     lambda held: {**held, "properties": properties})

    def list_topics(self, namespace: str) -> list[str]:
        return sorted(topic for topic in self._topics_under(paths.MANAGED_LEDGERS, namespace)
                      if self.get_topic(topic) is not None)

    def delete_topic(self, topic: str) -> bool:
        if self.get_topic(topic) is None:
            return False
        path = paths.topic_path(paths.MANAGED_LEDGERS, topic)
        held, version = self._ledger_node(path)
        self._keep_or_delete(path, {key: value for key, value in held.items() if key != "properties"}, version)
        return True

    def get_managed_ledger(self, topic: str) -> Versioned | None:
        if not _valid(topic_namespace, topic):
            return None
        held, version = self._ledger_node(paths.topic_path(paths.MANAGED_LEDGERS, topic))
        info = {key: value for key, value in held.items() if key != "properties"}
        return Versioned(info, version) if "ledgerInfo" in info else None

    def put_managed_ledger(self, topic: str, info: dict[str, Any], version: int) -> int:
        """Create (``version`` -1) or replace the record at ``version``; its new version."""
        check_managed_ledger(topic, info)
        check_int("managed ledger version", version, -1)
        path = paths.topic_path(paths.MANAGED_LEDGERS, topic)
        if version == -1:
            try:
                self._zk.create(path, _bytes("managed ledger info", info))
                return 0
            except AlreadyExists:
                pass
        held, held_version = self._fresh_ledger(topic, path, -1 if version == -1 else version)
        if version == -1 and "ledgerInfo" in held:
            raise AlreadyExists(f"managed ledger of {topic} already exists")
        properties = {"properties": held["properties"]} if "properties" in held else {}
        return self._zk.set(path, _bytes("managed ledger info", {**info, **properties}), held_version)

    def delete_managed_ledger(self, topic: str, version: int) -> None:
        path = paths.topic_path(paths.MANAGED_LEDGERS, topic)
        held, held_version = self._fresh_ledger(topic, path, version)
        properties = {"properties": held["properties"]} if "properties" in held else {}
        self._keep_or_delete(path, properties, held_version)

    def _ledger_node(self, path: str) -> tuple[dict[str, Any], int]:
        held, version = self._zk.read(path)
        return (json.loads(held) if held else {}), version

    def _fresh_ledger(self, topic: str, path: str, version: int) -> tuple[dict[str, Any], int]:
        """The node as ZooKeeper has it now; NotFound without a managed ledger (unless
        ``version`` is -1), VersionConflict when it is not at ``version``."""
        raw, held_version = self._zk.fresh(path)
        held = json.loads(raw) if raw else {}
        if version != -1:
            if "ledgerInfo" not in held:
                raise NotFound(f"managed ledger of {topic} does not exist")
            if held_version != version:
                raise VersionConflict(f"managed ledger of {topic} is at version {held_version}, not {version}")
        return held, held_version

    def _keep_or_delete(self, path: str, rest: dict[str, Any], version: int) -> None:
        """What is left of a topic's node: kept while it holds something, else deleted."""
        if rest or self._zk.children(path):
            self._zk.set(path, _bytes("managed ledger info", rest) if rest else b"", version)
        else:
            self._zk.delete(path, version)

    def _topics_under(self, root: str, namespace: str) -> list[str]:
        if not _valid(namespace_tenant, namespace):
            return []
        return [paths.topic_of(domain, namespace, encoded) for domain in paths.DOMAINS
                for encoded in self._zk.children(f"{root}/{namespace}/{domain}")]


class ZooKeeperCursors(ZooKeeperRecords):
    """Each cursor's ``ManagedCursorInfo`` under its topic's managed ledger: the position in
    the record itself (``cursorsLedgerId`` -1, as Pulsar writes when no cursor ledger holds it)."""

    def put_cursor(self, topic: str, name: str, record: CursorRecord) -> None:
        """Store a cursor's whole state, replacing the previous one atomically."""
        self.put_cursors([(topic, name, record)])

    def put_cursors(self, cursors: Iterable[tuple[str, str, CursorRecord]]) -> None:
        """Store several cursors in one transaction: all or none."""
        bodies = {_cursor_path(topic, name): _cursor_body(topic, name, record) for topic, name, record in cursors}
        for topic_path in {path.rsplit("/", 1)[0] for path in bodies}:
            if self._zk.read(topic_path)[1] < 0:  # cursors go under their topic's node
                self._zk.ensure(topic_path)
        for attempt in range(3):
            operations = [("set", path, body, -1) if self._zk.read(path)[1] >= 0 else ("create", path, body, -1)
                          for path, body in bodies.items()]
            try:
                if operations:
                    self._zk.transaction(operations)
                return
            except (AlreadyExists, NotFound):
                if attempt == 2:
                    raise  # another writer keeps creating and deleting these cursors

    def get_cursor(self, topic: str, name: str) -> CursorRecord | None:
        if not _valid(topic_namespace, topic) or not _valid(check_text, "cursor name", name):
            return None
        found = self._zk.read_json(_cursor_path(topic, name))
        return None if found is None else _cursor_record(found)

    def list_cursors(self, topic: str) -> dict[str, CursorRecord]:
        if not _valid(topic_namespace, topic):
            return {}
        found = {paths.decode(child): self.get_cursor(topic, paths.decode(child))
                 for child in self._zk.children(paths.topic_path(paths.MANAGED_LEDGERS, topic))}
        return {name: record for name, record in sorted(found.items()) if record is not None}

    def delete_cursor(self, topic: str, name: str) -> bool:
        if not _valid(topic_namespace, topic) or not _valid(check_text, "cursor name", name):
            return False
        deleted = self._zk.delete(_cursor_path(topic, name))
        self._prune(paths.topic_path(paths.MANAGED_LEDGERS, topic))
        return deleted

    def delete_cursors(self, topic: str) -> int:
        """Delete every cursor of ``topic``; returns how many there were."""
        return sum(self.delete_cursor(topic, name) for name in self.list_cursors(topic))


def _cursor_path(topic: str, name: str) -> str:
    return f"{paths.topic_path(paths.MANAGED_LEDGERS, topic)}/{paths.encode(name)}"


def _cursor_body(topic: str, name: str, record: CursorRecord) -> bytes:
    mark_delete, ranges, properties = check_cursor(topic, name, record)
    return json.dumps({
        "cursorsLedgerId": -1,
        "markDeleteLedgerId": mark_delete.ledger_id,
        "markDeleteEntryId": mark_delete.entry_id,
        # the ranges as the SQLite store keeps them, base64: 32 bytes a range, not ~100 in JSON
        "individualDeletedRanges": base64.b64encode(ranges).decode("ascii"),
        "properties": json.loads(properties),
        "lastActive": record.last_active_ms,
    }, separators=(",", ":")).encode()


def _cursor_record(held: dict[str, Any]) -> CursorRecord:
    return CursorRecord(Position(held["markDeleteLedgerId"], held["markDeleteEntryId"]),
                        decode_ranges(base64.b64decode(held["individualDeletedRanges"])),
                        held["properties"], held["lastActive"])


class ZooKeeperSchemas(ZooKeeperRecords):
    """Schema versions, one node each, under the topic's schema id (``/schemas/<tenant>/<ns>/<topic>``)."""

    def add_schema(self, topic: str, schema: SchemaRecord) -> int:
        """Store the next version of the topic's schema and return its number (from 0)."""
        while True:
            versions = self._versions(topic)
            version = versions[-1] + 1 if versions else 0
            try:
                self.put_schema(topic, version, schema)
                return version
            except AlreadyExists:
                continue  # another broker stored this number first: take the next

    def put_schema(self, topic: str, version: int, schema: SchemaRecord) -> None:
        """Store version ``version`` (the caller numbers them); a number twice is AlreadyExists."""
        properties = check_schema(topic, schema)
        check_int("schema version", version, 0)
        body = json.dumps({"type": schema.schema_type, "data": base64.b64encode(schema.data).decode("ascii"),
                           "properties": json.loads(properties), "timestamp": schema.timestamp_ms,
                           "deleted": schema.deleted}, separators=(",", ":")).encode()
        try:
            self._zk.create(f"{paths.schema_path(topic)}/{version}", body)
        except AlreadyExists:
            raise AlreadyExists(f"schema version {version} of {topic} already exists") from None

    def get_schemas(self, topic: str) -> list[SchemaRecord]:
        """Every version of the topic's schema; the list index is the version."""
        found = [self.get_schema(topic, version) for version in self._versions(topic)]
        return [record for record in found if record is not None]

    def get_schema(self, topic: str, version: int) -> SchemaRecord | None:
        if not _valid(topic_namespace, topic):
            return None
        held = self._zk.read_json(f"{paths.schema_path(topic)}/{version}")
        if held is None:
            return None
        return SchemaRecord(held["type"], base64.b64decode(held["data"]), held["properties"], held["timestamp"],
                            held["deleted"])

    def delete_schemas(self, topic: str) -> int:
        """Delete every version of the topic's schema; returns how many there were."""
        deleted = sum(self._zk.delete(f"{paths.schema_path(topic)}/{version}") for version in self._versions(topic))
        if deleted:
            self._prune(paths.schema_path(topic))
        return deleted

    def _versions(self, topic: str) -> list[int]:
        if not _valid(topic_namespace, topic):
            return []
        return sorted(int(child) for child in self._zk.children(paths.schema_path(topic)) if child.isdigit())


class ZooKeeperPoliciesAndKeys(ZooKeeperRecords):
    """Topic policies (``/admin/topic-policies``), the ledger id counter and other JSON keys."""

    _ledger_id_block: int
    _ledger_ids_lock: threading.Lock
    _next_ledger_id: int
    _reserved_until: int

    @property
    def policy_changes(self) -> int:
        """Policy writes made through this store or seen through its watches so far."""
        return self._zk.policy_changes

    def get_topic_policies(self, topic: str) -> dict[str, Any] | None:
        """A topic's own policies (Pulsar's ``TopicPolicies`` JSON), None when none is set."""
        if not _valid(topic_namespace, topic):
            return None
        return self._zk.read_json(paths.topic_path(paths.TOPIC_POLICIES, topic))

    def put_topic_policies(self, topic: str, policies: dict[str, Any]) -> None:
        """Replace a topic's policies; an empty dict removes them."""
        path = paths.topic_path(paths.TOPIC_POLICIES, topic)
        if policies:
            self._put(path, _bytes("topic policies", policies))
        else:
            self._zk.delete(path)

    def delete_topic_policies(self, topic: str) -> bool:
        return _valid(topic_namespace, topic) and self._zk.delete(paths.topic_path(paths.TOPIC_POLICIES, topic))

    def get_json(self, key: str) -> Any:
        """The value stored under ``key``, None if there is none."""
        if not _valid(check_text, "key", key):
            return None
        held, _ = self._zk.read(f"{paths.KEYS}/{paths.encode(key)}")
        return None if held is None else json.loads(held)

    def put_json(self, key: str, value: Any) -> None:
        body = dump_json(f"value for {key!r}", value, object_only=False).encode()
        self._put(f"{paths.KEYS}/{paths.encode(check_text('key', key))}", body)

    def delete(self, key: str) -> bool:
        return _valid(check_text, "key", key) and self._zk.delete(f"{paths.KEYS}/{paths.encode(key)}")

    def list_prefix(self, prefix: str) -> list[str]:
        """Keys starting with ``prefix``, sorted."""
        return sorted(key for key in map(paths.decode, self._zk.children(paths.KEYS)) if key.startswith(prefix))

    def next_ledger_id(self) -> int:
        """A ledger id no broker on this ZooKeeper was or will be handed."""
        with self._ledger_ids_lock:
            if self._next_ledger_id >= self._reserved_until:
                self._next_ledger_id, self._reserved_until = self.reserve_ledger_ids(self._ledger_id_block)
            ledger_id = self._next_ledger_id
            self._next_ledger_id += 1
            return ledger_id

    def reserve_ledger_ids(self, count: int) -> tuple[int, int]:
        """Ids ``[start, end)`` no other reservation gets, whichever store asks: the counter
        moves by compare-and-set on its node's version, retried when another store won."""
        check_int("ledger id count", count, 1)
        while True:
            held, version = self._zk.fresh(paths.LEDGER_IDS)
            start = FIRST_LEDGER_ID if held is None else int(json.loads(held)["nextLedgerId"])
            body = json.dumps({"nextLedgerId": start + count}).encode()
            try:
                if held is None:
                    self._zk.create(paths.LEDGER_IDS, body)
                else:
                    self._zk.set(paths.LEDGER_IDS, body, version)
            except (AlreadyExists, VersionConflict):
                continue
            return start, start + count


class ZooKeeperCoordination(ZooKeeperRecords):
    """Broker registrations (``/loadbalance/brokers``) and bundle ownership (``/namespace``):
    ephemeral nodes, gone when the session that made them ends."""

    @property
    def session_state(self) -> SessionState:
        return self._zk.session_state

    def add_session_listener(self, listener: Callable[[SessionState], None]) -> None:
        """``listener`` hears each change of the session's state, on kazoo's thread: it must
        not block (hand the event to the broker's loop)."""
        self._zk.add_session_listener(listener)

    def ping(self) -> int | None:
        """A read from the server (not the cache) of the brokers' node, there or not; the
        session it was answered in."""
        self._zk.fresh(paths.BROKERS)
        client_id = self._zk.client_id
        return None if client_id is None else client_id[0]

    def register_broker(self, broker_id: str, data: dict[str, Any]) -> None:
        body = _bytes("broker data", data)
        self._zk.ensure(paths.LEAVING)  # the parent of the leaving mark, made in one transaction later
        try:
            self._zk.create(f"{paths.BROKERS}/{check_broker_id(broker_id)}", body, ephemeral=True)
        except AlreadyExists:
            raise AlreadyExists(f"broker {broker_id!r} is already registered") from None

    def update_broker(self, broker_id: str, data: dict[str, Any]) -> None:
        """Replace a registered broker's data (its load report, say); NotFound if it is not registered."""
        body = _bytes("broker data", data)
        try:
            self._zk.set(f"{paths.BROKERS}/{check_broker_id(broker_id)}", body)
        except NotFound:
            raise NotFound(f"broker {broker_id!r} is not registered") from None

    def unregister_broker(self, broker_id: str) -> bool:
        if not _valid(check_broker_id, broker_id):
            return False
        try:
            self._zk.transaction([("delete", f"{paths.BROKERS}/{broker_id}", b"", -1),
                                  ("create-ephemeral", f"{paths.LEAVING}/{broker_id}", b"", -1)])
        except NotFound:
            return False
        except AlreadyExists:  # marked before, in this session: the registration is gone all the same
            return self._zk.delete(f"{paths.BROKERS}/{broker_id}")
        return True

    def session_alive(self, broker_id: str, session_id: int) -> bool:
        if not _valid(check_broker_id, broker_id):
            return False
        return session_id in (self._zk.ephemeral_owner(f"{paths.BROKERS}/{broker_id}"),
                              self._zk.ephemeral_owner(f"{paths.LEAVING}/{broker_id}"))

    def get_broker(self, broker_id: str) -> dict[str, Any] | None:
        return self._zk.read_json(f"{paths.BROKERS}/{broker_id}") if _valid(check_broker_id, broker_id) else None

    def list_brokers(self) -> list[str]:
        return self._zk.children(paths.BROKERS)

    def acquire_bundle(self, namespace: str, bundle_range: str, data: dict[str, Any]) -> int:
        body = _bytes("ownership data", data)
        try:
            self._zk.create(_bundle_path(namespace, bundle_range), body, ephemeral=True)
        except AlreadyExists:
            raise AlreadyExists(f"bundle {namespace}/{bundle_range} is already owned") from None
        return 0

    def get_bundle_owner(self, namespace: str, bundle_range: str) -> Versioned | None:
        held, version = self._zk.read(_bundle_path(namespace, bundle_range))
        return None if held is None else Versioned(json.loads(held), version)

    def update_bundle_owner(self, namespace: str, bundle_range: str, data: dict[str, Any], version: int) -> int:
        body = _bytes("ownership data", data)
        try:
            return self._zk.set(_bundle_path(namespace, bundle_range), body, version)
        except NotFound:
            raise NotFound(f"bundle {namespace}/{bundle_range} is not owned") from None

    def release_bundle(self, namespace: str, bundle_range: str, version: int) -> None:
        if not self._zk.delete(_bundle_path(namespace, bundle_range), version):
            raise NotFound(f"bundle {namespace}/{bundle_range} is not owned")

    def list_owned_bundles(self, namespace: str) -> dict[str, Versioned]:
        namespace_tenant(namespace)
        found = {bundle: self.get_bundle_owner(namespace, bundle)
                 for bundle in self._zk.children(f"{paths.OWNERSHIP}/{namespace}")}
        return {bundle: owner for bundle, owner in found.items() if owner is not None}

    def elect_leader(self, data: dict[str, Any]) -> bool:
        try:
            self._zk.create(paths.LEADER, _bytes("leader data", data), ephemeral=True)
        except AlreadyExists:
            return False
        return True

    def get_leader(self) -> dict[str, Any] | None:
        return self._zk.read_json(paths.LEADER)

    def put_bundle_data(self, bundle: str, data: dict[str, Any]) -> None:
        self._put(_bundle_data_path(bundle), _bytes("bundle data", data))

    def get_bundle_data(self, bundle: str) -> dict[str, Any] | None:
        return self._zk.read_json(_bundle_data_path(bundle))


def _bundle_data_path(bundle: str) -> str:
    namespace, _, bundle_range = bundle.rpartition("/")
    return f"{paths.BUNDLE_DATA}/{namespace}/{check_bundle(namespace, bundle_range)}"


def _bundle_path(namespace: str, bundle_range: str) -> str:
    return f"{paths.OWNERSHIP}/{namespace}/{check_bundle(namespace, bundle_range)}"

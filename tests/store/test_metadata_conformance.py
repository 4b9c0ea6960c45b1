"""One behaviour suite over every metadata store: the in-memory twin, SQLite on real files,
and ZooKeeper (a real server, one per test run; each test in a chroot of its own).

What only a shared store can show (a write through one store seen by another, ledger ids
of two stores racing, ephemeral records and the session) runs on the stores two brokers can
share: the SQLite file (two connections) and ZooKeeper (two sessions).
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.cluster.bundles_data import bundles_data, bundles_of
from magnetar.core.cluster.namespace_bundles import NamespaceBundle
from magnetar.core.cluster.stored_split import split_in_store
from magnetar.core.metadata.interfaces import BrokerMetadataStore
from magnetar.core.metadata.policy_updates import update_namespace_policies
from magnetar.core.metadata.records import MetadataUnavailable, SessionState, VersionConflict, Versioned
from magnetar.core.positions import Position
from magnetar.storage import (
    AlreadyExists,
    CursorRecord,
    InvalidMetadata,
    MemoryMetadataStore,
    MetadataStore,
    NotFound,
    SchemaRecord,
)
from magnetar.storage.metadata_store import FIRST_LEDGER_ID
from magnetar.storage.metadata_stores import open_metadata_store
from magnetar.storage.zookeeper.store import ZooKeeperMetadataStore
from magnetar.testing.zookeeper_process import ZooKeeperProcess, expire_session

TOPIC = "persistent://public/default/orders"
BUNDLE = "0x00000000_0x40000000"
T = TypeVar("T")
#: how long a change may take to reach another store
SEEN_WITHIN_S = 1.0

#: opens another store on the same data (None: the store shares nothing)
OpenStore = Callable[..., BrokerMetadataStore]


@pytest.fixture(params=["memory", "sqlite-file", "zookeeper"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenStore]:
    opened: list[BrokerMetadataStore] = []
    chroot = f"/test-{uuid.uuid4().hex[:12]}"

    def open_one(closed_by_caller: bool = False, **options: int) -> BrokerMetadataStore:
        store: BrokerMetadataStore
        if request.param == "memory":
            store = MemoryMetadataStore(**options)
        elif request.param == "sqlite-file":
            store = MetadataStore(tmp_path / "metadata.db", **options)
        else:
            server: ZooKeeperProcess = request.getfixturevalue("zookeeper")
            store = ZooKeeperMetadataStore(server.url(chroot), session_timeout_ms=10_000, operation_timeout_s=10,
                                           **options)
        if not closed_by_caller:
            opened.append(store)
        return store

    open_one.shared = request.param != "memory"  # type: ignore[attr-defined]
    yield open_one
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: OpenStore) -> BrokerMetadataStore:
    return open_store()


@pytest.fixture
def two_stores(open_store: OpenStore) -> tuple[BrokerMetadataStore, BrokerMetadataStore]:
    if not open_store.shared:  # type: ignore[attr-defined]
        pytest.skip("the in-memory store is one broker's alone")
    return open_store(), open_store()


def eventually(check: Callable[[], bool], timeout_s: float = SEEN_WITHIN_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not seen within {timeout_s} s"
        time.sleep(0.005)


# -- every operation, on every store ----------------------------------------------------


def test_tenants_crud(store: BrokerMetadataStore) -> None:
    info = {"adminRoles": ["admin"], "allowedClusters": ["standalone"]}
    store.create_tenant("public", info)
    store.create_tenant("acme", {"adminRoles": [], "allowedClusters": []})
    with pytest.raises(AlreadyExists, match="tenant 'public'"):
        store.create_tenant("public", {})
    assert store.get_tenant("public") == info
    assert store.get_tenant("missing") is None
    assert store.list_tenants() == ["acme", "public"]
    store.update_tenant("acme", {"adminRoles": ["a"], "allowedClusters": ["c"]})
    assert store.get_tenant("acme") == {"adminRoles": ["a"], "allowedClusters": ["c"]}
    with pytest.raises(NotFound):
        store.update_tenant("missing", {})
    assert store.delete_tenant("acme")
    assert not store.delete_tenant("acme")
    assert store.list_tenants() == ["public"]


def test_clusters_crud(store: BrokerMetadataStore) -> None:
    store.create_cluster("standalone", {"serviceUrl": "http://localhost:8080"})
    with pytest.raises(AlreadyExists):
        store.create_cluster("standalone", {})
    store.update_cluster("standalone", {"serviceUrl": "http://h:8080"})
    assert store.get_cluster("standalone") == {"serviceUrl": "http://h:8080"}
    assert store.list_clusters() == ["standalone"]
    assert store.delete_cluster("standalone")
    assert store.get_cluster("standalone") is None


def test_namespaces_crud(store: BrokerMetadataStore) -> None:
    store.create_namespace("public/default")
    store.create_namespace("public/b", {"retention_policies": {"retentionTimeInMinutes": 60}})
    store.create_namespace("other/x")
    with pytest.raises(AlreadyExists):
        store.create_namespace("public/default")
    assert store.get_namespace_policies("public/default") == {}
    store.put_namespace_policies("public/default", {"deduplicationEnabled": True})
    assert store.get_namespace_policies("public/default") == {"deduplicationEnabled": True}
    with pytest.raises(NotFound):
        store.put_namespace_policies("public/missing", {})
    assert store.list_namespaces("public") == ["public/b", "public/default"]
    assert store.delete_namespace("public/b")
    assert store.list_namespaces("public") == ["public/default"]


def test_namespace_policies_change_by_compare_and_set(store: BrokerMetadataStore) -> None:
    assert store.get_versioned_namespace_policies("t/ns") is None
    with pytest.raises(NotFound):
        store.put_versioned_namespace_policies("t/ns", {}, 0)
    store.create_namespace("t/ns", {"ttl": 1})
    first = store.get_versioned_namespace_policies("t/ns")
    assert first is not None and first.data == {"ttl": 1}
    second = store.put_versioned_namespace_policies("t/ns", {"ttl": 2}, first.version)
    assert second != first.version
    with pytest.raises(VersionConflict):
        store.put_versioned_namespace_policies("t/ns", {"ttl": 3}, first.version)  # a stale read
    assert store.get_versioned_namespace_policies("t/ns") == Versioned({"ttl": 2}, second)
    store.put_namespace_policies("t/ns", {"ttl": 4})  # an unconditional write moves the version too
    with pytest.raises(VersionConflict):
        store.put_versioned_namespace_policies("t/ns", {"ttl": 5}, second)
    with pytest.raises(InvalidMetadata, match="namespace policies version"):
        store.put_versioned_namespace_policies("t/ns", {}, -1)
    assert store.get_namespace_policies("t/ns") == {"ttl": 4}


class SplitInBetween:
    """A store whose first read of a namespace's policies lets another split write before
    the split that read them writes."""

    def __init__(self, store: BrokerMetadataStore, other: Callable[[], object]) -> None:
        self._store = store
        self._other: Callable[[], object] | None = other

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    def get_versioned_namespace_policies(self, name: str) -> Versioned | None:
        return self._then_the_other(self._store.get_versioned_namespace_policies(name))

    def get_namespace_policies(self, name: str) -> dict[str, Any] | None:
        return self._then_the_other(self._store.get_namespace_policies(name))

    def _then_the_other(self, held: T) -> T:
        if self._other is not None:
            other, self._other = self._other, None
            other()
        return held


def split_low(store: BrokerMetadataStore) -> object:
    return split_in_store(store, NamespaceBundle.parse("t/ns", "0x00000000_0x80000000"), "range_equally_divide", [])


def split_high(store: BrokerMetadataStore) -> object:
    return split_in_store(store, NamespaceBundle.parse("t/ns", "0x80000000_0xffffffff"), "range_equally_divide", [])


def set_ttl(store: BrokerMetadataStore) -> object:
    return update_namespace_policies(store, "t/ns", lambda policies: {**policies, "message_ttl_in_seconds": 60})


@pytest.mark.parametrize(("first", "between", "expected"), [
    (split_low, split_high, {"bundles": ["0x00000000", "0x40000000", "0x80000000", "0xbfffffff", "0xffffffff"]}),
    (set_ttl, split_high, {"bundles": ["0x00000000", "0x80000000", "0xbfffffff", "0xffffffff"], "ttl": 60}),
    (split_low, set_ttl, {"bundles": ["0x00000000", "0x40000000", "0x80000000", "0xffffffff"], "ttl": 60}),
], ids=["two-splits", "policy-then-split", "split-then-policy"])
def test_racing_changes_of_a_namespaces_policies_both_survive(
        open_store: OpenStore, first: Callable[[BrokerMetadataStore], object],
        between: Callable[[BrokerMetadataStore], object], expected: dict[str, object]) -> None:
    """``between`` writes after ``first`` read the policies and before it writes them."""
    a = open_store()
    b = open_store() if open_store.shared else a  # type: ignore[attr-defined]
    a.create_namespace("t/ns", {"bundles": {"boundaries": ["0x00000000", "0x80000000", "0xffffffff"],
                                            "numBundles": 2}})
    first(SplitInBetween(a, lambda: between(b)))  # type: ignore[arg-type]
    policies = a.get_namespace_policies("t/ns")
    assert policies is not None
    assert bundles_data(bundles_of("t/ns", policies))["boundaries"] == expected["bundles"]
    assert policies.get("message_ttl_in_seconds") == expected.get("ttl")


def test_topics_and_partitioned_topics(store: BrokerMetadataStore) -> None:
    store.create_partitioned_topic("persistent://public/default/p", 4)
    store.create_partitioned_topic("non-persistent://public/default/np", 2)
    store.create_partitioned_topic("persistent://public/other/q", 1)
    with pytest.raises(AlreadyExists):
        store.create_partitioned_topic("persistent://public/default/p", 8)
    assert store.get_partitioned_topic("persistent://public/default/p") == 4
    assert store.get_partitioned_topic(TOPIC) is None
    store.update_partitioned_topic("persistent://public/default/p", 6)
    assert store.list_partitioned_topics("public/default") == {
        "non-persistent://public/default/np": 2,
        "persistent://public/default/p": 6,
    }
    assert store.delete_partitioned_topic("persistent://public/default/p")
    with pytest.raises(NotFound):
        store.update_partitioned_topic("persistent://public/default/p", 7)

    store.create_topic(TOPIC, {"owner": "team-a"})
    store.create_topic("persistent://public/default/plain")
    with pytest.raises(AlreadyExists):
        store.create_topic(TOPIC)
    assert store.get_topic(TOPIC) == {"owner": "team-a"}
    assert store.get_topic("persistent://public/default/plain") == {}
    assert store.get_topic("persistent://public/default/never") is None
    store.update_topic_properties(TOPIC, {"owner": "team-b"})
    assert store.get_topic(TOPIC) == {"owner": "team-b"}
    assert store.list_topics("public/default") == [TOPIC, "persistent://public/default/plain"]
    assert store.delete_topic(TOPIC)
    assert not store.delete_topic(TOPIC)


def test_cursor_round_trip(store: BrokerMetadataStore) -> None:
    record = CursorRecord(
        mark_delete=Position(7, 41),
        # The last range spans a ledger boundary (Pulsar #7554).
        individually_deleted=[(Position(7, 42), Position(7, 45)), (Position(7, 99), Position(9, 3))],
        properties={"position": 12, "owner": "x", "negative": -(2**63)},
        last_active_ms=1_700_000_000_123,
    )
    store.put_cursor(TOPIC, "sub-a", record)
    assert store.get_cursor(TOPIC, "sub-a") == record
    assert store.get_cursor(TOPIC, "sub-b") is None
    newer = CursorRecord(Position(9, 3))
    store.put_cursor(TOPIC, "sub-a", newer)
    assert store.get_cursor(TOPIC, "sub-a") == newer
    store.put_cursors([(TOPIC, "sub-b", record), ("persistent://public/default/other", "sub-a", record)])
    assert store.list_cursors(TOPIC) == {"sub-a": newer, "sub-b": record}
    assert store.delete_cursor(TOPIC, "sub-a")
    assert not store.delete_cursor(TOPIC, "sub-a")
    assert store.delete_cursors(TOPIC) == 1
    assert store.list_cursors(TOPIC) == {}
    assert store.get_cursor("persistent://public/default/other", "sub-a") == record


def test_cursor_with_20k_ranges_round_trips(store: BrokerMetadataStore) -> None:
    """Pulsar #742/#25540 dropped ranges beyond 10000 at persist time; this store keeps all."""
    ranges = [(Position(3, 2 * i), Position(3, 2 * i + 1)) for i in range(20_000)]
    store.put_cursor(TOPIC, "holes", CursorRecord(Position(3, -1), ranges))
    restored = store.get_cursor(TOPIC, "holes")
    assert restored is not None and restored.individually_deleted == ranges


def test_a_bad_cursor_in_a_batch_writes_none_of_it(store: BrokerMetadataStore) -> None:
    good = CursorRecord(Position(1, 1))
    bad = CursorRecord(Position(1, 1), [(Position(5, 0), Position(4, 0))])
    with pytest.raises(InvalidMetadata, match="lower bound above upper"):
        store.put_cursors([(TOPIC, "good", good), (TOPIC, "bad", bad)])
    assert store.list_cursors(TOPIC) == {}


def test_schemas_are_versioned_from_zero(store: BrokerMetadataStore) -> None:
    v0 = SchemaRecord("AVRO", b'{"type":"record"}', {"k": "v"})
    v1 = SchemaRecord("AVRO", b'{"type":"record","fields":[]}')
    assert store.add_schema(TOPIC, v0) == 0
    assert store.add_schema(TOPIC, v1) == 1
    assert store.get_schemas(TOPIC) == [v0, v1]
    assert store.get_schema(TOPIC, 1) == v1
    assert store.get_schema(TOPIC, 2) is None
    assert store.get_schemas("persistent://public/default/none") == []
    assert store.delete_schemas(TOPIC) == 2
    assert store.get_schemas(TOPIC) == []


def test_schema_versions_keep_their_time_and_delete_markers(store: BrokerMetadataStore) -> None:
    stored = SchemaRecord("STRING", b"", {}, timestamp_ms=1_700_000_000_123)
    marker = SchemaRecord("NONE", b"", {}, timestamp_ms=1_700_000_000_999, deleted=True)
    store.add_schema(TOPIC, stored)
    store.add_schema(TOPIC, marker)
    assert store.get_schemas(TOPIC) == [stored, marker]


def test_schema_versions_numbered_by_the_caller_are_stored_once(store: BrokerMetadataStore) -> None:
    store.put_schema(TOPIC, 0, SchemaRecord("STRING", b""))
    store.put_schema(TOPIC, 1, SchemaRecord("INT32", b""))
    with pytest.raises(AlreadyExists, match="schema version 1 of"):
        store.put_schema(TOPIC, 1, SchemaRecord("INT64", b""))
    assert [r.schema_type for r in store.get_schemas(TOPIC)] == ["STRING", "INT32"]
    assert store.add_schema(TOPIC, SchemaRecord("JSON", b"{}")) == 2


def test_generic_json_key_value(store: BrokerMetadataStore) -> None:
    store.put_json("a/b/1", {"x": [1, 2.5, None, "s"]})
    store.put_json("a/b/2", 7)
    store.put_json("a/c", "text")
    store.put_json("a%", True)
    assert store.get_json("a/b/1") == {"x": [1, 2.5, None, "s"]}
    assert store.get_json("missing") is None
    assert store.list_prefix("a/b/") == ["a/b/1", "a/b/2"]
    assert store.list_prefix("a") == ["a%", "a/b/1", "a/b/2", "a/c"]
    assert store.list_prefix("a%") == ["a%"]  # no LIKE wildcards
    assert store.list_prefix("") == ["a%", "a/b/1", "a/b/2", "a/c"]
    store.put_json("a/c", "replaced")
    assert store.get_json("a/c") == "replaced"
    assert store.delete("a/c")
    assert not store.delete("a/c")


def test_ledger_ids_are_unique_and_increasing(store: BrokerMetadataStore) -> None:
    ids = [store.next_ledger_id() for _ in range(200)]
    assert ids == list(range(FIRST_LEDGER_ID, FIRST_LEDGER_ID + 200))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda s: s.create_tenant("", {}), "invalid tenant name"),
        (lambda s: s.create_tenant("a/b", {}), "invalid tenant name"),
        (lambda s: s.create_tenant("ok", ["not", "a", "dict"]), "must be a JSON object"),
        (lambda s: s.create_tenant("ok", {"roles": {1, 2}}), "not JSON-serializable"),
        (lambda s: s.create_cluster("c", {"x": float("nan")}), "not JSON-serializable"),
        (lambda s: s.create_namespace("public"), "expected 'tenant/namespace'"),
        (lambda s: s.create_namespace("public/a/b"), "expected 'tenant/namespace'"),
        (lambda s: s.create_namespace("pub lic/ns"), "invalid tenant name"),
        (lambda s: s.create_topic("orders"), "invalid topic name"),
        (lambda s: s.create_topic("http://public/default/t"), "invalid topic name"),
        (lambda s: s.create_partitioned_topic(TOPIC, 0), "partition count"),
        (lambda s: s.create_partitioned_topic(TOPIC, True), "partition count"),
        (lambda s: s.put_cursor(TOPIC, "", CursorRecord(Position(1, 1))), "cursor name"),
        (lambda s: s.put_cursor(TOPIC, "c", CursorRecord((1, "x"))), "mark-delete position"),  # type: ignore[arg-type]
        (lambda s: s.put_cursor(TOPIC, "c", CursorRecord(Position(1, 1), properties={"k": 1.5})), "property"),  # type: ignore[dict-item]
        (
            lambda s: s.put_cursor(TOPIC, "c", CursorRecord(Position(1, 1), properties={"k": True})),
            "property",
        ),
        (lambda s: s.add_schema(TOPIC, SchemaRecord("", b"")), "schema type"),
        (lambda s: s.add_schema(TOPIC, SchemaRecord("AVRO", "text")), "must be bytes"),  # type: ignore[arg-type]
        (lambda s: s.put_json("", 1), "invalid key"),
    ],
)
def test_bad_input_is_refused_with_a_clear_error(store: BrokerMetadataStore, call: object, match: str) -> None:
    with pytest.raises(InvalidMetadata, match=match) as raised:
        call(store)  # type: ignore[operator]
    assert isinstance(raised.value, ValueError)



def each_moves(count: Callable[[], int], steps: list[Callable[[], object]]) -> None:
    for step in steps:
        before = count()
        step()
        assert count() > before, step


def test_policy_changes_move_on_policy_writes_only(store: BrokerMetadataStore) -> None:
    """Brokers keep resolved policies while this count stands still; topic and cursor
    writes (made all the time) must not move it, policy writes must."""
    start = store.policy_changes
    store.create_tenant("t", {})
    store.create_topic("persistent://t/ns/a")
    store.put_json("other", {"x": 1})
    assert store.policy_changes == start
    steps = [lambda: store.create_namespace("t/ns"),
             lambda: store.put_namespace_policies("t/ns", {"message_ttl_in_seconds": 5}),
             lambda: store.put_topic_policies("persistent://t/ns/a", {"messageTTL": 3}),
             lambda: store.put_topic_policies("persistent://t/ns/a", {}),
             lambda: store.delete_topic_policies("persistent://t/ns/a"),
             lambda: store.delete_namespace("t/ns")]
    each_moves(lambda: store.policy_changes, steps)


def test_topic_list_changes_move_on_what_changes_a_topic_list_and_not_on_cursor_writes(
        store: BrokerMetadataStore) -> None:
    """The console keeps its topic list while this count stands still; cursor writes (made
    every second on a busy broker) must not move it, creating or deleting topics must."""
    store.create_tenant("t", {})
    steps = [lambda: store.create_namespace("t/ns"),
             lambda: store.create_topic("persistent://t/ns/a"),
             lambda: store.create_partitioned_topic("persistent://t/ns/p", 2),
             lambda: store.update_partitioned_topic("persistent://t/ns/p", 3),
             lambda: store.delete_partitioned_topic("persistent://t/ns/p"),
             lambda: store.delete_topic("persistent://t/ns/a")]
    each_moves(lambda: store.topic_list_changes, steps)
    store.create_topic("persistent://t/ns/b")
    store.put_cursor("persistent://t/ns/b", "s", CursorRecord(Position(1, 0)))  # their nodes are made once
    store.put_json("other", {"x": 0})
    before = store.topic_list_changes
    for entry in range(5):
        store.put_cursor("persistent://t/ns/b", "s", CursorRecord(Position(1, entry)))
        store.put_cursors([("persistent://t/ns/b", "s", CursorRecord(Position(1, entry + 1)))])
    store.put_json("other", {"x": 1})
    store.put_namespace_policies("t/ns", {"message_ttl_in_seconds": 5})
    assert store.topic_list_changes == before


# -- managed ledger records -------------------------------------------------------------


def ledger_info(*ledger_ids: int) -> dict[str, object]:
    return {"ledgerInfo": [{"ledgerId": i, "entries": 10, "size": 100, "timestamp": 1_700_000_000_000}
                           for i in ledger_ids]}


def test_managed_ledger_records_change_by_compare_and_set(store: BrokerMetadataStore) -> None:
    assert store.get_managed_ledger(TOPIC) is None
    first = store.put_managed_ledger(TOPIC, ledger_info(1), -1)
    with pytest.raises(AlreadyExists):
        store.put_managed_ledger(TOPIC, ledger_info(2), -1)
    assert store.get_managed_ledger(TOPIC) == Versioned(ledger_info(1), first)
    second = store.put_managed_ledger(TOPIC, ledger_info(1, 2), first)
    assert second != first
    with pytest.raises(VersionConflict):
        store.put_managed_ledger(TOPIC, ledger_info(1, 3), first)  # another broker's stale view
    with pytest.raises(VersionConflict):
        store.delete_managed_ledger(TOPIC, first)
    assert store.get_managed_ledger(TOPIC) == Versioned(ledger_info(1, 2), second)
    store.delete_managed_ledger(TOPIC, second)
    assert store.get_managed_ledger(TOPIC) is None
    with pytest.raises(NotFound):
        store.delete_managed_ledger(TOPIC, second)
    with pytest.raises(NotFound):
        store.put_managed_ledger(TOPIC, ledger_info(4), second)


def test_a_topics_properties_and_managed_ledger_live_side_by_side(store: BrokerMetadataStore) -> None:
    """One node in ZooKeeper, as Pulsar's ManagedLedgerInfo holds the properties: writing
    one keeps the other (its version may move with either: read again on a conflict)."""
    store.put_managed_ledger(TOPIC, ledger_info(5), -1)
    assert store.get_topic(TOPIC) is None and store.list_topics("public/default") == []
    store.create_topic(TOPIC, {"owner": "a"})
    store.update_topic_properties(TOPIC, {"owner": "b"})
    held = store.get_managed_ledger(TOPIC)
    assert held is not None and held.data == ledger_info(5)
    store.put_managed_ledger(TOPIC, ledger_info(5, 6), held.version)
    assert store.get_topic(TOPIC) == {"owner": "b"}
    store.put_cursor(TOPIC, "sub", CursorRecord(Position(5, 1)))
    assert store.delete_topic(TOPIC) and store.get_topic(TOPIC) is None
    held = store.get_managed_ledger(TOPIC)
    assert held is not None and held.data == ledger_info(5, 6)
    store.delete_managed_ledger(TOPIC, held.version)
    assert store.get_cursor(TOPIC, "sub") == CursorRecord(Position(5, 1))
    store.create_topic(TOPIC)
    assert store.get_topic(TOPIC) == {} and store.get_managed_ledger(TOPIC) is None


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda s: s.put_managed_ledger(TOPIC, {}, -1), "needs ledgerInfo"),
        (lambda s: s.put_managed_ledger(TOPIC, {"ledgerInfo": [{"ledgerId": "1"}]}, -1), "needs ledgerInfo"),
        (lambda s: s.put_managed_ledger(TOPIC, {"ledgerInfo": [], "properties": {}}, -1), "may not hold properties"),
        (lambda s: s.put_managed_ledger(TOPIC, {"ledgerInfo": []}, -2), "managed ledger version"),
        (lambda s: s.put_managed_ledger("orders", {"ledgerInfo": []}, -1), "invalid topic name"),
        (lambda s: s.put_managed_ledger(TOPIC, ["x"], -1), "must be a JSON object"),
    ],
)
def test_bad_managed_ledger_input_is_refused(store: BrokerMetadataStore, call: object, match: str) -> None:
    with pytest.raises(InvalidMetadata, match=match):
        call(store)  # type: ignore[operator]


# -- brokers and bundle ownership -----------------------------------------------------


def test_broker_registrations(store: BrokerMetadataStore) -> None:
    data = {"pulsarServiceUrl": "pulsar://10.0.0.1:6650", "webServiceUrl": "http://10.0.0.1:8080"}
    store.register_broker("10.0.0.1:8080", data)
    store.register_broker("10.0.0.2:8080", {})
    with pytest.raises(AlreadyExists, match="already registered"):
        store.register_broker("10.0.0.1:8080", {})
    assert store.get_broker("10.0.0.1:8080") == data
    store.update_broker("10.0.0.1:8080", {**data, "cpu": 0.5})
    assert store.get_broker("10.0.0.1:8080") == {**data, "cpu": 0.5}
    with pytest.raises(NotFound, match="not registered"):
        store.update_broker("10.0.0.9:8080", {})
    assert store.get_broker("10.0.0.3:8080") is None
    assert store.list_brokers() == ["10.0.0.1:8080", "10.0.0.2:8080"]
    assert store.unregister_broker("10.0.0.2:8080")
    assert not store.unregister_broker("10.0.0.2:8080")
    assert store.list_brokers() == ["10.0.0.1:8080"]


def test_a_broker_session_shows_alive_until_it_ends_even_after_unregistering(store: BrokerMetadataStore) -> None:
    """What a successor asks before it waits a previous writer out: its registration, or
    the leaving mark that replaces it, is a node of that very session."""
    session = store.ping()
    assert session is not None
    assert not store.session_alive("10.0.0.1:8080", session)
    store.register_broker("10.0.0.1:8080", {})
    assert store.session_alive("10.0.0.1:8080", session)
    assert not store.session_alive("10.0.0.1:8080", session + 1)
    assert store.unregister_broker("10.0.0.1:8080")  # leaving: it serves until its bundles go
    assert store.session_alive("10.0.0.1:8080", session) and store.list_brokers() == []
    store.register_broker("10.0.0.1:8080", {})  # back in the same session, and out again
    assert store.unregister_broker("10.0.0.1:8080") and store.session_alive("10.0.0.1:8080", session)
    assert not store.session_alive("not a broker id", session)


def test_bundle_ownership_is_versioned(store: BrokerMetadataStore) -> None:
    owner = {"nativeUrl": "pulsar://10.0.0.1:6650", "httpUrl": "http://10.0.0.1:8080", "disabled": False}
    assert store.acquire_bundle("public/default", BUNDLE, owner) == 0
    with pytest.raises(AlreadyExists, match="already owned"):
        store.acquire_bundle("public/default", BUNDLE, {})
    assert store.get_bundle_owner("public/default", BUNDLE) == Versioned(owner, 0)
    assert store.get_bundle_owner("public/default", "0x40000000_0x80000000") is None
    disabled = {**owner, "disabled": True}
    assert store.update_bundle_owner("public/default", BUNDLE, disabled, 0) == 1
    with pytest.raises(VersionConflict):
        store.update_bundle_owner("public/default", BUNDLE, owner, 0)
    with pytest.raises(VersionConflict):
        store.release_bundle("public/default", BUNDLE, 0)
    store.acquire_bundle("public/default", "0x40000000_0x80000000", owner)
    assert store.list_owned_bundles("public/default") == {BUNDLE: Versioned(disabled, 1),
                                                          "0x40000000_0x80000000": Versioned(owner, 0)}
    store.release_bundle("public/default", BUNDLE, 1)
    with pytest.raises(NotFound, match="not owned"):
        store.release_bundle("public/default", BUNDLE, 1)
    with pytest.raises(NotFound, match="not owned"):
        store.update_bundle_owner("public/default", BUNDLE, owner, 1)
    assert list(store.list_owned_bundles("public/default")) == ["0x40000000_0x80000000"]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda s: s.register_broker("no-port", {}), "invalid broker id"),
        (lambda s: s.register_broker("h:1/x", {}), "invalid broker id"),
        (lambda s: s.register_broker("h:1", ["x"]), "must be a JSON object"),
        (lambda s: s.acquire_bundle("public/default", "0x0_0x1", {}), "invalid bundle range"),
        (lambda s: s.acquire_bundle("public/default", "0X00000000_0x40000000", {}), "invalid bundle range"),
        (lambda s: s.acquire_bundle("public", BUNDLE, {}), "expected 'tenant/namespace'"),
        (lambda s: s.acquire_bundle("public/default", BUNDLE, {"x": {1}}), "not JSON-serializable"),
        (lambda s: s.reserve_ledger_ids(0), "ledger id count|expected an integer"),
    ],
)
def test_bad_coordination_input_is_refused(store: BrokerMetadataStore, call: object, match: str) -> None:
    with pytest.raises(InvalidMetadata, match=match):
        call(store)  # type: ignore[operator]


def test_one_leader_at_a_time(store: BrokerMetadataStore) -> None:
    assert store.get_leader() is None
    assert store.elect_leader({"brokerId": "127.0.0.1:8080", "serviceUrl": "http://127.0.0.1:8080"})
    assert not store.elect_leader({"brokerId": "127.0.0.1:8081", "serviceUrl": "http://127.0.0.1:8081"})
    assert store.get_leader() == {"brokerId": "127.0.0.1:8080", "serviceUrl": "http://127.0.0.1:8080"}
    with pytest.raises(InvalidMetadata):
        store.elect_leader({"brokerId": float("nan")})


def test_bundle_data(store: BrokerMetadataStore) -> None:
    data = {"shortTermData": {"maxSamples": 10}, "longTermData": {"maxSamples": 1000}, "topics": 3}
    assert store.get_bundle_data(f"t/ns/{BUNDLE}") is None
    store.put_bundle_data(f"t/ns/{BUNDLE}", data)
    store.put_bundle_data(f"t/ns/{BUNDLE}", {**data, "topics": 4})
    assert store.get_bundle_data(f"t/ns/{BUNDLE}") == {**data, "topics": 4}
    for bad in ("t/ns/0x1_0x2", "t/0x00000000_0x40000000", "nope"):
        with pytest.raises(InvalidMetadata):
            store.put_bundle_data(bad, data)


def test_closing_the_store_ends_its_session(store: BrokerMetadataStore) -> None:
    heard: list[SessionState] = []
    assert store.session_state is SessionState.CONNECTED
    store.add_session_listener(heard.append)
    store.close()
    assert heard[-1:] == [SessionState.LOST]


# -- two stores on the same data ------------------------------------------------------


def test_a_write_through_one_store_is_seen_by_the_other(
        two_stores: tuple[BrokerMetadataStore, BrokerMetadataStore]) -> None:
    a, b = two_stores
    a.create_tenant("t", {"adminRoles": []})
    a.create_namespace("t/ns", {"message_ttl_in_seconds": 1})
    # b reads (and so caches) everything first: what it sees next must be the change
    assert b.get_namespace_policies("t/ns") == {"message_ttl_in_seconds": 1}
    assert b.list_topics("t/ns") == [] and b.get_topic_policies("persistent://t/ns/x") is None
    assert b.list_namespaces("t") == ["t/ns"] and b.get_cursor("persistent://t/ns/x", "s") is None
    policies_at, listed_at = b.policy_changes, b.topic_list_changes
    a.put_namespace_policies("t/ns", {"message_ttl_in_seconds": 2})
    a.create_namespace("t/other")
    a.create_topic("persistent://t/ns/x", {"p": "v"})
    a.put_topic_policies("persistent://t/ns/x", {"messageTTL": 3})
    a.put_cursor("persistent://t/ns/x", "s", CursorRecord(Position(3, 4)))
    eventually(lambda: b.get_namespace_policies("t/ns") == {"message_ttl_in_seconds": 2})
    eventually(lambda: b.list_namespaces("t") == ["t/ns", "t/other"])
    eventually(lambda: b.list_topics("t/ns") == ["persistent://t/ns/x"])
    eventually(lambda: b.get_topic_policies("persistent://t/ns/x") == {"messageTTL": 3})
    eventually(lambda: b.get_cursor("persistent://t/ns/x", "s") == CursorRecord(Position(3, 4)))
    if isinstance(b, ZooKeeperMetadataStore):  # SQLite counts its own connection's writes alone
        assert b.policy_changes > policies_at, "values derived from b's policies must be read again"
        assert b.topic_list_changes > listed_at, "b's topic lists must be read again"
    a.delete_namespace("t/other")
    eventually(lambda: b.list_namespaces("t") == ["t/ns"])


def test_of_two_stores_changing_a_managed_ledger_from_one_state_only_one_wins(
        two_stores: tuple[BrokerMetadataStore, BrokerMetadataStore]) -> None:
    a, b = two_stores
    version = a.put_managed_ledger(TOPIC, ledger_info(1), -1)
    eventually(lambda: b.get_managed_ledger(TOPIC) == Versioned(ledger_info(1), version))
    a.put_managed_ledger(TOPIC, ledger_info(1, 2), version)
    with pytest.raises(VersionConflict):
        b.put_managed_ledger(TOPIC, ledger_info(1, 3), version)
    eventually(lambda: (found := b.get_managed_ledger(TOPIC)) is not None and found.data == ledger_info(1, 2))


def test_ledger_ids_of_two_stores_never_collide(open_store: OpenStore) -> None:
    if not open_store.shared:  # type: ignore[attr-defined]
        pytest.skip("the in-memory store is one broker's alone")
    a, b = open_store(ledger_id_block=3), open_store(ledger_id_block=5)
    interleaved = [store.next_ledger_id() for _, store in zip(range(40), itertools.cycle((a, b)), strict=False)]
    assert len(set(interleaved)) == 40 and min(interleaved) == FIRST_LEDGER_ID
    blocks: list[tuple[int, int]] = []
    failures: list[BaseException] = []

    def reserve() -> None:  # each thread its own store (SQLite: its own connection)
        opened = open_store(closed_by_caller=True)
        try:
            blocks.extend(opened.reserve_ledger_ids(7) for _ in range(15))
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            failures.append(exc)
        finally:
            opened.close()

    threads = [threading.Thread(target=reserve) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert failures == []
    ids = [i for start, end in blocks for i in range(start, end)] + interleaved
    assert len(blocks) == 30 and len(ids) == len(set(ids)) == 30 * 7 + 40


# -- ZooKeeper's sessions ---------------------------------------------------------------


def zookeeper_stores(open_store: OpenStore) -> tuple[BrokerMetadataStore, BrokerMetadataStore]:
    a, b = open_store(), open_store()
    if not isinstance(a, ZooKeeperMetadataStore):
        pytest.skip("ephemeral records are shared only through ZooKeeper")
    return a, b


def test_a_policy_changed_elsewhere_is_fetched_ahead_so_no_read_waits_for_it(
        open_store: OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker's event loop reads policies: after a change through another broker, the
    new values are there before anyone reads them, and no read waits for ZooKeeper."""
    a, b = zookeeper_stores(open_store)
    assert isinstance(b, ZooKeeperMetadataStore)
    topic = "persistent://t/ns/x"
    a.create_tenant("t", {"adminRoles": []})
    a.create_namespace("t/ns", {"message_ttl_in_seconds": 1})
    assert b.get_namespace_policies("t/ns") == {"message_ttl_in_seconds": 1}
    assert b.get_topic_policies(topic) is None
    threads: list[str] = []
    wait = b._zk._wait

    def counted(result: object) -> object:
        threads.append(threading.current_thread().name)
        return wait(result)
    monkeypatch.setattr(b._zk, "_wait", counted)
    a.put_namespace_policies("t/ns", {"message_ttl_in_seconds": 2})
    a.put_topic_policies(topic, {"messageTTL": 3})
    eventually(lambda: b.get_namespace_policies("t/ns") == {"message_ttl_in_seconds": 2}
               and b.get_topic_policies(topic) == {"messageTTL": 3})
    assert len(threads) >= 2, "each change fetched once"
    assert all(name.startswith("magnetar-zk-refresh") for name in threads), threads


def test_ephemeral_records_go_when_their_session_ends(open_store: OpenStore) -> None:
    a, b = zookeeper_stores(open_store)
    a.register_broker("127.0.0.1:8080", {"webServiceUrl": "http://127.0.0.1:8080"})
    a.acquire_bundle("t/ns", BUNDLE, {"nativeUrl": "pulsar://127.0.0.1:6650"})
    assert b.list_brokers() == ["127.0.0.1:8080"]
    with pytest.raises(AlreadyExists):
        b.acquire_bundle("t/ns", BUNDLE, {})
    a.close()
    eventually(lambda: b.list_brokers() == [] and b.get_bundle_owner("t/ns", BUNDLE) is None)
    assert b.acquire_bundle("t/ns", BUNDLE, {"nativeUrl": "pulsar://127.0.0.2:6650"}) == 0


def test_the_leader_node_goes_with_its_session_and_another_broker_takes_it(open_store: OpenStore) -> None:
    a, b = zookeeper_stores(open_store)
    assert a.elect_leader({"brokerId": "a:1"})
    eventually(lambda: b.get_leader() == {"brokerId": "a:1"})
    assert not b.elect_leader({"brokerId": "b:1"})
    a.close()
    eventually(lambda: b.get_leader() is None)
    assert b.elect_leader({"brokerId": "b:1"})


def test_the_session_state_follows_a_stopped_and_restarted_zookeeper() -> None:
    from magnetar.testing.zookeeper_process import zookeeper_unavailable

    reason = zookeeper_unavailable()
    if reason is not None:
        pytest.skip(f"needs ZooKeeper: {reason}")
    with ZooKeeperProcess() as server:
        server.start()
        heard: list[SessionState] = []
        store = ZooKeeperMetadataStore(server.url("/restart"), session_timeout_ms=8_000, operation_timeout_s=1)
        try:
            store.add_session_listener(heard.append)
            store.register_broker("127.0.0.1:8080", {})
            store.put_json("k", 1)
            assert store.get_json("k") == 1 and store.get_json("w") is None  # both cached, watched
            server.stop()
            eventually(lambda: heard[-1:] == [SessionState.SUSPENDED], timeout_s=10)
            assert store.session_state is SessionState.SUSPENDED
            assert store.get_json("k") == 1, "what is cached is served while the connection is down"
            with pytest.raises(MetadataUnavailable, match="retry later"):
                store.put_json("k", 2)
            server.start()
            # A reconnection that reaches ZooKeeper while it starts can wait for kazoo's handshake
            # timeout (the session timeout over the number of servers), and the session may
            # expire meanwhile: then the store says so, and its ephemeral records are gone.
            eventually(lambda: heard[-1:] == [SessionState.CONNECTED], timeout_s=20)
            store.put_json("k", 3)
            assert store.get_json("k") == 3
            survived = SessionState.LOST not in heard
            assert store.list_brokers() == (["127.0.0.1:8080"] if survived else [])
            with ZooKeeperMetadataStore(server.url("/restart")) as other:
                other.put_json("w", "changed")
            eventually(lambda: store.get_json("w") == "changed")  # its watch outlived the restart
        finally:
            store.close()
        assert heard[-1] is SessionState.LOST


def test_a_lost_session_loses_its_ephemeral_records_and_a_new_one_follows(open_store: OpenStore,
                                                                           zookeeper: ZooKeeperProcess) -> None:
    a, b = zookeeper_stores(open_store)
    assert isinstance(a, ZooKeeperMetadataStore) and a.client_id is not None
    heard: list[SessionState] = []
    a.add_session_listener(heard.append)
    a.register_broker("127.0.0.1:8080", {})
    assert a.list_brokers() == ["127.0.0.1:8080"]
    expire_session(zookeeper.hosts, a.client_id)
    eventually(lambda: SessionState.LOST in heard and heard[-1] is SessionState.CONNECTED, timeout_s=10)
    eventually(lambda: b.list_brokers() == [])
    assert a.list_brokers() == [], "what a read before the loss cached is not served after it"
    a.register_broker("127.0.0.1:8080", {"again": True})
    eventually(lambda: b.get_broker("127.0.0.1:8080") == {"again": True})


def test_an_unreachable_zookeeper_is_a_clear_error() -> None:
    from magnetar.testing.broker_process import free_port

    with pytest.raises(MetadataUnavailable, match="cannot reach ZooKeeper at 127.0.0.1"):
        ZooKeeperMetadataStore(f"zk:127.0.0.1:{free_port()}", operation_timeout_s=0.5)


# -- which store a broker's config opens ------------------------------------------------


def test_no_url_opens_the_data_dirs_sqlite_store_as_before(tmp_path: Path) -> None:
    with MetadataStore(tmp_path / "metadata.db") as earlier:
        earlier.create_tenant("public", {"adminRoles": []})
    opened = open_metadata_store(BrokerConfig(), tmp_path)
    try:
        assert isinstance(opened, MetadataStore)
        assert opened.get_tenant("public") == {"adminRoles": []}
    finally:
        opened.close()


def test_a_url_opens_zookeeper_with_the_configured_timeouts(zookeeper: ZooKeeperProcess, tmp_path: Path) -> None:
    config = BrokerConfig().with_overrides({"metadataStoreUrl": zookeeper.url("/factory"),
                                            "metadataStoreSessionTimeoutMillis": "6000",
                                            "metadataStoreOperationTimeoutSeconds": "7"})
    opened = open_metadata_store(config, tmp_path)
    try:
        assert isinstance(opened, ZooKeeperMetadataStore)
        assert opened.url.chroot == "/factory" and opened.operation_timeout_s == 7
        assert opened.session_timeout_ms == 6000
        assert not (tmp_path / "metadata.db").exists()
    finally:
        opened.close()

"""The SQLite metadata store and its in-memory twin."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar.core.positions import Position
from magnetar.storage import (
    AlreadyExists,
    CursorRecord,
    InvalidMetadata,
    MemoryMetadataStore,
    MetadataError,
    MetadataStore,
    NotFound,
    SchemaRecord,
)
from magnetar.storage.metadata_store import FIRST_LEDGER_ID, decode_ranges, encode_ranges

TOPIC = "persistent://public/default/orders"


@pytest.fixture(params=["sqlite-file", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MetadataStore]:
    opened = MetadataStore(tmp_path / "metadata.db") if request.param == "sqlite-file" else MemoryMetadataStore()
    yield opened
    opened.close()


# -- behaviour shared by both ---------------------------------------------------------


def test_tenants_crud(store: MetadataStore) -> None:
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


def test_clusters_crud(store: MetadataStore) -> None:
    store.create_cluster("standalone", {"serviceUrl": "http://localhost:8080"})
    with pytest.raises(AlreadyExists):
        store.create_cluster("standalone", {})
    store.update_cluster("standalone", {"serviceUrl": "http://h:8080"})
    assert store.get_cluster("standalone") == {"serviceUrl": "http://h:8080"}
    assert store.list_clusters() == ["standalone"]
    assert store.delete_cluster("standalone")
    assert store.get_cluster("standalone") is None


def test_namespaces_crud(store: MetadataStore) -> None:
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


def test_topics_and_partitioned_topics(store: MetadataStore) -> None:
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


def test_cursor_round_trip(store: MetadataStore) -> None:
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


def test_cursor_with_20k_ranges_round_trips(store: MetadataStore) -> None:
    """Pulsar #742/#25540 dropped ranges beyond 10000 at persist time; this store keeps all."""
    ranges = [(Position(3, 2 * i), Position(3, 2 * i + 1)) for i in range(20_000)]
    store.put_cursor(TOPIC, "holes", CursorRecord(Position(3, -1), ranges))
    restored = store.get_cursor(TOPIC, "holes")
    assert restored is not None and restored.individually_deleted == ranges


def test_a_bad_cursor_in_a_batch_writes_none_of_it(store: MetadataStore) -> None:
    good = CursorRecord(Position(1, 1))
    bad = CursorRecord(Position(1, 1), [(Position(5, 0), Position(4, 0))])
    with pytest.raises(InvalidMetadata, match="lower bound above upper"):
        store.put_cursors([(TOPIC, "good", good), (TOPIC, "bad", bad)])
    assert store.list_cursors(TOPIC) == {}


def test_schemas_are_versioned_from_zero(store: MetadataStore) -> None:
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


def test_schema_versions_keep_their_time_and_delete_markers(store: MetadataStore) -> None:
    stored = SchemaRecord("STRING", b"", {}, timestamp_ms=1_700_000_000_123)
    marker = SchemaRecord("NONE", b"", {}, timestamp_ms=1_700_000_000_999, deleted=True)
    store.add_schema(TOPIC, stored)
    store.add_schema(TOPIC, marker)
    assert store.get_schemas(TOPIC) == [stored, marker]


def test_schema_versions_numbered_by_the_caller_are_stored_once(store: MetadataStore) -> None:
    store.put_schema(TOPIC, 0, SchemaRecord("STRING", b""))
    store.put_schema(TOPIC, 1, SchemaRecord("INT32", b""))
    with pytest.raises(AlreadyExists, match="schema version 1 of"):
        store.put_schema(TOPIC, 1, SchemaRecord("INT64", b""))
    assert [r.schema_type for r in store.get_schemas(TOPIC)] == ["STRING", "INT32"]
    assert store.add_schema(TOPIC, SchemaRecord("JSON", b"{}")) == 2


def test_a_version_1_store_gains_schema_times_and_delete_markers(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE schemas (topic TEXT NOT NULL, version INTEGER NOT NULL, type TEXT NOT NULL,"
               " data BLOB NOT NULL, properties TEXT NOT NULL, PRIMARY KEY (topic, version))")
    db.execute("INSERT INTO schemas VALUES (?, 0, 'JSON', x'7b7d', '{}')", (TOPIC,))
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    with MetadataStore(path) as store:
        assert store.get_schemas(TOPIC) == [SchemaRecord("JSON", b"{}")]
        assert store.add_schema(TOPIC, SchemaRecord("JSON", b"[]", timestamp_ms=5, deleted=True)) == 1
        assert store.get_schema(TOPIC, 1) == SchemaRecord("JSON", b"[]", timestamp_ms=5, deleted=True)


def test_generic_json_key_value(store: MetadataStore) -> None:
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


def test_ledger_ids_are_unique_and_increasing(store: MetadataStore) -> None:
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
def test_bad_input_is_refused_with_a_clear_error(store: MetadataStore, call: object, match: str) -> None:
    with pytest.raises(InvalidMetadata, match=match) as raised:
        call(store)  # type: ignore[operator]
    assert isinstance(raised.value, ValueError)


# -- the SQLite file ------------------------------------------------------------------


def test_everything_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    record = CursorRecord(Position(4, 2), [(Position(4, 3), Position(4, 9))], {"p": "v"}, 99)
    with MetadataStore(path) as store:
        store.create_tenant("public", {"adminRoles": []})
        store.create_namespace("public/default", {"ttl": 5})
        store.create_partitioned_topic(TOPIC + "-p", 3)
        store.create_topic(TOPIC)
        store.put_cursor(TOPIC, "sub", record)
        store.add_schema(TOPIC, SchemaRecord("JSON", b"{}"))
        store.put_json("k", [1])
    with MetadataStore(path) as store:
        assert store.get_tenant("public") == {"adminRoles": []}
        assert store.get_namespace_policies("public/default") == {"ttl": 5}
        assert store.get_partitioned_topic(TOPIC + "-p") == 3
        assert store.get_topic(TOPIC) == {}
        assert store.get_cursor(TOPIC, "sub") == record
        assert store.get_schemas(TOPIC) == [SchemaRecord("JSON", b"{}")]
        assert store.get_json("k") == [1]


def test_ledger_ids_are_never_reused_across_restarts(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    seen: list[int] = []
    for block in (1, 64, 5):
        store = MetadataStore(path, ledger_id_block=block)
        seen += [store.next_ledger_id() for _ in range(7)]
        store.close()
    assert seen == sorted(set(seen))
    # Two stores on one file (a broker and an admin tool) never collide either.
    first, second = MetadataStore(path, ledger_id_block=4), MetadataStore(path, ledger_id_block=4)
    ids = [store.next_ledger_id() for _ in range(10) for store in (first, second)]
    assert len(set(ids)) == len(ids) and min(ids) > max(seen)
    first.close()
    second.close()


def test_ledger_ids_are_never_reused_after_a_kill(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    child = (
        "import os, sys\n"
        "from magnetar.storage import MetadataStore\n"
        "store = MetadataStore(sys.argv[1], ledger_id_block=10)\n"
        "print(' '.join(str(store.next_ledger_id()) for _ in range(25)), flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    result = subprocess.run([sys.executable, "-c", child, str(path)], capture_output=True, timeout=30)
    assert result.returncode == -9
    handed_out = [int(n) for n in result.stdout.split()]
    assert len(handed_out) == 25
    with MetadataStore(path) as store:
        assert store.next_ledger_id() > max(handed_out)


def test_garbage_file_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(MetadataError, match="cannot open metadata store"):
        MetadataStore(path)


def test_newer_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    MetadataStore(path).close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(MetadataError, match="upgrade Magnetar"):
        MetadataStore(path)


def test_damaged_ack_ranges_fail_loudly(tmp_path: Path) -> None:
    """Pulsar #17812: a damaged cursor must never read back as 'no acks' (silent rewind)."""
    path = tmp_path / "metadata.db"
    with MetadataStore(path) as store:
        store.put_cursor(TOPIC, "sub", CursorRecord(Position(1, 1), [(Position(1, 2), Position(1, 3))]))
    with sqlite3.connect(path) as db:
        db.execute("UPDATE cursors SET deleted_ranges = substr(deleted_ranges, 1, 20)")
    with MetadataStore(path) as store, pytest.raises(MetadataError, match="damaged"):
        store.get_cursor(TOPIC, "sub")


def test_ack_ranges_format_is_stable() -> None:
    """The on-disk form of version 1; a change must add a version, not alter this one."""
    blob = bytes.fromhex(
        "01" "00000001"
        "0000000000000007" "000000000000002a" "0000000000000009" "ffffffffffffffff"
    )  # fmt: skip
    ranges = [(Position(7, 42), Position(9, -1))]
    assert encode_ranges(ranges) == blob
    assert decode_ranges(blob) == ranges
    assert decode_ranges(encode_ranges([])) == []
    with pytest.raises(MetadataError, match="unknown version"):
        decode_ranges(b"\x02" + blob[1:])


def test_legacy_deduplication_properties_move_to_topic_policies(tmp_path: Path) -> None:
    """Topic records written before topic policies had their own record keep their meaning."""
    with MetadataStore(tmp_path / "m.db") as store:
        parted = "persistent://public/default/parted"
        for i in range(2):
            store.create_topic(f"{parted}-partition-{i}", {"deduplicationEnabled": True, "owner": "x"})
        store.create_topic("persistent://public/default/plain", {"deduplicationEnabled": False})
        store.create_topic("persistent://public/default/newer", {"deduplicationEnabled": True})
        store.put_topic_policies("persistent://public/default/newer", {"deduplicationEnabled": False})
        assert store.move_legacy_topic_policies() == 4
        assert store.get_topic_policies(parted) == {"deduplicationEnabled": True}
        assert store.get_topic_policies("persistent://public/default/plain") == {"deduplicationEnabled": False}
        assert store.get_topic_policies("persistent://public/default/newer") == {"deduplicationEnabled": False}, \
            "a policy set since wins"
        assert store.get_topic(f"{parted}-partition-1") == {"owner": "x"}
        assert store.move_legacy_topic_policies() == 0


def test_policy_changes_move_on_policy_writes_only(store: MetadataStore) -> None:
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
    for step in steps:
        before = store.policy_changes
        step()
        assert store.policy_changes > before

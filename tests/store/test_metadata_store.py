"""The SQLite metadata store: its file, migrations and crash behaviour (what every store does
alike is tests/store/test_metadata_conformance.py)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from magnetar.core.metadata.records import Versioned
from magnetar.core.positions import Position
from magnetar.storage import (
    CursorRecord,
    MetadataError,
    MetadataStore,
    SchemaRecord,
)
from magnetar.storage.metadata_store import decode_ranges, encode_ranges

TOPIC = "persistent://public/default/orders"


# -- the SQLite file ------------------------------------------------------------------


def test_a_version_1_store_gains_schema_times_and_delete_markers(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE schemas (topic TEXT NOT NULL, version INTEGER NOT NULL, type TEXT NOT NULL,"
               " data BLOB NOT NULL, properties TEXT NOT NULL, PRIMARY KEY (topic, version))")
    db.execute("CREATE TABLE namespaces (name TEXT PRIMARY KEY, tenant TEXT NOT NULL, policies TEXT NOT NULL)")
    db.execute("INSERT INTO schemas VALUES (?, 0, 'JSON', x'7b7d', '{}')", (TOPIC,))
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    with MetadataStore(path) as store:
        assert store.get_schemas(TOPIC) == [SchemaRecord("JSON", b"{}")]
        assert store.add_schema(TOPIC, SchemaRecord("JSON", b"[]", timestamp_ms=5, deleted=True)) == 1
        assert store.get_schema(TOPIC, 1) == SchemaRecord("JSON", b"[]", timestamp_ms=5, deleted=True)


def test_a_version_2_store_gains_namespace_policy_versions(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE namespaces (name TEXT PRIMARY KEY, tenant TEXT NOT NULL, policies TEXT NOT NULL)")
    db.execute("INSERT INTO namespaces VALUES ('public/default', 'public', '{\"ttl\":5}')")
    db.execute("PRAGMA user_version = 2")
    db.commit()
    db.close()
    with MetadataStore(path) as store:
        assert store.get_versioned_namespace_policies("public/default") == Versioned({"ttl": 5}, 0)
        assert store.put_versioned_namespace_policies("public/default", {"ttl": 6}, 0) == 1
        assert store.get_namespace_policies("public/default") == {"ttl": 6}


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

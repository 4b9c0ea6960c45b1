"""Topic compaction's algorithm: keys, tombstones, keyless messages, batches, markers."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.core.compaction.compactor import CompactionResult, compact
from magnetar.core.positions import Position
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.batch import compress, iter_batch, make_batch
from magnetar.wire.frames import make_entry, parse_entry

Entries = list[tuple[Position, bytes]]


def message(key: str | None, value: bytes, seq: int = 0) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1)
    if key is not None:
        metadata.partition_key = key
    return make_entry(metadata, value)


def batch(messages: list[tuple[str | None, bytes]], codec: int = pb.NONE) -> bytes:
    records = []
    for key, value in messages:
        single = pb.SingleMessageMetadata(payload_size=len(value))
        if key is not None:
            single.partition_key = key
        records.append((single, value))
    data = make_batch(records)
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1,
                                  num_messages_in_batch=len(messages), compression=codec,  # type: ignore[arg-type]
                                  uncompressed_size=len(data))
    return make_entry(metadata, compress(codec, data))


def at(entries: Iterable[bytes]) -> Entries:
    return [(Position(1, i), entry) for i, entry in enumerate(entries)]


def run(entries: Entries, retain_null_key: bool = False) -> tuple[Entries, CompactionResult]:
    result = CompactionResult()
    return list(compact(lambda: entries, retain_null_key, result)), result


def visible(entries: Entries) -> list[tuple[Position, int, str | None, bytes]]:
    """What a client reads from entries: (position, batch index, key, value), compacted-out skipped."""
    out = []
    for pos, entry in entries:
        parsed = parse_entry(entry)
        if not parsed.metadata.HasField("num_messages_in_batch"):
            key = parsed.metadata.partition_key if parsed.metadata.HasField("partition_key") else None
            out.append((pos, -1, key, bytes(parsed.payload)))
            continue
        for index, (single, value) in enumerate(iter_batch(parsed.metadata, parsed.payload)):
            if not single.compacted_out:
                out.append((pos, index, single.partition_key if single.HasField("partition_key") else None, value))
    return out


def test_the_latest_message_of_each_key_survives_with_its_position() -> None:
    entries = at([message("a", b"a1"), message("b", b"b1"), message("a", b"a2"), message("c", b"c1")])
    kept, result = run(entries)
    assert [(pos, key, value) for pos, _, key, value in visible(kept)] == [
        (Position(1, 1), "b", b"b1"), (Position(1, 2), "a", b"a2"), (Position(1, 3), "c", b"c1")]
    assert kept[0][1] == entries[1][1]  # a surviving plain entry is kept byte for byte
    assert (result.messages_read, result.messages_kept, result.removed) == (4, 3, 1)


def test_an_empty_payload_is_a_tombstone_that_removes_the_key() -> None:
    kept, result = run(at([message("a", b"a1"), message("b", b"b1"), message("a", b"")]))
    assert [key for _, _, key, _ in visible(kept)] == ["b"]
    assert result.removed == 2
    kept, _ = run(at([message("a", b"a1"), message("a", b""), message("a", b"a3")]))
    assert [value for *_, value in visible(kept)] == [b"a3"]


def test_null_value_flag_is_a_tombstone_too() -> None:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1, partition_key="a",
                                  null_value=True)
    kept, _ = run(at([message("a", b"a1"), make_entry(metadata, b"")]))
    assert kept == []


def test_keyless_messages_are_dropped_unless_retained() -> None:
    entries = at([message(None, b"x"), message("a", b"a1"), message(None, b"y")])
    assert [value for *_, value in visible(run(entries)[0])] == [b"a1"]
    assert [value for *_, value in visible(run(entries, retain_null_key=True)[0])] == [b"x", b"a1", b"y"]


def test_markers_are_dropped() -> None:
    marker = make_entry(pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, marker_type=1,
                                           partition_key="a"), b"m")
    assert run(at([marker]))[0] == []


@pytest.mark.parametrize("codec", [pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY])
def test_a_batch_keeps_its_survivors_and_marks_the_others_compacted_out(codec: int) -> None:
    entries = at([batch([("a", b"a1"), ("b", b"b1"), (None, b"x"), ("c", b"c1")], codec), message("a", b"a2")])
    kept, result = run(entries)
    assert visible(kept) == [(Position(1, 0), 1, "b", b"b1"), (Position(1, 0), 3, "c", b"c1"),
                             (Position(1, 1), -1, "a", b"a2")]
    rewritten = parse_entry(kept[0][1])
    original = parse_entry(entries[0][1])
    # same batch size and metadata, so batch indexes (message ids) do not move
    assert rewritten.metadata.num_messages_in_batch == 4
    assert rewritten.metadata.compression == codec
    assert rewritten.metadata.sequence_id == original.metadata.sequence_id
    records = iter_batch(rewritten.metadata, rewritten.payload)
    assert [single.compacted_out for single, _ in records] == [True, False, True, False]
    assert result.removed == 2


def test_a_batch_whose_messages_all_survive_is_kept_as_it_was_and_one_with_none_is_dropped() -> None:
    whole = batch([("a", b"a1"), ("b", b"b1")])
    assert run(at([whole]))[0] == [(Position(1, 0), whole)]
    assert run(at([batch([("a", b"a1"), ("a", b"")])]))[0] == []
    assert run(at([batch([("a", b"a1")]), message("a", b"a2")]))[0][0][0] == Position(1, 1)


def test_within_a_batch_the_later_message_of_a_key_wins() -> None:
    kept, _ = run(at([batch([("a", b"a1"), ("a", b"a2")])]))
    assert visible(kept) == [(Position(1, 0), 1, "a", b"a2")]


def test_an_unreadable_entry_is_kept_whole_and_names_no_key() -> None:
    broken = make_entry(pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=2,
                                           partition_key="a"), b"\x00\x00\x00\xffjunk")
    kept, _ = run(at([broken, message("a", b"a1")]))
    assert [pos for pos, _ in kept] == [Position(1, 0), Position(1, 1)]
    assert run(at([b"not an entry at all"]))[0] == [(Position(1, 0), b"not an entry at all")]


def test_an_encrypted_batch_is_kept_whole() -> None:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=2,
                                  encryption_keys=[pb.EncryptionKeys(key="k", value=b"v")])
    encrypted = make_entry(metadata, b"ciphertext")
    assert run(at([encrypted]))[0] == [(Position(1, 0), encrypted)]


# -- the model: a dict of the latest value per key, tombstones delete -----------------------------
operations = st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d", None]), st.sampled_from([b"", b"1", b"22"]),
                                st.integers(1, 3)), max_size=40)


def build(ops: list[tuple[str | None, bytes, int]]) -> Entries:
    """Consecutive operations grouped into batches of the drawn size (1: a plain message)."""
    entries: list[bytes] = []
    i = 0
    counter = 0
    while i < len(ops):
        size = ops[i][2]
        group = ops[i:i + size]
        if size == 1:
            key, value, _ = group[0]
            entries.append(message(key, value + str(counter).encode() if value else b"", counter))
        else:
            entries.append(batch([(k, v + str(counter + j).encode() if v else b"") for j, (k, v, _) in
                                  enumerate(group)]))
        counter += len(group)
        i += size
    return at(entries)


def model(entries: Entries) -> dict[str, bytes]:
    state: dict[str, bytes] = {}
    for _, _, key, value in visible(entries):
        if key is None:
            continue
        if value:
            state[key] = value
        else:
            state.pop(key, None)
    return state


@settings(max_examples=150, deadline=None)
@given(operations, st.integers(0, 40))
def test_compaction_in_two_steps_equals_the_model(ops: list[tuple[str | None, bytes, int]], split: int) -> None:
    entries = build(ops)
    expected = model(entries)
    kept, _ = run(entries)
    seen = [(key, value) for _, _, key, value in visible(kept)]
    assert sorted(seen) == sorted(expected.items())  # one message per key, its latest value
    # incremental: compacting the compacted view of a prefix plus the rest gives the same view
    first, _ = run(entries[:split])
    again, _ = run(first + entries[split:])
    assert visible(again) == visible(kept)


def chunk(key: str, uuid: str, chunk_id: int, chunks: int) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, partition_key=key, uuid=uuid,
                                  chunk_id=chunk_id, num_chunks_from_msg=chunks, total_chunk_msg_size=10 * chunks)
    return make_entry(metadata, b"c" * 10)


def test_every_chunk_of_the_latest_chunked_message_stays_together() -> None:
    entries = at([chunk("a", "u1", 0, 3), chunk("a", "u1", 1, 3), chunk("a", "u1", 2, 3), message("b", b"b1"),
                  chunk("a", "u2", 0, 2), message("c", b"c1"), chunk("a", "u2", 1, 2)])
    kept, _ = run(entries)
    assert [pos.entry_id for pos, _ in kept] == [3, 4, 5, 6]
    replaced, _ = run(entries + [(Position(2, 0), message("a", b"plain"))])
    assert [pos for pos, _ in replaced] == [Position(1, 3), Position(1, 5), Position(2, 0)]

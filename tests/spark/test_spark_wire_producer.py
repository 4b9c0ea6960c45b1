"""Batch payloads the sink lays out from Arrow columns, read back by the source's own decoder."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.spark.entry_decoding import decode_entry
from magnetar.spark.wire_producer import EncodedRecords
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import make_entry


def _round_trip(records: EncodedRecords, max_messages: int, max_bytes: int) -> list[list[bytes | None]]:
    """The batches ``records`` cut into, each decoded as the source decodes a stored entry."""
    batches, start, seq = [], 0, 100
    while start < len(records):
        stop = records.cut(start, max_messages, max_bytes)
        seq += stop - start
        meta = pb.MessageMetadata(producer_name="p", sequence_id=seq - (stop - start) + 1, publish_time=1,
                                  num_messages_in_batch=stop - start, highest_sequence_id=seq)
        entry = bytes(make_entry(meta, records.batch(start, stop, seq)))
        batches.append(decode_entry(entry).values.to_pylist())
        start = stop
    return batches


VALUES = [b"a", None, b"", b"x" * 127, b"y" * 128, b"z" * 20_000, None, b"q" * 3]


@pytest.mark.parametrize("values", [
    pa.array(VALUES, pa.binary()),
    pa.array(VALUES, pa.large_binary()),
    pa.array(VALUES, pa.binary())[2:],  # an offset into the buffers
    pa.array([v.decode() if v is not None else None for v in VALUES], pa.string())[1::2],
    pa.array([b"%05d" % i for i in range(2500)], pa.binary()),  # one size: the matrix layout
    pa.array([b"%05d" % i for i in range(2500)], pa.binary())[7:],
])
def test_every_value_reads_back_in_order(values: pa.Array) -> None:
    expected = [v.encode() if isinstance(v, str) else v for v in values.to_pylist()]
    batches = _round_trip(EncodedRecords(values), 1000, 128 * 1024)
    assert [v for batch in batches for v in batch] == expected
    assert all(len(batch) <= 1000 for batch in batches)


def test_batches_respect_the_byte_limit_and_a_large_value_travels_alone() -> None:
    values = pa.array([b"s" * 100] * 5 + [b"L" * 5000] + [b"s" * 100] * 5, pa.binary())
    batches = _round_trip(EncodedRecords(values), 1000, 1000)
    assert [len(b) for b in batches] == [5, 1, 5]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=300)), min_size=1, max_size=60),
       st.integers(1, 7), st.integers(1, 2000))
def test_any_values_round_trip(values: list[bytes | None], max_messages: int, max_bytes: int) -> None:
    batches = _round_trip(EncodedRecords(pa.array(values, pa.binary())), max_messages, max_bytes)
    assert [v for batch in batches for v in batch] == values
    assert all(len(batch) <= max_messages for batch in batches)

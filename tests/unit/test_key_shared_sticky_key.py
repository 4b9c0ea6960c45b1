"""Sticky keys and their hashes: the vectors of protocol.md §7 and Pulsar 4.x key resolution."""

from __future__ import annotations

import base64

import mmh3
import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.core.key_shared.sticky_key import (
    NONE_KEY,
    murmur3_32,
    sticky_key,
    sticky_key_hash,
)
from magnetar.wire import pulsar_api_pb2 as pb


@pytest.mark.parametrize(
    ("key", "murmur", "slot"),
    [
        (b"", 0x0, 1),  # slot 0 means "not set": moved to 1
        (b"NONE_KEY", 0x9E15BEA3 & 0x7FFFFFFF, 48803),
        (b"key-1", 0x98B115A0 & 0x7FFFFFFF, 5536),
        (b"hello", 0x248BFA47, 64071),
        (b"a", 0x3C2569B2, 27058),
    ],
)
def test_hash_vectors(key: bytes, murmur: int, slot: int) -> None:
    assert murmur3_32(key) == murmur
    assert sticky_key_hash(key) == slot


def test_seed_004_example_key_lands_in_slot_6067() -> None:
    assert sticky_key_hash(b"Order-3459134") == 6067


@given(st.binary(max_size=64))
def test_hash_is_in_1_to_65535_and_matches_masked_murmur(key: bytes) -> None:
    h = sticky_key_hash(key)
    assert 1 <= h <= 65535
    expected = (mmh3.hash(key, 0, signed=False) & 0x7FFFFFFF) % 65536
    assert h == (expected or 1)


def _metadata(**fields: object) -> pb.MessageMetadata:
    m = pb.MessageMetadata(producer_name="prod", sequence_id=7, publish_time=1)
    for name, value in fields.items():
        setattr(m, name, value)
    return m


def test_ordering_key_wins_over_partition_key() -> None:
    assert sticky_key(_metadata(ordering_key=b"\x00ord", partition_key="pk")) == b"\x00ord"


def test_partition_key_as_utf8() -> None:
    assert sticky_key(_metadata(partition_key="clé")) == "clé".encode()


def test_partition_key_base64_decoded_when_flagged() -> None:
    raw = b"\xff\x00binary"
    meta = _metadata(partition_key=base64.b64encode(raw).decode(), partition_key_b64_encoded=True)
    assert sticky_key(meta) == raw


def test_partition_key_base64_without_padding_is_accepted_as_java_does() -> None:
    meta = _metadata(partition_key="YWJjZA", partition_key_b64_encoded=True)
    assert sticky_key(meta) == b"abcd"


def test_invalid_base64_partition_key_falls_back_to_raw_bytes() -> None:
    meta = _metadata(partition_key="not base64!", partition_key_b64_encoded=True)
    assert sticky_key(meta) == b"not base64!"


def test_keyless_message_uses_producer_name_and_sequence_id() -> None:
    assert sticky_key(_metadata()) == b"prod-7"


def test_empty_ordering_key_is_still_a_key() -> None:
    assert sticky_key(_metadata(ordering_key=b"", partition_key="pk")) == b""


def test_no_metadata_is_none_key() -> None:
    assert sticky_key(None) == NONE_KEY


def test_a_batched_message_has_its_own_key_and_none_without_one() -> None:
    assert sticky_key(pb.SingleMessageMetadata(payload_size=1, partition_key="k")) == b"k"
    assert sticky_key(pb.SingleMessageMetadata(payload_size=1, ordering_key=b"o", partition_key="k")) == b"o"
    assert sticky_key(pb.SingleMessageMetadata(payload_size=1)) == NONE_KEY


def test_keyless_messages_spread() -> None:
    hashes = {sticky_key_hash(sticky_key(_metadata(sequence_id=i))) for i in range(100)}
    assert len(hashes) > 90

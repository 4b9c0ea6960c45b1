"""Namespace bundles as Pulsar cuts them: boundaries, names, the topic hash, the search and
the split; properties over every hash and every split."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.core.cluster.namespace_bundles import (
    DEFAULT_NUMBER_OF_NAMESPACE_BUNDLES,
    FULL_UPPER_BOUND,
    InvalidBundle,
    NamespaceBundle,
    NamespaceBundles,
    bundle_hash,
    default_boundaries,
)

NS = "public/default"

#: Guava 33.4.8 ``Hashing.crc32().hashString(name, UTF_8).padToLong()``, what Pulsar's
#: NamespaceBundleFactory.getLongHashCode computes (run once with the Guava jar)
GUAVA_CRC32 = {
    "persistent://public/default/my-topic": 732775927,
    "persistent://pulsar/global/ns1/topic-1": 690289361,
    "persistent://public/default/t-partition-0": 1034227764,
    "persistent://tenant/ns/é": 2405151425,
}


@pytest.mark.parametrize(("name", "expected"), sorted(GUAVA_CRC32.items()))
def test_the_topic_hash_is_pulsars(name: str, expected: int) -> None:
    assert bundle_hash(name) == expected


def test_four_default_bundles_with_pulsars_names() -> None:
    bundles = NamespaceBundles(NS)
    assert DEFAULT_NUMBER_OF_NAMESPACE_BUNDLES == 4
    assert [b.range_name for b in bundles.bundles] == [
        "0x00000000_0x40000000", "0x40000000_0x80000000", "0x80000000_0xc0000000", "0xc0000000_0xffffffff"]
    assert default_boundaries(1) == (0, FULL_UPPER_BOUND)
    assert default_boundaries(3) == (0, 0x55555555, 0xAAAAAAAA, FULL_UPPER_BOUND)


def test_a_topic_falls_in_the_bundle_of_its_hash() -> None:
    bundles = NamespaceBundles(NS)
    # 0x2bad45f7 is in the first quarter
    assert bundles.find_bundle("persistent://public/default/my-topic").range_name == "0x00000000_0x40000000"
    assert bundles.bundle_of_hash(0x40000000).range_name == "0x40000000_0x80000000"
    assert bundles.bundle_of_hash(0x3FFFFFFF).range_name == "0x00000000_0x40000000"
    assert bundles.bundle_of_hash(FULL_UPPER_BOUND).range_name == "0xc0000000_0xffffffff"
    with pytest.raises(InvalidBundle):
        bundles.bundle_of_hash(FULL_UPPER_BOUND + 1)


def test_split_in_two_at_the_middle_as_pulsar() -> None:
    whole = NamespaceBundles(NS, (0, FULL_UPPER_BOUND))
    halves = whole.split_in_two(whole.bundles[0])
    assert [b.range_name for b in halves.bundles] == ["0x00000000_0x7fffffff", "0x7fffffff_0xffffffff"]
    quarters = halves.split_in_two(halves.bundles[1])
    assert [b.range_name for b in quarters.bundles][1:] == ["0x7fffffff_0xbfffffff", "0xbfffffff_0xffffffff"]


def test_bad_bundles_are_refused_with_a_clear_error() -> None:
    bundles = NamespaceBundles(NS)
    for text in ("0x00000000", "zz_0x10", "0x10_0x05", "0x00000000_0x100000000", ""):
        with pytest.raises(InvalidBundle, match="Invalid bundle range"):
            NamespaceBundle.parse(NS, text)
    with pytest.raises(InvalidBundle, match="must cover"):
        NamespaceBundles(NS, (0, 0x10))
    with pytest.raises(InvalidBundle, match="must increase"):
        NamespaceBundles(NS, (0, 0x10, 0x10, FULL_UPPER_BOUND))
    with pytest.raises(InvalidBundle, match="not a bundle of"):
        bundles.split_in_two(NamespaceBundle(NS, 0, 0x20000000))
    with pytest.raises(InvalidBundle, match="cannot be split"):
        NamespaceBundles(NS, (0, 1, FULL_UPPER_BOUND)).split_in_two(NamespaceBundle(NS, 0, 1))
    with pytest.raises(InvalidBundle, match="number of bundles"):
        default_boundaries(0)
    assert NamespaceBundle.parse(NS, "0x40000000_0x80000000") == bundles.bundles[1]


hashes = st.integers(min_value=0, max_value=FULL_UPPER_BOUND)


@st.composite
def split_bundles(draw: st.DrawFn) -> NamespaceBundles:
    bundles = NamespaceBundles(NS, default_boundaries(draw(st.integers(1, 16))))
    for _ in range(draw(st.integers(0, 12))):
        candidates = [b for b in bundles.bundles if b.upper - b.lower >= 2]
        bundles = bundles.split_in_two(draw(st.sampled_from(candidates)))
    return bundles


@given(split_bundles(), hashes)
def test_every_hash_falls_in_exactly_one_bundle(bundles: NamespaceBundles, hash_value: int) -> None:
    holders = [b for b in bundles.bundles if b.includes_hash(hash_value)]
    assert holders == [bundles.bundle_of_hash(hash_value)]


@given(split_bundles())
def test_bundles_partition_the_hash_space(bundles: NamespaceBundles) -> None:
    ranges = bundles.bundles
    assert ranges[0].lower == 0 and ranges[-1].upper == FULL_UPPER_BOUND
    assert all(a.upper == b.lower for a, b in zip(ranges, ranges[1:], strict=False))
    assert all(NamespaceBundle.parse(NS, b.range_name) == b for b in ranges)


@given(split_bundles(), st.data())
def test_a_split_partitions_the_bundle_it_splits(bundles: NamespaceBundles, data: st.DataObject) -> None:
    target = data.draw(st.sampled_from([b for b in bundles.bundles if b.upper - b.lower >= 2]))
    after = bundles.split_in_two(target)
    pieces = [b for b in after.bundles if target.lower <= b.lower and b.upper <= target.upper]
    assert len(pieces) == 2 and pieces[0].lower == target.lower and pieces[1].upper == target.upper
    assert pieces[0].upper == pieces[1].lower
    assert set(after.bundles) - set(pieces) == set(bundles.bundles) - {target}

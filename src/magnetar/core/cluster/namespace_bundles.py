"""A namespace's hash ranges (bundles) and the bundle a topic falls in.

Pulsar 4.x ``NamespaceBundles`` and ``NamespaceBundleFactory``: a namespace's 32-bit hash
space 0x00000000..0xffffffff is cut at sorted boundaries; each bundle is
``[lower, upper)`` except the last, which also holds 0xffffffff. A new namespace gets
``defaultNumberOfNamespaceBundles`` (4) equal bundles whose boundaries are multiples of
2^32 / n, the last boundary being 0xffffffff (Pulsar's ``getBundles(numBundles)``); a
bundle is named by its range, ``0x00000000_0x40000000``.

A topic's hash is CRC-32 of its full name (``persistent://tenant/ns/topic``, a partition
hashed by its own name) as an unsigned number: Pulsar's ``NamespaceService`` builds its
factory with Guava's ``Hashing.crc32()`` and ``getLongHashCode`` pads it to a long.
(Murmur3 is Pulsar's sticky-key hash, not its bundle hash.) Splitting in two at the middle
is Pulsar's ``range_equally_divide``: ``lower + (upper - lower) // 2``.
"""

from __future__ import annotations

import zlib
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

FULL_LOWER_BOUND = 0x00000000
FULL_UPPER_BOUND = 0xFFFFFFFF
#: Pulsar's broker setting: bundles of a namespace created without a number of its own
DEFAULT_NUMBER_OF_NAMESPACE_BUNDLES = 4


class InvalidBundle(ValueError):
    """A bundle range or a set of boundaries that does not describe a namespace's hash space."""


def bundle_hash(topic_name: str) -> int:
    """The bundle hash of a full topic name (unsigned CRC-32 of its UTF-8 bytes, as Pulsar's)."""
    return zlib.crc32(topic_name.encode("utf-8"))


def format_boundary(value: int) -> str:
    return f"0x{value:08x}"


def default_boundaries(number_of_bundles: int = DEFAULT_NUMBER_OF_NAMESPACE_BUNDLES) -> tuple[int, ...]:
    """Pulsar's boundaries for ``number_of_bundles`` equal bundles (the last one absorbs the rest)."""
    if not 0 < number_of_bundles <= FULL_UPPER_BOUND:
        raise InvalidBundle(f"Invalid number of bundles {number_of_bundles}: it must be in (0, 2^32)")
    size = (FULL_UPPER_BOUND + 1) // number_of_bundles
    return (*(i * size for i in range(number_of_bundles)), FULL_UPPER_BOUND)


@dataclass(frozen=True, order=True)
class NamespaceBundle:
    """One bundle: ``namespace`` (``tenant/ns``) and the range ``[lower, upper)``, or
    ``[lower, upper]`` when ``upper`` is the end of the hash space."""

    namespace: str
    lower: int
    upper: int

    def __post_init__(self) -> None:
        if not FULL_LOWER_BOUND <= self.lower < self.upper <= FULL_UPPER_BOUND:
            raise InvalidBundle(f"Invalid bundle range {self.range_name} of {self.namespace}")

    @property
    def range_name(self) -> str:
        """Pulsar's name of the range, as admin paths and ownership nodes carry it."""
        return f"{format_boundary(self.lower)}_{format_boundary(self.upper)}"

    def includes_hash(self, hash_value: int) -> bool:
        return self.lower <= hash_value < self.upper or hash_value == self.upper == FULL_UPPER_BOUND

    def includes(self, topic_name: str) -> bool:
        return self.includes_hash(bundle_hash(topic_name))

    @classmethod
    def parse(cls, namespace: str, range_name: str) -> NamespaceBundle:
        """A bundle from its range name (``0x00000000_0x40000000``); a clear error otherwise."""
        lower_text, sep, upper_text = range_name.partition("_")
        try:
            if not sep:
                raise ValueError("no '_'")
            return cls(namespace, int(lower_text, 16), int(upper_text, 16))
        except ValueError as exc:
            raise InvalidBundle(f"Invalid bundle range '{range_name}': expected 0x<lower>_0x<upper> "
                                f"inside 0x00000000_0xffffffff") from exc

    def __str__(self) -> str:
        return f"{self.namespace}/{self.range_name}"


class NamespaceBundles:
    """A namespace's bundles: sorted boundaries from 0x00000000 to 0xffffffff."""

    __slots__ = ("namespace", "boundaries")

    def __init__(self, namespace: str, boundaries: Sequence[int] | None = None) -> None:
        bounds = tuple(default_boundaries() if boundaries is None else boundaries)
        if len(bounds) < 2 or bounds[0] != FULL_LOWER_BOUND or bounds[-1] != FULL_UPPER_BOUND:
            raise InvalidBundle(f"Bundles of {namespace} must cover 0x00000000..0xffffffff, not {bounds}")
        if any(a >= b for a, b in zip(bounds, bounds[1:], strict=False)):
            raise InvalidBundle(f"Bundle boundaries of {namespace} must increase: {bounds}")
        self.namespace = namespace
        self.boundaries = bounds

    @property
    def bundles(self) -> list[NamespaceBundle]:
        pairs = zip(self.boundaries, self.boundaries[1:], strict=False)
        return [NamespaceBundle(self.namespace, lower, upper) for lower, upper in pairs]

    def __len__(self) -> int:
        return len(self.boundaries) - 1

    def bundle_of_hash(self, hash_value: int) -> NamespaceBundle:
        """The one bundle holding ``hash_value`` (the last boundary belongs to the last bundle)."""
        if not FULL_LOWER_BOUND <= hash_value <= FULL_UPPER_BOUND:
            raise InvalidBundle(f"Hash {hash_value} is outside the 32-bit bundle hash space")
        i = min(bisect_right(self.boundaries, hash_value) - 1, len(self.boundaries) - 2)
        return NamespaceBundle(self.namespace, self.boundaries[i], self.boundaries[i + 1])

    def find_bundle(self, topic_name: str) -> NamespaceBundle:
        """The bundle of a full topic name of this namespace."""
        return self.bundle_of_hash(bundle_hash(topic_name))

    def split_in_two(self, bundle: NamespaceBundle) -> NamespaceBundles:
        """These bundles with ``bundle`` cut at its middle (Pulsar's ``range_equally_divide``)."""
        if bundle.namespace != self.namespace or bundle.lower not in self.boundaries \
                or self.bundle_of_hash(bundle.lower) != bundle:
            raise InvalidBundle(f"{bundle} is not a bundle of {self.namespace}")
        if bundle.upper - bundle.lower < 2:
            raise InvalidBundle(f"{bundle} cannot be split further")
        middle = bundle.lower + (bundle.upper - bundle.lower) // 2
        return NamespaceBundles(self.namespace, sorted((*self.boundaries, middle)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NamespaceBundles) and (self.namespace, self.boundaries) == (
            other.namespace, other.boundaries)

    def __hash__(self) -> int:
        return hash((self.namespace, self.boundaries))

    def __repr__(self) -> str:
        return f"NamespaceBundles({self.namespace}, {[b.range_name for b in self.bundles]})"

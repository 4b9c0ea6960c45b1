"""A namespace's bundles as its policies keep them: Pulsar's ``BundlesData``.

``{"boundaries": ["0x00000000", ..., "0xffffffff"], "numBundles": n}`` under the policies'
``bundles`` key. A namespace whose policies hold no boundaries (every namespace until its
first split) has ``numBundles`` equal bundles, or without it ``defaultNumberOfNamespaceBundles``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from magnetar.core.cluster.namespace_bundles import InvalidBundle, NamespaceBundles, default_boundaries, format_boundary

POLICIES_KEY = "bundles"


def bundles_of(namespace: str, policies: Mapping[str, Any] | None) -> NamespaceBundles:
    """The namespace's bundles from its stored policies; :class:`InvalidBundle` when they
    hold boundaries that do not describe a namespace's hash space."""
    data = (policies or {}).get(POLICIES_KEY)
    if not isinstance(data, dict):
        return NamespaceBundles(namespace)
    if not data.get("boundaries"):
        count = data.get("numBundles")
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:
            return NamespaceBundles(namespace, default_boundaries(count))
        return NamespaceBundles(namespace)
    boundaries = data["boundaries"]
    try:
        values = [int(b, 16) for b in boundaries]
    except (TypeError, ValueError):
        raise InvalidBundle(f"bundles of {namespace}: boundaries must be hex strings, not {boundaries!r}") from None
    return NamespaceBundles(namespace, values)


def bundles_data(bundles: NamespaceBundles) -> dict[str, Any]:
    """The policies' ``bundles`` value for these bundles."""
    return {"boundaries": [format_boundary(b) for b in bundles.boundaries], "numBundles": len(bundles)}

"""A split written to the metadata store: a namespace's boundaries with one bundle cut in
two (a standalone broker's whole split; a cluster's owner writes it between creating the
halves' ownership nodes and deleting the old one).

The boundaries are written by compare-and-set on the policies' version
(:func:`~magnetar.core.metadata.policy_updates.update_namespace_policies`): two brokers
splitting two bundles of one namespace at once both read the same boundaries, and the
second write would drop the first one's cut. The write that loses the race reads the
boundaries again and cuts its bundle into those.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from magnetar.core.cluster.bundle_split import split_bundle
from magnetar.core.cluster.bundles_data import POLICIES_KEY, bundles_data, bundles_of
from magnetar.core.cluster.namespace_bundles import NamespaceBundle, NamespaceBundles, bundle_hash
from magnetar.core.metadata.interfaces import NamespaceStore
from magnetar.core.metadata.policy_updates import update_namespace_policies


def split_in_store(store: NamespaceStore, bundle: NamespaceBundle, algorithm: str,
                   topics: Sequence[str]) -> NamespaceBundles:
    """Write the namespace's boundaries with ``bundle`` split."""
    hashes = [bundle_hash(t) for t in topics]

    def split(policies: dict[str, Any]) -> dict[str, Any]:
        after = split_bundle(bundles_of(bundle.namespace, policies), bundle, algorithm, hashes)
        return {**policies, POLICIES_KEY: bundles_data(after)}
    return bundles_of(bundle.namespace, update_namespace_policies(store, bundle.namespace, split))

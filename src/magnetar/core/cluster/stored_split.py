"""A split written to the metadata store: a namespace's boundaries with one bundle cut in
two (a standalone broker's whole split; a cluster's owner writes it between creating the
halves' ownership nodes and deleting the old one).

The boundaries are written by compare-and-set on the policies' version: two brokers
splitting two bundles of one namespace at once both read the same boundaries, and the
second write would drop the first one's cut. The write that loses the race reads the
boundaries again and cuts its bundle into those.
"""

from __future__ import annotations

from collections.abc import Sequence

from magnetar.core.cluster.bundle_split import split_bundle
from magnetar.core.cluster.bundles_data import POLICIES_KEY, bundles_data, bundles_of
from magnetar.core.cluster.namespace_bundles import NamespaceBundle, NamespaceBundles, bundle_hash
from magnetar.core.metadata.interfaces import NamespaceStore
from magnetar.core.metadata.records import NotFound, VersionConflict

#: writes of one split that may lose a race before it gives up (each loss is another's write)
SPLIT_ATTEMPTS = 10


def split_in_store(store: NamespaceStore, bundle: NamespaceBundle, algorithm: str,
                   topics: Sequence[str]) -> NamespaceBundles:
    """Write the namespace's boundaries with ``bundle`` split."""
    hashes = [bundle_hash(t) for t in topics]
    for _ in range(SPLIT_ATTEMPTS):
        held = store.get_versioned_namespace_policies(bundle.namespace)
        if held is None:
            raise NotFound(f"Namespace {bundle.namespace} does not exist")
        after = split_bundle(bundles_of(bundle.namespace, held.data), bundle, algorithm, hashes)
        try:
            store.put_versioned_namespace_policies(bundle.namespace, {**held.data, POLICIES_KEY: bundles_data(after)},
                                                   held.version)
        except VersionConflict:
            continue
        return after
    raise VersionConflict(f"the policies of {bundle.namespace} changed {SPLIT_ATTEMPTS} times while {bundle} "
                          "was split; try again")

"""A split written to the metadata store: a namespace's boundaries with one bundle cut in
two (a standalone broker's whole split; a cluster's owner writes it between creating the
halves' ownership nodes and deleting the old one)."""

from __future__ import annotations

from collections.abc import Sequence

from magnetar.core.cluster.bundle_split import split_bundle
from magnetar.core.cluster.bundles_data import POLICIES_KEY, bundles_data, bundles_of
from magnetar.core.cluster.namespace_bundles import NamespaceBundle, NamespaceBundles, bundle_hash
from magnetar.core.metadata.interfaces import NamespaceStore
from magnetar.core.metadata.records import NotFound


def split_in_store(store: NamespaceStore, bundle: NamespaceBundle, algorithm: str,
                   topics: Sequence[str]) -> NamespaceBundles:
    """Write the namespace's boundaries with ``bundle`` split."""
    policies = store.get_namespace_policies(bundle.namespace)
    if policies is None:
        raise NotFound(f"Namespace {bundle.namespace} does not exist")
    after = split_bundle(bundles_of(bundle.namespace, policies), bundle, algorithm,
                         [bundle_hash(t) for t in topics])
    store.put_namespace_policies(bundle.namespace, {**policies, POLICIES_KEY: bundles_data(after)})
    return after

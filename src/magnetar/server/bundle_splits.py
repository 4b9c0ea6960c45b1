"""A bundle split in a running broker (``PUT /admin/v2/namespaces/{tenant}/{ns}/{bundle}/split``).

The owner splits; another broker answers 307 to it. The order of the writes keeps one owner
per topic at every moment, whatever bundles a broker still believes in:

1. the owner creates the halves' ownership nodes (both still free: nobody else may take them);
2. it writes the namespace's new boundaries into its policies (Pulsar's ``BundlesData``);
3. it deletes the old bundle's node. A broker that still reads the old boundaries and takes
   the old range after that finds it gone from the policies just after its create, and gives
   it back (``ClusterMembership.acquire``).

The topics stay loaded and served through the split; with ``unload``, the halves are then
unloaded, and the leader places them like any free bundle.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from magnetar.core.cluster.bundle_split import SplitRefused, split_bundle
from magnetar.core.cluster.namespace_bundles import InvalidBundle, NamespaceBundle, bundle_hash
from magnetar.core.cluster.stored_split import split_in_store
from magnetar.core.cluster.topic_lookup import AdminRedirect
from magnetar.core.metadata.records import AlreadyExists, NotFound
from magnetar.server.cluster_membership import ClusterMembership

log = logging.getLogger("magnetar.cluster")


async def split_owned_bundle(membership: ClusterMembership, bundle: NamespaceBundle, algorithm: str,
                             unload: bool, topics: Sequence[str], path: str) -> AdminRedirect | None:
    """Split ``bundle`` here if this broker owns it (or nobody does); else the 307 to its owner."""
    bundles = await membership.read_bundles(bundle.namespace)
    if bundle not in bundles.bundles:
        raise InvalidBundle(f"Bundle {bundle.range_name} is not a bundle of {bundle.namespace}")
    key = (bundle.namespace, bundle.range_name)
    if key not in membership.owned:
        owner = await membership.owner_of_bundle(bundle)
        if owner is not None and owner.broker_id != membership.broker_id:
            base = owner.web_url(False)
            if base is None:
                raise SplitRefused(f"the owner {owner.broker_id} of {bundle} advertises no web service URL")
            return AdminRedirect(base.rstrip("/") + path)
        if not await membership.acquire(bundle):
            raise SplitRefused(f"{bundle} was taken by another broker meanwhile; try again")
    hashes = [bundle_hash(t) for t in topics]
    halves = [b for b in split_bundle(bundles, bundle, algorithm, hashes).bundles if b not in bundles.bundles]
    created: list[NamespaceBundle] = []
    try:
        for half in halves:
            if not await membership.acquire(half, still_a_bundle=False):
                raise SplitRefused(f"{half} is owned already; try again")
            created.append(half)
        after = await membership.calls.run(split_in_store, membership.store, bundle, algorithm, topics)
    except BaseException:
        for half in created:
            await _release(membership, half)
        raise
    membership.bundles[bundle.namespace] = after
    await _release(membership, bundle)
    log.info("split bundle %s into %s (%s)", bundle, " and ".join(h.range_name for h in halves), algorithm)
    if unload:
        for half in halves:
            await membership.unload_bundle(half, path)
    return None


async def _release(membership: ClusterMembership, bundle: NamespaceBundle) -> None:
    version = membership.owned.pop((bundle.namespace, bundle.range_name), None)
    if version is None:
        return
    try:
        await membership.calls.run(membership.store.release_bundle, bundle.namespace, bundle.range_name, version)
    except (NotFound, AlreadyExists) as exc:
        log.warning("could not release %s: %s", bundle, exc)
    await membership.update_registration()

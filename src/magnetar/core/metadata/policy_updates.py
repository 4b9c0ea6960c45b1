"""A namespace's policies changed by read-modify-write, as Pulsar's ``readModifyUpdate`` changes
its policies node: the write names the version the change was made from, and when another
writer came in between (a bundle split by another broker, another admin request), the
policies are read again and the change is made again on what that writer left.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from magnetar.core.metadata.interfaces import NamespaceStore
from magnetar.core.metadata.records import NotFound, VersionConflict

#: lost races one change may meet before it gives up (each loss is another writer's success)
UPDATE_ATTEMPTS = 10


def update_namespace_policies(store: NamespaceStore, name: str,
                              change: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """Write ``change(policies)`` over the policies it was made from; the policies written.
    :class:`NotFound` without the namespace; :class:`VersionConflict` after
    :data:`UPDATE_ATTEMPTS` lost races. What ``change`` raises ends the update unwritten."""
    for _ in range(UPDATE_ATTEMPTS):
        held = store.get_versioned_namespace_policies(name)
        if held is None:
            raise NotFound(f"Namespace {name} does not exist")
        policies = change(dict(held.data))
        try:
            store.put_versioned_namespace_policies(name, policies, held.version)
        except VersionConflict:
            continue
        return policies
    raise VersionConflict(f"the policies of {name} changed {UPDATE_ATTEMPTS} times while they were updated; "
                          "try again")

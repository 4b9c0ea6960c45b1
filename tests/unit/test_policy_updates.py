"""Read-modify-write of a namespace's policies: made again on what a racing writer left, and
given up with a clear error when others never stop writing."""

from __future__ import annotations

from typing import Any

import pytest

from magnetar.core.cluster.bundle_split import split_bundle
from magnetar.core.cluster.bundles_data import bundles_of
from magnetar.core.cluster.namespace_bundles import InvalidBundle, NamespaceBundle
from magnetar.core.cluster.stored_split import split_in_store
from magnetar.core.metadata.policy_updates import UPDATE_ATTEMPTS, update_namespace_policies
from magnetar.core.metadata.records import NotFound, VersionConflict, Versioned
from magnetar.storage import MemoryMetadataStore


class BusyStore(MemoryMetadataStore):
    """Another writer changes the policies after each read, ``busy`` times."""

    def __init__(self, busy: int) -> None:
        super().__init__()
        self.busy = busy
        self.reads = 0

    def get_versioned_namespace_policies(self, name: str) -> Versioned | None:
        held = super().get_versioned_namespace_policies(name)
        self.reads += 1
        if held is not None and self.busy > 0:
            self.busy -= 1
            self.put_namespace_policies(name, {**held.data, "other": self.reads})
        return held


def test_a_change_is_made_again_on_what_the_racing_writer_left() -> None:
    store = BusyStore(busy=3)
    store.create_namespace("t/ns", {})
    written = update_namespace_policies(store, "t/ns", lambda p: {**p, "mine": 1})
    assert written == {"other": 3, "mine": 1} == store.get_namespace_policies("t/ns")
    assert store.reads == 4


def test_a_change_gives_up_when_the_policies_never_stop_changing() -> None:
    store = BusyStore(busy=UPDATE_ATTEMPTS)
    store.create_namespace("t/ns", {})
    with pytest.raises(VersionConflict, match=f"changed {UPDATE_ATTEMPTS} times"):
        update_namespace_policies(store, "t/ns", lambda p: {**p, "mine": 1})
    assert "mine" not in (store.get_namespace_policies("t/ns") or {})


def test_a_missing_namespace_and_a_refused_change_write_nothing() -> None:
    store = MemoryMetadataStore()
    with pytest.raises(NotFound, match="Namespace t/ns does not exist"):
        update_namespace_policies(store, "t/ns", lambda p: p)
    store.create_namespace("t/ns", {})
    whole = NamespaceBundle.parse("t/ns", "0x00000000_0xffffffff")
    with pytest.raises(InvalidBundle):  # a split of a range that is no bundle of the namespace

        def refuse(policies: dict[str, Any]) -> dict[str, Any]:
            split_bundle(bundles_of("t/ns", policies), whole, "range_equally_divide", [])
            return policies
        update_namespace_policies(store, "t/ns", refuse)
    assert store.get_versioned_namespace_policies("t/ns") == Versioned({}, 0)
    first = bundles_of("t/ns", {}).bundles[0]
    assert len(split_in_store(store, first, "range_equally_divide", [])) == len(bundles_of("t/ns", {})) + 1

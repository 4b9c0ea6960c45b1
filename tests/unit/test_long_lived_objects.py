"""Survivors of a full collection are frozen; enough releases unfreeze them."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from magnetar.server.long_lived_objects import MIN_RELEASED, THRESHOLDS, LongLivedObjects


@pytest.fixture
def policy() -> Iterator[LongLivedObjects]:
    loaded = {"n": 0}
    made = LongLivedObjects(lambda: loaded["n"])
    made.install()
    try:
        yield made
    finally:
        made.uninstall()
        assert gc.get_freeze_count() == 0


def test_a_full_collection_freezes_its_survivors(policy: LongLivedObjects) -> None:
    gc.collect()
    assert policy.freezes >= 1
    assert gc.get_freeze_count() > 0
    gc.collect(1)  # a young collection leaves the frozen ones alone
    assert gc.get_freeze_count() > 0


def test_released_objects_are_reclaimed_after_enough_releases(policy: LongLivedObjects) -> None:
    class Node:
        def __init__(self) -> None:
            self.me = self  # a cycle: only the collector frees it

    import weakref
    node = Node()
    alive = weakref.ref(node)
    gc.collect()  # node survives and is frozen
    del node
    gc.collect()
    assert alive() is not None, "a frozen cycle is kept while frozen"
    policy.released(MIN_RELEASED - 1)
    assert gc.get_freeze_count() > 0
    policy.released()
    assert policy.unfreezes == 1 and policy.released_since_unfreeze == 0
    gc.collect()
    assert alive() is None


def test_only_what_lived_through_a_freeze_counts_as_released() -> None:
    made = LongLivedObjects(lambda: 0)
    born = made.epoch
    made.released(born_at=born)  # came and went between two full collections: never frozen
    assert made.released_since_unfreeze == 0
    made.install()
    try:
        gc.collect()  # a full collection froze it while it was alive
    finally:
        made.uninstall()
    assert made.epoch == born + 1
    made.released(born_at=born)
    made.released()  # no birth epoch known: counted
    assert made.released_since_unfreeze == 2


def test_the_release_threshold_grows_with_what_is_loaded() -> None:
    made = LongLivedObjects(lambda: 40_000)
    made.released(MIN_RELEASED)
    assert made.unfreezes == 0  # a quarter of 40,000 is the bar
    made.released(9_000)
    assert made.unfreezes == 1
    gc.unfreeze()


def test_install_twice_adds_one_callback() -> None:
    made = LongLivedObjects(lambda: 0)
    made.install()
    made.install()
    try:
        assert gc.callbacks.count(made._after_collection) == 1
    finally:
        made.uninstall()
    assert made._after_collection not in gc.callbacks


def test_young_collections_run_less_often_while_installed_and_as_before_after() -> None:
    before = gc.get_threshold()
    made = LongLivedObjects(lambda: 0)
    made.install()
    try:
        assert gc.get_threshold() == THRESHOLDS
    finally:
        made.uninstall()
    assert gc.get_threshold() == before


def test_a_middle_collection_freezes_a_large_old_generation_without_a_full_collection() -> None:
    made = LongLivedObjects(lambda: 0, old_unfrozen_max=1_000)
    made.install()
    try:
        gc.collect()  # everything older is frozen
        before = gc.get_freeze_count()
        kept = [[i] for i in range(5_000)]  # long-lived containers, as a topic load makes
        gc.collect(1)  # they move to the old generation
        gc.collect(1)  # it holds more than the bound: frozen after this middle collection
        assert gc.get_freeze_count() - before >= len(kept)
        assert len(gc.get_objects(generation=2)) <= 1_000
        freezes = made.freezes
        small = [[1]]
        gc.collect(1)
        gc.collect(1)  # below the bound: a middle collection leaves the old generation be
        assert made.freezes == freezes
        assert small[0] == [1]
    finally:
        made.uninstall()
    assert gc.get_freeze_count() == 0


def test_garbage_unfrozen_is_not_frozen_again_before_a_full_collection() -> None:
    class Node:
        def __init__(self) -> None:
            self.me = self

    import weakref
    made = LongLivedObjects(lambda: 0, old_unfrozen_max=1_000)
    made.install()
    try:
        nodes = [Node() for _ in range(5_000)]  # more than the bound: frozen early
        gc.collect(1)
        gc.collect(1)
        alive = [weakref.ref(node) for node in nodes[:10]]
        del nodes
        made.released(MIN_RELEASED)
        gc.collect(1)  # a middle collection after the unfreeze: the old generation is large,
        gc.collect(1)  # but what it holds waits for the full collection, not frozen again
        assert gc.get_freeze_count() == 0
        gc.collect()
        assert all(ref() is None for ref in alive)
    finally:
        made.uninstall()

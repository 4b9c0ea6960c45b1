"""Bundle ownership on one broker (the transition table and what each store answer does)
and the answers a broker gives to lookups, admin requests and commands."""

from __future__ import annotations

import pytest

from magnetar.core.cluster.broker_placement import select_broker
from magnetar.core.cluster.bundle_ownership import (
    TRANSITIONS,
    BundleOwnership,
    BundleState,
    OwnershipAction,
    OwnershipEffect,
    OwnershipEvent,
)
from magnetar.core.cluster.metadata_store import SessionEvent
from magnetar.core.cluster.namespace_bundles import NamespaceBundles
from magnetar.core.cluster.namespace_ephemeral_data import (
    InvalidOwnerData,
    ListenerUrls,
    NamespaceEphemeralData,
)
from magnetar.core.cluster.topic_lookup import (
    Acquire,
    AdminRedirect,
    BundleView,
    Connect,
    NotReady,
    Redirect,
    RegisteredBroker,
    check_serving,
    decide_admin,
    decide_lookup,
)

BUNDLE, OTHER = NamespaceBundles("public/default").bundles[:2]
E, S, A = OwnershipEvent, BundleState, OwnershipAction


def owner(broker_id: str) -> NamespaceEphemeralData:
    return NamespaceEphemeralData(broker_id, f"pulsar://{broker_id}:6650", f"pulsar+ssl://{broker_id}:6651",
                                  f"http://{broker_id}:8080", f"https://{broker_id}:8443",
                                  advertised_listeners={"internal": ListenerUrls(f"pulsar://{broker_id}.lan:6650")})


def started(session_id: int = 7) -> BundleOwnership:
    ownership = BundleOwnership("b0")
    ownership.on_session_event(SessionEvent.SESSION_REESTABLISHED, session_id, now_ms=0)
    return ownership


def test_acquire_then_created_owns_the_bundle_since_the_answer() -> None:
    ownership = started()
    assert ownership.handle(BUNDLE, E.ACQUIRE, 10) == [OwnershipEffect(BUNDLE, A.CREATE_NODE)]
    assert ownership.state(BUNDLE) is S.ACQUIRING and ownership.owned_since_ms(BUNDLE) is None
    assert ownership.handle(BUNDLE, E.CREATED, 25, session_id=7) == [OwnershipEffect(BUNDLE, A.SERVE)]
    assert ownership.owned() == [BUNDLE] and ownership.owned_since_ms(BUNDLE) == 25


@pytest.mark.parametrize(("owner_broker", "owner_session", "expected"), [
    ("b0", 7, S.OWNED),      # our create landed, its answer was lost
    ("b0", 3, S.UNOWNED),    # a node of an earlier session of ours: not ours
    ("b1", 9, S.UNOWNED),
])
def test_a_node_that_exists_is_ours_only_with_our_session(owner_broker: str, owner_session: int,
                                                          expected: BundleState) -> None:
    ownership = started()
    ownership.handle(BUNDLE, E.ACQUIRE, 0)
    ownership.on_exists(BUNDLE, owner_broker, owner_session, 5, session_id=7)
    assert ownership.state(BUNDLE) is expected


def test_answers_of_another_session_change_nothing() -> None:
    ownership = started(7)
    ownership.handle(BUNDLE, E.ACQUIRE, 0)
    assert ownership.handle(BUNDLE, E.CREATED, 5, session_id=6) == []
    assert ownership.state(BUNDLE) is S.ACQUIRING


def test_a_lost_session_loses_every_bundle_and_nothing_comes_back_by_itself() -> None:
    """apache/pulsar #24478: nothing of the old ownership is assumed after a new session."""
    ownership = started(7)
    for bundle in (BUNDLE, OTHER):
        ownership.handle(bundle, E.ACQUIRE, 0)
        ownership.handle(bundle, E.CREATED, 1, session_id=7)
    effects = ownership.on_session_event(SessionEvent.SESSION_LOST, 7, 50)
    assert effects == [OwnershipEffect(BUNDLE, A.STOP_SERVING), OwnershipEffect(OTHER, A.STOP_SERVING)]
    assert ownership.session_id is None and ownership.owned() == []
    assert ownership.handle(BUNDLE, E.ACQUIRE, 60) == []  # no session, no acquiring
    ownership.on_session_event(SessionEvent.SESSION_REESTABLISHED, 8, 70)
    assert ownership.owned() == [] and ownership.handle(BUNDLE, E.CREATED, 71, session_id=7) == []


def test_a_new_session_without_a_lost_one_first_still_drops_everything() -> None:
    ownership = started(7)
    ownership.handle(BUNDLE, E.ACQUIRE, 0)
    ownership.handle(BUNDLE, E.CREATED, 1, session_id=7)
    assert ownership.on_session_event(SessionEvent.SESSION_REESTABLISHED, 8, 5) == [
        OwnershipEffect(BUNDLE, A.STOP_SERVING)]
    assert ownership.on_session_event(SessionEvent.CONNECTION_LOST, 8, 6) == []


def test_a_reconnection_within_the_session_keeps_what_is_owned() -> None:
    ownership = started(7)
    ownership.handle(BUNDLE, E.ACQUIRE, 0)
    ownership.handle(BUNDLE, E.CREATED, 1, session_id=7)
    assert ownership.on_session_event(SessionEvent.CONNECTION_LOST, 7, 2) == []
    assert ownership.on_session_event(SessionEvent.RECONNECTED, 7, 3) == []
    assert ownership.owned() == [BUNDLE] and ownership.owned_since_ms(BUNDLE) == 1


def test_release_closes_topics_then_deletes_the_node() -> None:
    ownership = started()
    ownership.handle(BUNDLE, E.ACQUIRE, 0)
    ownership.handle(BUNDLE, E.CREATED, 1, session_id=7)
    assert ownership.handle(BUNDLE, E.RELEASE, 2) == [OwnershipEffect(BUNDLE, A.CLOSE_TOPICS)]
    assert ownership.handle(BUNDLE, E.TOPICS_CLOSED, 3) == [OwnershipEffect(BUNDLE, A.DELETE_NODE)]
    assert ownership.handle(BUNDLE, E.DELETED, 4, session_id=7) == []
    assert ownership.state(BUNDLE) is S.UNOWNED


def test_a_node_deleted_under_an_owner_stops_it_at_once() -> None:
    ownership = started()
    ownership.handle(BUNDLE, E.ACQUIRE, 0)
    ownership.handle(BUNDLE, E.CREATED, 1, session_id=7)
    assert ownership.handle(BUNDLE, E.NODE_DELETED, 2, session_id=7) == [OwnershipEffect(BUNDLE, A.STOP_SERVING)]


def _reachable(start: BundleState, edges: dict[BundleState, set[BundleState]]) -> set[BundleState]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in edges.get(todo.pop(), set()) - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_the_table_reaches_every_state_and_every_state_gets_back_to_unowned() -> None:
    forward: dict[BundleState, set[BundleState]] = {}
    backward: dict[BundleState, set[BundleState]] = {}
    for (state, _event), (next_state, _action) in TRANSITIONS.items():
        forward.setdefault(state, set()).add(next_state)
        backward.setdefault(next_state, set()).add(state)
    assert _reachable(S.UNOWNED, forward) == set(S)
    assert _reachable(S.UNOWNED, backward) == set(S)
    # every state but UNOWNED gives the bundle up on a lost session
    assert {s for (s, e) in TRANSITIONS if e is E.SESSION_LOST} == set(S) - {S.UNOWNED}


def test_placement_is_least_loaded_then_by_name() -> None:
    assert select_broker({"b2": 1, "b1": 1, "b0": 3}) == "b1"
    assert select_broker({}) is None


REGISTERED = {"b0": RegisteredBroker(owner("b0"), 2), "b1": RegisteredBroker(owner("b1"), 0)}


def test_lookup_answers() -> None:
    assert decide_lookup("b0", BundleView(S.OWNED, None), REGISTERED) == Connect()
    assert isinstance(decide_lookup("b0", BundleView(S.ACQUIRING, None), REGISTERED), NotReady)
    assert decide_lookup("b0", BundleView(S.UNOWNED, owner("b1")), REGISTERED) == Redirect(
        "b1", "pulsar://b1:6650", "pulsar+ssl://b1:6651", authoritative=True)
    assert decide_lookup("b0", BundleView(S.UNOWNED, owner("b1")), REGISTERED, "internal") == Redirect(
        "b1", "pulsar://b1.lan:6650", None)
    assert "advertises no listener 'x'" in decide_lookup(
        "b0", BundleView(S.UNOWNED, owner("b1")), REGISTERED, "x").message  # type: ignore[union-attr]
    # nobody owns it: the placement picks b1 (fewer bundles), so b0 redirects there
    assert decide_lookup("b0", BundleView(S.UNOWNED, None), REGISTERED) == Redirect(
        "b1", "pulsar://b1:6650", "pulsar+ssl://b1:6651")
    assert decide_lookup("b1", BundleView(S.UNOWNED, None), REGISTERED) == Acquire()
    # an authoritative lookup (a redirected client) is served where it arrives
    assert decide_lookup("b0", BundleView(S.UNOWNED, None), REGISTERED, authoritative=True) == Acquire()
    assert isinstance(decide_lookup("b0", BundleView(S.UNOWNED, None), {}), NotReady)


def test_a_node_of_our_own_is_acquired_only_when_it_is_of_our_session() -> None:
    assert decide_lookup("b0", BundleView(S.UNOWNED, owner("b0"), owner_session_is_ours=True), REGISTERED) \
        == Acquire()
    assert isinstance(decide_lookup("b0", BundleView(S.UNOWNED, owner("b0")), REGISTERED), NotReady)


def test_admin_requests_redirect_with_307_to_the_owners_web_url() -> None:
    path = "/admin/v2/persistent/public/default/t/stats"
    answer = decide_admin("b0", BundleView(S.UNOWNED, owner("b1")), REGISTERED, path)
    assert answer == AdminRedirect("http://b1:8080" + path, 307)
    assert decide_admin("b0", BundleView(S.UNOWNED, owner("b1")), REGISTERED, path, tls=True) == AdminRedirect(
        "https://b1:8443" + path)
    assert decide_admin("b0", BundleView(S.OWNED, None), REGISTERED, path) == Connect()
    no_web = NamespaceEphemeralData("b1", "pulsar://b1:6650")
    assert isinstance(decide_admin("b0", BundleView(S.UNOWNED, no_web), REGISTERED, path), NotReady)


def test_commands_on_a_topic_not_served_here_get_service_not_ready() -> None:
    assert check_serving("b0", S.OWNED, topic_serving=True) is None
    for state, serving in ((S.OWNED, False), (S.UNOWNED, True), (S.RELEASING, True)):
        refusal = check_serving("b0", state, serving)
        assert refusal is not None and "redo the lookup" in refusal.message


def test_owner_data_round_trips_with_pulsars_field_names_and_bad_data_is_refused() -> None:
    data = owner("b1")
    assert NamespaceEphemeralData.from_json(data.to_json()) == data
    assert b'"nativeUrl":"pulsar://b1:6650"' in data.to_json() and b'"advertisedListeners"' in data.to_json()
    for bad in (b"", b"[]", b'{"nativeUrl": "x"}', b"\xff"):
        with pytest.raises(InvalidOwnerData):
            NamespaceEphemeralData.from_json(bad)

"""Key_Shared dispatch, in both modes, as named regression scenarios.

Every scenario runs on the simulated world, so besides its own assertions each step is
judged by the contract checkers (single ownership, per-key order, flow control) and the
broker's idea of what is pending must match the clients'. ``classic`` selects
``subscriptionKeySharedUseClassicPersistentImplementation``.
"""

from __future__ import annotations

import random

import pytest

from magnetar.core.dispatchers.key_shared import KeySharedDispatcher
from magnetar.core.dispatchers.key_shared_classic import KeySharedClassicDispatcher
from magnetar.core.errors import ConsumerAssignError, ConsumerBusy, NotAllowed
from magnetar.core.key_shared.sticky_key import sticky_key_hash
from magnetar.testing.entries import append_entry
from magnetar.testing.sim.options import AUTO_SPLIT_CONSISTENT, AUTO_SPLIT_RANGES
from magnetar.testing.sim.scenario import Scenario, find_key, key_moving, owners

BOTH_MODES = pytest.mark.parametrize("classic", [False, True], ids=["pip379", "classic"])


def keys_owned(names: list[str], owner: str, count: int, prefix: str = "k",
               selector: str = AUTO_SPLIT_CONSISTENT) -> list[str]:
    """``count`` distinct keys that ``owner`` gets among consumers ``names``."""
    owner_of = owners(selector, names)
    found: list[str] = []
    i = 0
    while len(found) < count:
        key = f"{prefix}{i}"
        if owner_of(sticky_key_hash(key.encode())) == owner:
            found.append(key)
        i += 1
    return found


@BOTH_MODES
def test_dispatcher_class_follows_the_switch(classic: bool) -> None:
    s = Scenario(classic=classic)
    s.join("c1")
    expected = KeySharedClassicDispatcher if classic else KeySharedDispatcher
    assert type(s.dispatcher) is expected


# -- seed 003 ------------------------------------------------------------------------------
@BOTH_MODES
def test_reg_seed_003_issue_1_entries_read_but_not_sent_never_reach_the_new_consumer(classic: bool) -> None:
    """c1 (one permit) has key-a's first entry; key-a's next entries wait; c3 joins and takes key-a.

    The waiting entries must not reach c3 while c1 holds the first one; when c1 leaves,
    c3 gets key-a's first entry before the others."""
    s = Scenario(classic=classic)
    key_a = key_moving(AUTO_SPLIT_CONSISTENT, ["c1", "c2"], ["c1", "c2", "c3"], "c1", "c3", "key-a")
    key_b = key_moving(AUTO_SPLIT_CONSISTENT, ["c1", "c2"], ["c1", "c2", "c3"], "c2", "c2", "key-b")
    s.join("c1", queue=1)
    s.join("c2", queue=1000)
    a = s.publish_many([key_a] * 3)
    b = s.publish_many([key_b] * 3)
    assert s.delivered("c1") == a[:1]
    assert s.delivered("c2") == b
    s.join("c3", queue=1000)
    assert s.delivered("c3") == []
    s.crash("c1")
    if classic:
        # held to the last sent position (a[0]) until it is acknowledged
        assert s.delivered("c3") == a[:1]
    else:
        assert s.delivered("c3") == a
    s.drain()


@BOTH_MODES
def test_reg_seed_003_issue_1_order_seen_by_the_new_owner(classic: bool) -> None:
    s = Scenario(classic=classic)
    key_a = key_moving(AUTO_SPLIT_CONSISTENT, ["c1", "c2"], ["c1", "c2", "c3"], "c1", "c3", "key-a")
    key_b = key_moving(AUTO_SPLIT_CONSISTENT, ["c1", "c2"], ["c1", "c2", "c3"], "c2", "c2", "key-b")
    s.join("c1", queue=1)
    s.join("c2", queue=1000)
    a = s.publish_many([key_a] * 3)
    s.publish_many([key_b] * 3)
    s.join("c3", queue=1000)
    s.crash("c1")
    got: list = []
    for _ in range(5):
        got += s.receive("c3")
        s.ack("c3")
    assert got == a  # 1:6, 1:7, 1:8 in the seed's numbering: never 1:7, 1:8, 1:6


@BOTH_MODES
def test_reg_seed_003_issue_2_entry_parked_for_lack_of_permits_waits_for_the_older_one(classic: bool) -> None:
    """key-a's second entry waits for want of c1's permits; c3 joins and takes key-a; c1 leaves:
    c3 must see the first entry before the second."""
    s = Scenario(classic=classic)
    key_a = key_moving(AUTO_SPLIT_CONSISTENT, ["c1", "c2"], ["c1", "c2", "c3"], "c1", "c3", "key-a")
    s.join("c1", queue=1)
    s.join("c2", queue=1000)
    first = s.publish(key_a)
    second = s.publish(key_a)
    assert s.delivered("c1") == [first]
    assert second in s.dispatcher.replay
    s.join("c3", queue=1000)
    assert s.delivered("c3") == []  # PIP-282 step 5 sent 2:2 here; it must wait
    s.crash("c1")
    got = s.receive("c3")
    s.ack("c3")
    got += s.receive("c3")
    assert got == [first, second]
    s.drain()


# -- Pulsar #21199 ----------------------------------------------------------------------------
@BOTH_MODES
def test_reg_21199_a_failing_message_and_a_reconnect_do_not_stall_the_subscription(classic: bool) -> None:
    """A message its consumers cannot process stays unacknowledged while one of them restarts.

    Only that message's key may wait: with PIP-379 every other key, including those of
    the restarted consumer, keeps flowing at once. The classic mode holds the restarted
    consumer back (its documented trade-off) but the others keep going, and everything
    drains once the message is acknowledged."""
    names = ["c1", "c2", "c3"]
    s = Scenario(classic=classic)
    for name in names:
        s.join(name, queue=100)
    owner_of = owners(AUTO_SPLIT_CONSISTENT, names)
    keys = [f"k{i}" for i in range(30)]
    bad_key = next(k for k in keys if owner_of(sticky_key_hash(k.encode())) == "c1")
    bad = s.publish(bad_key)
    s.publish_many(keys)
    s.receive("c1")
    s.ack("c1", [p for p in s.delivered("c1") if p != bad])  # c1 fails on ``bad``
    for name in ("c2", "c3"):
        s.ack(name)
    s.crash("c1")  # the consumer restarts: ``bad`` goes to another consumer, which fails too
    holder = next(n for n in ("c2", "c3") if bad in s.delivered(n))
    other = "c3" if holder == "c2" else "c2"
    s.receive(holder)
    s.join("c1", queue=100)  # back: bad_key maps to c1 again, but ``bad`` is pending at ``holder``
    later = s.publish_many(keys * 3)
    for name in (holder, other):
        s.ack(name, [p for p in s.delivered(name) if p != bad])
    c1_keys = [k for k in keys if owner_of(sticky_key_hash(k.encode())) == "c1" and k != bad_key]
    got_c1 = {s.published[p] for p in s.delivered("c1")}
    if classic:
        assert got_c1 == set()  # recently joined: nothing until the mark-delete position passes
    else:
        assert got_c1 == set(c1_keys)  # every key of c1 but the failing one, at once
    for name in (holder, other):
        assert set(s.keys_of(name)) <= {k for k in keys if owner_of(sticky_key_hash(k.encode())) == name} | {bad_key}
    waiting = [p for p in later if s.published[p] == bad_key]
    assert not any(p in s.delivered("c1") for p in waiting)
    s.ack(holder, [bad])
    s.drain()


# -- Pulsar's KeySharedSubscriptionTest and the regression table (K*) ------------------------
@BOTH_MODES
def test_reg_K2_ordering_when_adding_consumers(classic: bool) -> None:
    """testOrderingWhenAddingConsumers: c1 prefetches 10 messages of 10 keys and holds them;
    c2 joins; 10 more on the same keys: c2 gets none; c1 closes: c2 gets all 20 in order."""
    keys = keys_owned(["c1", "c2"], "c2", 10)
    s = Scenario(classic=classic)
    s.join("c1", queue=100)
    first = s.publish_many(keys)
    assert s.delivered("c1") == first
    s.join("c2", queue=100)
    second = s.publish_many(keys)
    assert s.delivered("c2") == []
    s.crash("c1")
    got: list = []
    for _ in range(3):
        got += s.receive("c2")
        s.ack("c2")
    assert got == first + second


@BOTH_MODES
def test_reg_K2_remove_first_consumer(classic: bool) -> None:
    """testRemoveFirstConsumer: c2 stays empty while c1 holds messages; then takes all in order."""
    s = Scenario(classic=classic)
    s.join("c1", queue=100)
    keys = keys_owned(["c1", "c2"], "c2", 5, prefix="r")
    held = s.publish_many(keys)
    s.receive("c1")
    s.join("c2", queue=100)
    more = s.publish_many(keys)
    assert s.delivered("c2") == []
    s.ack("c1")
    if classic:
        s.ack("c1")
    got = s.receive("c2")
    assert got == more
    assert not set(held) & set(got)
    s.drain()


def test_reg_K12_brand_new_keys_reach_a_new_consumer_at_once() -> None:
    """#14902/#15705: a new consumer got nothing while any old one held unacked messages.
    Under PIP-379 only draining hashes block; a key never seen before goes to c2 at once."""
    s = Scenario()
    s.join("c1", queue=100)
    old_key = keys_owned(["c1", "c2"], "c2", 1, prefix="old")[0]
    s.publish(old_key)
    s.receive("c1")  # held, unacknowledged
    s.join("c2", queue=100)
    new_key = keys_owned(["c1", "c2"], "c2", 1, prefix="new")[0]
    fresh = s.publish(new_key)
    assert s.delivered("c2") == [fresh]
    blocked = s.publish(old_key)
    assert blocked not in s.delivered("c2")
    stats = s.dispatcher.consumer_stats(s.core("c1"))
    assert stats["drainingHashesCount"] == 1
    assert stats["drainingHashes"][0]["hash"] == sticky_key_hash(old_key.encode())
    assert stats["drainingHashes"][0]["blockedAttempts"] >= 1
    s.drain()


def test_reg_K12_classic_holds_a_recently_joined_consumer_back_entirely() -> None:
    """The classic trade-off, kept on purpose: the recently joined consumer waits for the
    mark-delete position, even for keys nobody holds."""
    s = Scenario(classic=True)
    s.join("c1", queue=100)
    old_key = keys_owned(["c1", "c2"], "c2", 1, prefix="old")[0]
    held = s.publish(old_key)
    s.publish(keys_owned(["c1", "c2"], "c1", 1, prefix="x")[0])
    s.receive("c1")
    s.join("c2", queue=100)
    new_key = keys_owned(["c1", "c2"], "c2", 1, prefix="new")[0]
    s.publish(new_key)
    assert s.delivered("c2") == []
    stats = s.dispatcher.subscription_stats()
    assert list(stats["consumersAfterMarkDeletePosition"].values()) == [
        s.dispatcher.consumer_stats(s.core("c2"))["lastSentPositionWhenJoining"]]
    s.ack("c1", [held])
    s.ack("c1")
    assert s.keys_of("c2") == [new_key]
    assert s.dispatcher.subscription_stats()["consumersAfterMarkDeletePosition"] == {}
    s.drain()


@BOTH_MODES
def test_reg_K4_ack_hole_under_load_does_not_stall_other_keys(classic: bool) -> None:
    """#8115/#10167: a consumer joins under load while another holds an ack hole. No global
    stall; once the hole is acknowledged everything flows."""
    s = Scenario(classic=classic)
    s.join("c1", queue=50)
    s.join("c2", queue=50)
    keys = [f"h{i}" for i in range(20)]
    positions = s.publish_many(keys)
    hole = s.delivered("c1")[0]
    for name in ("c1", "c2"):
        s.ack(name, [p for p in s.delivered(name) if p != hole])
    s.join("c3", queue=50)
    s.publish_many(keys * 2)
    for name in ("c1", "c2", "c3"):
        s.ack(name, [p for p in s.delivered(name) if p != hole])
    stuck_key = s.published[hole]
    unacked = [p for p in s.checker.unacked() if s.published[p] != stuck_key]
    if not classic:
        assert unacked == []  # only the key of the hole waits
    s.ack("c1", [hole])
    s.drain()
    assert set(positions) <= set(s.checker.entries)


@BOTH_MODES
def test_reg_K6_receiver_queue_of_one_keeps_per_key_order(classic: bool) -> None:
    """#9940: consumers with one permit, 20 keys, many messages: per key order (the checker)."""
    rng = random.Random(9940)
    s = Scenario(classic=classic)
    for name in ("c1", "c2", "c3"):
        s.join(name, queue=1)
    keys = [f"q{i}" for i in range(20)]
    for round_ in range(40):
        s.publish_many(rng.choice(keys) for _ in range(10))
        for name in ("c1", "c2", "c3"):
            if rng.random() < 0.7:
                s.ack(name)
        if round_ == 15:
            s.join("c4", queue=1)
        if round_ == 25:
            s.crash("c2")
    s.drain()


@BOTH_MODES
def test_reg_K7_consumer_without_permits_owning_every_key_is_not_a_busy_loop(classic: bool) -> None:
    """#10284: A has permits, B none, and every key belongs to B. Dispatch must stop reading
    (bounded by the look-ahead limit) rather than spin; when B sends FLOW it gets them."""
    s = Scenario(classic=classic, look_ahead_per_consumer=5, look_ahead_per_subscription=100)
    s.join("a", queue=100)
    s.join("b", queue=100)
    s.receive("b")
    core_b = s.core("b")
    core_b.permits = 0
    s.checker.permits["b"] = 0
    keys = keys_owned(["a", "b"], "b", 4, prefix="b")
    reads = _count_reads(s)
    s.publish_many(keys * 10)
    assert s.delivered("b") == [] and s.delivered("a") == []
    assert len(s.dispatcher.replay) == 10  # 5 per consumer, 2 consumers
    before = reads[0]
    for _ in range(20):
        s.dispatcher.dispatch(s.world.now_ms)
    assert reads[0] == before  # nothing re-read while nothing can go
    s.flow("b", 100)
    assert len(s.delivered("b")) == 40
    s.drain()


def _count_reads(s: Scenario) -> list[int]:
    count = [0]
    topic = s.world.topic
    read = topic.read_entry

    def counting(pos):  # type: ignore[no-untyped-def]
        count[0] += 1
        return read(pos)
    topic.read_entry = counting  # type: ignore[method-assign]
    return count


@BOTH_MODES
def test_reg_K8_consumers_sharing_a_name(classic: bool) -> None:
    """#10750 testCheckConsumersWithSameName: three consumers named alike; c1 takes 5 messages
    and closes; the other two get all 100."""
    s = Scenario(classic=classic)
    for client, queue in (("c1", 5), ("c2", 1000), ("c3", 1000)):
        s.join(client, queue=queue, consumer_name="same")
    positions = s.publish_many(f"n{i}" for i in range(100))
    s.receive("c1")
    s.crash("c1")
    for client in ("c2", "c3"):
        s.ack(client)
    s.drain()
    assert s.checker.unacked() == []
    assert {p for c in ("c2", "c3") for p in s.checker.outstanding.get(c, ())} == set()
    assert all(s.checker.entries[p].deliveries >= 1 for p in positions)


@BOTH_MODES
def test_reg_K9_a_thousand_join_leave_cycles_never_stall_dispatch(classic: bool) -> None:
    """PR #10920: repeated open/close stopped dispatch to all. 1000 random joins and leaves."""
    rng = random.Random(10920)
    s = Scenario(classic=classic)
    s.join("c0", queue=10)
    names = [f"c{i}" for i in range(6)]
    for cycle in range(1000):
        connected = [c.name for c in s.world.connected()]
        name = rng.choice(names)
        if name in connected and len(connected) > 1:
            (s.crash if rng.random() < 0.5 else s.leave)(name)
        elif name not in connected:
            s.join(name, queue=rng.choice((1, 10)))
        s.publish(f"j{rng.randrange(15)}")
        for c in s.world.connected():
            if rng.random() < 0.5:
                s.ack(c.name)
        if cycle % 100 == 99:
            s.drain()
    s.drain()


@BOTH_MODES
def test_reg_K11_sticky_ranges_survive_both_consumers_restarting(classic: bool) -> None:
    """PR #14014 testStickyKeyRangesRestartConsumers: halves of the hash space; both close
    mid-stream; they come back; all 100 keys are delivered."""
    s = Scenario(classic=classic, selector="sticky")
    lower, upper = (1, 32767), (32768, 65535)
    s.join("c1", ranges=[lower])
    s.join("c2", ranges=[upper])
    s.publish_many(f"s{i}" for i in range(50))
    s.crash("c1")
    s.crash("c2")
    s.publish_many(f"s{i}" for i in range(50, 100))
    s.join("c1", ranges=[lower])
    s.join("c2", ranges=[upper])
    s.drain()
    for name, (start, end) in (("c1", lower), ("c2", upper)):
        assert all(start <= sticky_key_hash(k.encode()) <= end for k in s.keys_of(name))


def test_reg_K14_nack_keeps_single_ownership() -> None:
    """#9582: a nack may reorder, but never puts a key at two consumers. c1 holds m1, m2 of
    key k; c2 joins and takes k; c1 nacks m1: m1 waits until c1 acknowledges m2."""
    s = Scenario()
    key = key_moving(AUTO_SPLIT_CONSISTENT, ["c1"], ["c1", "c2"], "c1", "c2", "nk")
    s.join("c1", queue=10)
    m1, m2 = s.publish_many([key, key])
    s.receive("c1")
    s.join("c2", queue=10)
    s.nack("c1", [m1])
    assert s.delivered("c2") == []
    s.ack("c1", [m2])
    assert s.delivered("c2") == [m1]
    s.drain()


@BOTH_MODES
def test_reg_K16_blocked_hashes_are_not_read_again_and_again(classic: bool) -> None:
    """testNoRepeatedReadAndDiscard: with ack holes and churn, ledger reads stay within
    twice the messages."""
    rng = random.Random(16)
    s = Scenario(classic=classic)
    reads = _count_reads(s)
    for name in ("c1", "c2"):
        s.join(name, queue=20)
    published = 0
    holes: set = set()
    for step in range(30):
        s.publish_many(f"r{rng.randrange(10)}" for _ in range(10))
        published += 10
        for c in s.world.connected():
            received = s.receive(c.name)
            if received and rng.random() < 0.2:
                holes.add(received[0])
            s.ack(c.name, [d.pos for d in c.received if d.pos not in holes])
        if step in (10, 20):
            s.join(f"n{step}", queue=20)
    for c in s.world.connected():
        s.ack(c.name)
    s.drain()
    assert reads[0] <= 2 * published


@pytest.mark.parametrize("classic", [False, True], ids=["pip379", "classic"])
def test_reg_K17_ordering_after_rolling_reconnects(classic: bool) -> None:
    """testOrderingAfterReconnects: rolling restarts while producing; per key the broker never
    goes backwards across consumers for first deliveries, and every message arrives. 50 runs."""
    for run in range(50):
        rng = random.Random(run)
        s = Scenario(classic=classic)
        names = ["c1", "c2", "c3"]
        for name in names:
            s.join(name, queue=rng.choice((5, 20)))
        for i in range(40):
            s.publish_many(f"o{rng.randrange(12)}" for _ in range(5))
            if i % 8 == 3:
                s.reconnect(names[(i // 8) % 3])
            for c in s.world.connected():
                if rng.random() < 0.8:
                    s.ack(c.name)
        s.drain()


def test_making_progress_with_a_slower_consumer() -> None:
    """testMakingProgressWithSlowerConsumer: 10 consumers, one never acknowledges its
    "slowKey": every message it does not own still gets through."""
    names = [f"c{i}" for i in range(10)]
    s = Scenario()
    for name in names:
        s.join(name, queue=10)
    owner_of = owners(AUTO_SPLIT_CONSISTENT, names)
    slow_key = "slowKey"
    slow = owner_of(sticky_key_hash(slow_key.encode()))
    assert slow is not None
    rng = random.Random(5)
    others = [f"k{i}" for i in range(100)]
    s.publish_many(slow_key for _ in range(30))
    for _ in range(20):
        s.publish_many(rng.choice(others) for _ in range(50))
        for name in names:
            if name != slow:
                s.ack(name)
    for name in names:
        if name != slow:
            s.ack(name)
    unacked_keys = {s.checker.entries[p].key for p in s.checker.unacked()}
    assert unacked_keys <= {slow_key} | {k for k in others if owner_of(sticky_key_hash(k.encode())) == slow}
    s.ack(slow)
    s.drain()


def test_read_ahead_limit_bounds_the_replay_queue() -> None:
    """testReadAheadLimit: with two consumers paused, entries in replay stay within the limit."""
    s = Scenario(look_ahead_per_consumer=10, look_ahead_per_subscription=20)
    for name in ("c1", "c2", "c3"):
        s.join(name, queue=1000 if name == "c3" else 1)
    for _ in range(20):
        s.publish_many(f"l{i}" for i in range(10))
        s.ack("c3")
        assert len(s.dispatcher.replay) <= 20
    s.drain()


# -- modes, ranges, keys, acks ---------------------------------------------------------------
@BOTH_MODES
def test_hash_range_conflict_is_refused_and_a_freed_range_can_be_claimed(classic: bool) -> None:
    s = Scenario(classic=classic, selector="sticky")
    s.join("c1", ranges=[(1, 100)])
    with pytest.raises(ConsumerAssignError):
        s.world.topic.subscribe("sub", _bad_consumer(s, [(50, 150)]), s.world.now_ms)
    assert [c.consumer_name for c in s.world.sub.consumers] == ["c1"]  # type: ignore[union-attr]
    s.crash("c1")
    s.join("c2", ranges=[(50, 150)])


def _bad_consumer(s: Scenario, ranges: list[tuple[int, int]]):  # type: ignore[no-untyped-def]
    from magnetar.testing.sim.world import SimClient
    return s.world._new_consumer(SimClient("bad", 10, ranges), s.world._meta(ranges))


@pytest.mark.parametrize("ranges", [[(500, 100)], [(0, 70000)], []], ids=["start>end", "outside", "none"])
def test_invalid_sticky_ranges_are_refused(ranges: list[tuple[int, int]]) -> None:
    s = Scenario(selector="sticky")
    with pytest.raises(ConsumerAssignError):
        s.world.topic.subscribe("sub", _bad_consumer(s, ranges), s.world.now_ms)


@BOTH_MODES
def test_mode_and_out_of_order_flag_change_only_when_no_consumer_is_left(classic: bool) -> None:
    """testSelectorChangedAfterAllConsumerDisconnected / testAllowOutOfOrderDelivery…"""
    s = Scenario(classic=classic)
    s.join("c1")
    sticky = s.world._new_consumer(_client("s"), s.world._meta([(1, 10)]))
    with pytest.raises(ConsumerBusy, match="mode AUTO_SPLIT"):
        s.world.topic.subscribe("sub", sticky, s.world.now_ms)
    out_of_order = s.world._new_consumer(_client("o"), s.world._meta(None, out_of_order=True))
    with pytest.raises(ConsumerBusy, match="allowOutOfOrderDelivery=false"):
        s.world.topic.subscribe("sub", out_of_order, s.world.now_ms)
    s.crash("c1")
    s.world.topic.subscribe("sub", sticky, s.world.now_ms)
    assert s.dispatcher.subscription_stats()["keySharedMode"] == "STICKY"


def _client(name: str):  # type: ignore[no-untyped-def]
    from magnetar.testing.sim.world import SimClient
    return SimClient(name, 10, None)


def test_cumulative_ack_is_refused() -> None:
    s = Scenario()
    s.join("c1")
    pos = s.publish("k")
    with pytest.raises(NotAllowed):
        s.world.sub.acknowledge(s.core("c1"), True, [(pos, None)], s.world.now_ms)  # type: ignore[union-attr]


@pytest.mark.parametrize("selector", [AUTO_SPLIT_CONSISTENT, AUTO_SPLIT_RANGES])
def test_keyless_messages_spread_over_consumers(selector: str) -> None:
    """testNoKeySendAndReceive…: the fallback sticky key producerName-sequenceId spreads them."""
    s = Scenario(selector=selector)
    for name in ("c1", "c2", "c3"):
        s.join(name)
    s.publish_many("-" for _ in range(300))
    counts = [len(s.delivered(n)) for n in ("c1", "c2", "c3")]
    assert sum(counts) == 300 and min(counts) > 20


def test_ordering_key_takes_precedence_over_the_partition_key() -> None:
    s = Scenario()
    s.join("c1")
    s.join("c2")
    owner_of = owners(AUTO_SPLIT_CONSISTENT, ["c1", "c2"])
    key = find_key(lambda h: owner_of(h) == "c2", "ordering")
    s.publish_many(f"{key}@o" for _ in range(10))
    assert len(s.delivered("c2")) == 10


@pytest.mark.parametrize("selector", [AUTO_SPLIT_CONSISTENT, AUTO_SPLIT_RANGES])
def test_distribution_is_fair_and_keys_stay_put(selector: str) -> None:
    """receiveAndCheckDistribution: each key at one consumer, exact count, within ±40% of fair."""
    rng = random.Random(1)
    s = Scenario(selector=selector)
    for name in ("c1", "c2", "c3", "c4") if selector == AUTO_SPLIT_RANGES else ("c1", "c2", "c3"):
        s.join(name)
    names = [c.name for c in s.world.connected()]
    s.publish_many(f"d{rng.randrange(300)}" for _ in range(1000))
    seen: dict[str, str] = {}
    for name in names:
        for key in s.keys_of(name):
            assert seen.setdefault(key, name) == name
    counts = [len(s.delivered(n)) for n in names]
    assert sum(counts) == 1000
    assert all(abs(c - 1000 / len(names)) <= 0.4 * 1000 / len(names) for c in counts)


def test_batches_keep_key_affinity_and_count_their_messages() -> None:
    s = Scenario()
    s.join("c1", queue=10)
    s.join("c2", queue=10)
    s.publish_many([])
    for i in range(20):
        s.publish(f"b{i % 4}", count=5, persist=False)
    s.persist()
    for name in ("c1", "c2"):
        assert s.core(name).permits <= 0 or s.core(name).permits < 10
    s.drain()


def test_partially_acknowledged_batch_comes_back_with_its_remaining_messages() -> None:
    s = Scenario()
    s.join("c1", queue=10)
    batch = s.publish("pb", count=4)
    s.receive("c1")
    s.ack_part("c1", 0, 1)
    s.crash("c1")
    s.join("c2", queue=10)
    d = s.world.clients["c2"].inbox[0]
    assert d.pos == batch and d.messages == 3 and d.ack_set is not None
    s.drain()


# -- unblocking and timers --------------------------------------------------------------------
def test_unblocked_hashes_are_retried_together_after_the_interval() -> None:
    s = Scenario(unblocking_interval_ms=10)
    dispatcher = s.dispatcher
    assert dispatcher is None
    s.join("c1", queue=100)
    d = s.dispatcher
    assert isinstance(d, KeySharedDispatcher) and d.timer_driven
    keys = keys_owned(["c1", "c2"], "c2", 3, prefix="u")
    held = s.publish_many(keys)
    s.receive("c1")
    s.join("c2", queue=100)
    s.publish_many(keys)
    assert s.delivered("c2") == []
    s.ack("c1")
    assert s.delivered("c2") == []  # cleared, waiting for the batch
    deadline = d.next_deadline_ms()
    assert deadline == s.world.now_ms + 10
    s.tick(9)
    assert s.delivered("c2") == []
    s.tick(1)
    assert len(s.delivered("c2")) == 3
    assert d.next_deadline_ms() is None
    assert held


def test_an_acknowledgement_that_arms_the_unblocking_deadline_rings_the_alarm() -> None:
    s = Scenario(unblocking_interval_ms=10)
    s.join("c1", queue=100)
    d = s.dispatcher
    alarms: list[int] = []
    d.wake_up = alarms.append
    keys = keys_owned(["c1", "c2"], "c2", 2, prefix="a")
    s.publish_many(keys)
    s.receive("c1")
    s.join("c2", queue=100)
    s.publish_many(keys)
    assert alarms == []
    s.ack("c1")
    assert set(alarms) == {s.world.now_ms + 10}  # one ask per cleared hash, one deadline
    d.on_timer(alarms[0])
    assert len(s.delivered("c2")) == 2


def test_without_a_timer_unblocked_hashes_are_retried_at_once() -> None:
    s = Scenario(unblocking_interval_ms=10)
    s.join("c1", queue=100)
    s.dispatcher.timer_driven = False
    keys = keys_owned(["c1", "c2"], "c2", 2, prefix="w")
    s.publish_many(keys)
    s.receive("c1")
    s.join("c2", queue=100)
    s.publish_many(keys)
    s.ack("c1")
    assert len(s.delivered("c2")) == 2
    assert s.dispatcher.next_deadline_ms() is None


# -- stats ---------------------------------------------------------------------------------------
def test_consumer_and_subscription_stats_fields() -> None:
    s = Scenario()
    s.join("c1")
    stats = s.dispatcher.consumer_stats(s.core("c1"))
    assert stats["keyHashRangeArrays"] and stats["keyHashRanges"]
    for field in ("drainingHashesCount", "drainingHashesClearedTotal", "drainingHashesUnackedMessages",
                  "drainingHashes"):
        assert field in stats
    sub = s.dispatcher.subscription_stats()
    assert sub["keySharedMode"] == "AUTO_SPLIT" and sub["allowOutOfOrderDelivery"] is False
    assert "lastSentPositionWhenJoining" not in stats


def test_classic_stats_fields() -> None:
    s = Scenario(classic=True)
    s.join("c1", queue=2)
    a, b, c = s.publish_many(keys_owned(["c1"], "c1", 3, prefix="st"))
    s.join("c2")
    sub = s.dispatcher.subscription_stats()
    assert sub["lastSentPosition"] == str(b)
    assert sub["individuallySentPositions"] == "[]"
    joined = s.dispatcher.consumer_stats(s.core("c2"))["lastSentPositionWhenJoining"]
    assert joined == str(b)
    assert list(sub["consumersAfterMarkDeletePosition"].values()) == [str(b)]
    assert next(iter(sub["consumersAfterMarkDeletePosition"])).startswith("consumerName=c2, consumerId=")
    assert a < b < c


def test_reg_sim_classic_entry_sent_beyond_the_last_sent_position_still_holds_its_key() -> None:
    """Found by the simulator (seed 1287, classic): PIP-282 releases a recently joined
    consumer once the mark-delete position reaches its joining position, but an entry of
    one of its keys sent *beyond* that position (out of order) may still be pending at
    the old owner. The newcomer must wait for it too."""
    names = ["c1", "z"]
    k0 = key_moving(AUTO_SPLIT_CONSISTENT, names, [*names, "c2"], "c1", "c2", "k0")
    zk = key_moving(AUTO_SPLIT_CONSISTENT, names, [*names, "c2"], "z", "z", "zk")
    s = Scenario(classic=True)
    s.join("c1", queue=100)
    s.join("z", queue=1)
    za = s.publish(zk)
    e0 = s.publish(k0)
    e1 = s.publish(zk)  # z has no permit left: parked, not sent
    e2 = s.publish(k0)  # sent beyond the last sent position (e0)
    assert s.delivered("c1") == [e0, e2] and e1 in s.dispatcher.replay
    s.join("c2", queue=100)
    assert s.dispatcher.consumer_stats(s.core("c2"))["lastSentPositionWhenJoining"] == str(e0)
    s.ack("c1", [e0])
    s.ack("z", [za])
    e3 = s.publish(k0)
    assert e3 not in s.delivered("c2")  # e2, same key, is still pending at c1
    s.ack("c1", [e2])
    assert e3 in s.delivered("c2")
    s.drain()


@BOTH_MODES
def test_reg_K13_delayed_messages_do_not_stall_key_shared(classic: bool) -> None:
    """#8703 / PR #20233 testContinueDispatchMessagesWhenMessageDelayed: 40 delayed and 40
    normal messages; the normal ones flow at once, the delayed ones when due."""
    s = Scenario(classic=classic, delayed_probability=1.0, delayed_tick_ms=1)
    for name in ("c1", "c2"):
        s.join(name, queue=100)
    for i in range(40):
        s.publish(f"d{i % 8}", persist=False, delay_ms=10_000)
    s.publish_many(f"d{i % 8}" for i in range(40))
    delivered = s.delivered("c1") + s.delivered("c2")
    assert len(delivered) == 40 and all(not s.checker.entries[p].delayed for p in delivered)
    for name in ("c1", "c2"):
        s.ack(name)
    s.tick(10_000)
    assert len(s.delivered("c1") + s.delivered("c2")) == 40
    s.drain()


def test_reg_K5_message_ttl_releases_the_hashes_its_expired_messages_held() -> None:
    """PR #8292 testContinueDispatchMessagesWhenMessageTTL: c1 holds 51 unacked messages
    over 50 keys; c2 and c3 join and get none of those hashes. Message TTL then moves the
    mark-delete position past them: 1000 new messages reach all three consumers."""
    s = Scenario()
    s.join("c1", queue=100)
    keys = [f"t{i}" for i in range(50)]
    held = s.publish_many([*keys, keys[0]])
    s.receive("c1")
    s.join("c2", queue=1000)
    s.join("c3", queue=1000)
    draining = s.dispatcher.consumer_stats(s.core("c1"))["drainingHashesCount"]
    assert draining > 0
    blocked = s.publish_many(keys)
    assert not any(p in s.delivered(n) for n in ("c2", "c3") for p in blocked)
    s.expire(blocked[-1])  # every message so far is past its TTL
    rng = random.Random(8292)
    s.publish_many(f"t{rng.randrange(50)}" for _ in range(1000))
    assert all(len(s.delivered(n)) > 100 for n in ("c1", "c2", "c3"))
    assert s.dispatcher.consumer_stats(s.core("c1"))["drainingHashesCount"] == 0
    assert held
    s.drain()


@BOTH_MODES
def test_reg_K1_order_with_half_redelivered(classic: bool) -> None:
    """PR #4372, receiveAndCheck: 3 consumers, 10,000 messages; every other message is
    acknowledged and the rest come back (as after an ack timeout): exactly that half, again
    in per-key order, and nothing more."""
    rng = random.Random(4372)
    s = Scenario(classic=classic)
    names = ("c1", "c2", "c3")
    for name in names:
        s.join(name, queue=1000)
    for _ in range(10):
        s.publish_many(f"h{rng.randrange(100)}" for _ in range(1000))
        for name in names:
            received = s.receive(name)
            s.ack(name, received[::2])
    unacked = set(s.checker.unacked())
    assert 4900 <= len(unacked) <= 5100
    for name in names:
        s.nack_all(name)
    again: list = []
    for _ in range(20):
        for name in names:
            again += s.receive(name)
    assert sorted(again) == sorted(unacked)  # that half, each once
    s.drain()


def test_reg_K3_two_subscriptions_each_keep_per_key_order() -> None:
    """#7455: two Key_Shared subscriptions on one topic, each with its own churn, each see
    per-key order (checked by one contract checker per subscription)."""
    from magnetar.core.broker.broker_config import BrokerConfig
    from magnetar.core.names import TopicName
    from magnetar.core.subscriptions.consumer import Consumer
    from magnetar.core.topics.producer import Producer
    from magnetar.core.topics.topic import Topic
    from magnetar.storage.memory_ledger import MemoryLedger
    from magnetar.testing.sim.checkers import ContractChecker
    from magnetar.wire import pulsar_api_pb2 as pb
    from magnetar.wire.frames import make_entry

    ledger = MemoryLedger("k3")
    topic = Topic(TopicName.parse("persistent://public/default/k3"), ledger, BrokerConfig())
    class Receipts:
        def send_receipt(self, *args: object) -> None: ...
        def send_receipts(self, *args: object) -> None: ...

    producer = Producer(1, "p", Receipts())  # type: ignore[arg-type]
    topic.add_producer(producer)
    checkers = {"s1": ContractChecker(), "s2": ContractChecker()}
    keys: dict = {}

    class Sink:
        def __init__(self, sub: str, name: str) -> None:
            self.sub, self.name, self.inbox = sub, name, []

        def send_message(self, consumer_id, pos, partition, entry, redelivery_count, ack_set):  # type: ignore[no-untyped-def]
            checkers[self.sub].delivered(self.name, pos, 1)
            self.inbox.append(pos)

    consumers: dict = {}
    rng = random.Random(7455)

    def join(sub: str, name: str) -> None:
        checkers[sub].consumer_joined(name)
        c = Consumer(len(consumers) + 1, name, Sink(sub, name), sub_type="Key_Shared")
        consumers[(sub, name)] = c
        topic.subscribe(sub, c, 0, initial_earliest=True)
        checkers[sub].flow(name, 50)
        topic.subscriptions[sub].dispatcher.on_flow(c, 50, 0)

    for sub in ("s1", "s2"):
        for name in ("a", "b"):
            join(sub, name)
    for step in range(300):
        key = f"x{rng.randrange(20)}"
        pos = append_entry(topic, producer, step, step, 1, make_entry(pb.MessageMetadata(
            producer_name="p", sequence_id=step, publish_time=0, partition_key=key), b""), 0)
        keys[pos] = key
        for checker in checkers.values():
            checker.published(pos, key, 1)
        topic.on_persisted(ledger.sync(), 0)  # type: ignore[arg-type]
        for (sub, name), c in list(consumers.items()):
            inbox = c.sink.inbox
            if inbox and rng.random() < 0.5:
                done, c.sink.inbox = inbox[:], []
                for p in done:
                    checkers[sub].acked(name, p)
                topic.subscriptions[sub].acknowledge(c, False, [(p, None) for p in done], 0)
                checkers[sub].flow(name, len(done))
                topic.subscriptions[sub].dispatcher.on_flow(c, len(done), 0)
        if step % 50 == 25:
            sub = rng.choice(("s1", "s2"))
            victim = consumers.pop((sub, "a"))
            checkers[sub].consumer_left("a")
            topic.remove_consumer(topic.subscriptions[sub], victim, 0)
            join(sub, "a")
    assert all(checker.deliveries >= 300 for checker in checkers.values())


@pytest.mark.parametrize("out_of_order", [False, True], ids=["ordered", "out-of-order"])
def test_recently_joined_position_does_not_stall_other_consumers(out_of_order: bool) -> None:
    """testRecentJoinedPosWillNotStuckOtherConsumer: a stuck consumer, one that closes and
    a new one together; the consumer that always acknowledges keeps reading to the end,
    replay reads stay under twice the messages, and all 200 get delivered."""
    s = Scenario(allow_out_of_order=out_of_order)
    reads = _count_reads(s)
    s.join("stuck", queue=10)
    s.join("closing", queue=10)
    s.join("good", queue=1000)
    rng = random.Random(21)
    for i in range(200):
        s.publish(f"r{rng.randrange(40)}")
        s.ack("good")
        if i == 50:
            s.crash("closing")
        if i == 60:
            s.join("new", queue=100)
        if i > 60:
            s.ack("new")
    assert s.dispatcher.last_read == max(s.published)  # the reads went on to the end
    s.drain()
    assert reads[0] < 2 * 200 + 200  # each entry read once, plus at most one replay read each


def test_read_ahead_with_a_configured_look_ahead_limit() -> None:
    """testReadAheadWithConfiguredLookAheadLimit: with hashes blocked, reading stops once the
    look-ahead limit of waiting entries is reached."""
    s = Scenario(look_ahead_per_consumer=25, look_ahead_per_subscription=50)
    s.join("c1", queue=1000)
    keys = keys_owned(["c1", "c2"], "c2", 5, prefix="la")
    s.publish_many(keys)
    s.receive("c1")
    s.join("c2", queue=1000)
    s.publish_many(keys * 40)  # all blocked: draining at c1
    assert len(s.dispatcher.replay) == 50
    assert s.dispatcher.last_read < max(s.published)
    s.ack("c1")
    s.drain()


@BOTH_MODES
def test_reg_sim_redelivery_request_lifts_the_unacked_block(classic: bool) -> None:
    """Found by the simulator (its first find): a consumer blocked at
    maxUnackedMessagesPerConsumer that asks for redelivery of everything has nothing
    unacknowledged any more, yet stayed blocked for good."""
    s = Scenario(classic=classic, max_unacked_per_consumer=2)
    s.join("c1", queue=10)
    s.publish_many(["u1", "u2", "u3"])
    assert len(s.delivered("c1")) == 2 and s.core("c1").blocked_on_unacked
    first = s.receive("c1")
    s.nack_all("c1")
    again = s.world.clients["c1"].inbox
    assert [d.pos for d in again] == first and all(d.redelivery_count == 1 for d in again)
    s.drain()


def test_reg_sim_an_ack_list_is_applied_whole_before_anything_is_sent() -> None:
    """Found by the simulator: acknowledging [a, b] where ``a`` was pending at another
    consumer dispatched between the two, and ``b`` (about to be acknowledged) went out again."""
    s = Scenario()
    key = key_moving(AUTO_SPLIT_CONSISTENT, ["c1"], ["c1", "c2"], "c1", "c2", "al")
    s.join("c1", queue=10)
    a, b = s.publish_many([key, key])
    s.receive("c1")
    s.reconnect("c1")  # the application keeps a and b; the broker hands them out again
    assert s.delivered("c1")[-2:] == [a, b]
    s.ack("c1", [a, b])
    assert s.checker.unacked() == []
    s.drain()


def test_reg_sim_a_retry_served_by_a_round_leaves_the_next_clear_its_own_ring() -> None:
    """Found by the simulation once it drove the broker's one timer (seed 1400), and the
    cause of the troubleshooting e2e test's stall: a hash clears (ring armed at +10), a
    dispatch round serves that retry early, a second hash clears (retry due later, but
    the ring at +10 is still the one armed); the ring finds nothing due yet. Unless the
    dispatcher asks again, the second hash's entries wait for an unrelated event."""
    s = Scenario(unblocking_interval_ms=10)
    s.join("c1", queue=100)
    d = s.dispatcher
    timers = s.world.core.timers
    first, second = keys_owned(["c1", "c2"], "c2", 2, prefix="r")
    held = s.publish_many([first, second])
    s.receive("c1")
    s.join("c2", queue=100)
    s.publish_many([first, second])
    assert s.delivered("c2") == []
    s.ack("c1", [held[0]])
    ring = timers.queue.deadline_of(d)
    assert ring == s.world.now_ms + 10
    s.tick(5)
    s.publish(keys_owned(["c1", "c2"], "c2", 3, prefix="r")[2])  # a round retries the first hash
    got = len(s.delivered("c2"))
    s.tick(1)
    s.ack("c1", [held[1]])  # the second hash clears: its retry is due at +10 from now
    s.tick(ring - s.world.now_ms)  # the old ring: nothing due yet
    assert timers.queue.deadline_of(d) is not None, "the dispatcher must ask for its retry again"
    s.tick(10)
    assert len(s.delivered("c2")) > got
    s.drain()

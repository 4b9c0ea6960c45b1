"""The shared delayed index (delayedDeliverySharedIndexEnabled): one index, fanned out per subscription."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import example, given, settings
from hypothesis import strategies as st

from magnetar.core.delayed.bucket_delayed_delivery_tracker import BucketDelayedDeliveryTracker
from magnetar.core.delayed.bucket_snapshot_storage import MemoryBucketSnapshotStorage
from magnetar.core.delayed.in_memory_tracker import InMemoryDelayedDeliveryTracker
from magnetar.core.delayed.shared_index import SharedDelayedDeliveryIndex, SubscriptionDelayedDeliveryView
from magnetar.core.delayed.tracker import DelayedDeliveryTracker
from magnetar.core.positions import BEFORE_START, Position


@dataclass
class Sub:
    """A subscription's cursor positions as the dispatcher would move them."""

    name: str
    mark_delete: Position = BEFORE_START
    read: Position = Position(0, 0)
    delivered: list[Position] = field(default_factory=list)
    view: SubscriptionDelayedDeliveryView | None = None

    def attach(self, index: SharedDelayedDeliveryIndex) -> SubscriptionDelayedDeliveryView:
        self.view = index.register(self.name, lambda: self.mark_delete, lambda: self.read)
        return self.view

    def read_entry(self, position: Position, deliver_at_ms: int, now_ms: int) -> None:
        assert self.view is not None
        if not self.view.add_message(position.ledger_id, position.entry_id, deliver_at_ms, now_ms):
            self.delivered.append(position)
        self.read = Position(position.ledger_id, position.entry_id + 1)

    def take(self, now_ms: int, max_messages: int = 100) -> list[Position]:
        assert self.view is not None
        got = self.view.get_scheduled_messages(max_messages, now_ms)
        self.delivered.extend(got)
        return got


def bucket_index() -> SharedDelayedDeliveryIndex:
    tracker = BucketDelayedDeliveryTracker(
        MemoryBucketSnapshotStorage(),
        tick_time_ms=1,
        is_delayed_delivery_deliver_at_time_strict=True,
        min_index_count_per_bucket=2,
        max_indexes_per_bucket_snapshot_segment=2,
    )
    return SharedDelayedDeliveryIndex(tracker)


def test_view_satisfies_the_tracker_interface() -> None:
    view: DelayedDeliveryTracker = bucket_index().register("a", lambda: BEFORE_START, lambda: BEFORE_START)
    assert isinstance(view, DelayedDeliveryTracker)


def test_each_message_is_indexed_once_and_fanned_out_to_all() -> None:
    index = bucket_index()
    a, b = Sub("a"), Sub("b")
    a.attach(index)
    b.attach(index)
    for entry in range(3):
        a.read_entry(Position(1, entry), 100 + entry, 0)
        b.read_entry(Position(1, entry), 100 + entry, 0)
    assert index.tracker.number_of_delayed_messages == 3
    assert a.delivered == b.delivered == []
    assert a.take(101) == [Position(1, 0), Position(1, 1)]
    # b's share was fanned out when a polled; b takes it now, nothing is lost or doubled.
    assert b.take(101) == [Position(1, 0), Position(1, 1)]
    assert b.take(200) == [Position(1, 2)]
    assert a.take(200) == [Position(1, 2)]
    assert index.tracker.number_of_delayed_messages == 0


def test_mark_delete_filters_the_fan_out() -> None:
    index = bucket_index()
    a, b = Sub("a"), Sub("b")
    a.attach(index)
    b.attach(index)
    for entry in range(3):
        a.read_entry(Position(1, entry), 100, 0)
        b.read_entry(Position(1, entry), 100, 0)
    b.mark_delete = Position(1, 1)  # b acknowledged 1:0 and 1:1 already (e.g. acked by id)
    assert a.take(100) == [Position(1, e) for e in range(3)]
    assert b.take(100) == [Position(1, 2)]


def test_a_subscription_behind_reads_the_due_message_itself() -> None:
    index = bucket_index()
    a, b = Sub("a"), Sub("b")
    a.attach(index)
    b.attach(index)
    a.read_entry(Position(1, 0), 100, 0)
    assert a.take(100) == [Position(1, 0)]
    # b had not read that far when the message came due: it is not in b's queue...
    assert b.view is not None and b.view.pending == 0
    # ...and when b reads it, it is due and no longer indexed: delivered directly, once.
    b.read_entry(Position(1, 0), 100, 150)
    assert b.delivered == [Position(1, 0)]
    assert b.take(200) == []


def test_a_due_message_still_indexed_is_held_for_the_fan_out() -> None:
    index = bucket_index()
    a, b = Sub("a"), Sub("b")
    a.attach(index)
    b.attach(index)
    a.read_entry(Position(1, 0), 100, 0)
    # b reads it after its time but before anyone polled: holding it keeps it for a too.
    b.read_entry(Position(1, 0), 100, 150)
    assert b.delivered == []
    assert a.take(150) == [Position(1, 0)]
    assert b.take(150) == [Position(1, 0)]


def test_a_rewind_drops_queued_positions_the_subscription_will_read_again() -> None:
    index = bucket_index()
    a = Sub("a")
    a.attach(index)
    b = Sub("b")
    b.attach(index)
    a.read_entry(Position(1, 0), 100, 0)
    b.read_entry(Position(1, 0), 100, 0)
    index.poll(10, 100)
    assert a.view is not None and a.view.pending == 1
    a.read = Position(1, 0)  # all consumers left; the cursor rewound to the mark-delete
    assert a.take(100) == []
    a.read_entry(Position(1, 0), 100, 100)
    assert a.delivered == [Position(1, 0)]


def test_a_queued_position_read_again_is_delivered_from_the_read() -> None:
    index = bucket_index()
    a, b = Sub("a"), Sub("b")
    a.attach(index)
    b.attach(index)
    a.read_entry(Position(1, 0), 100, 0)
    a.read_entry(Position(1, 1), 500, 0)
    index.poll(10, 100)
    # a rewinds and reads past 1:0 again before taking from its queue.
    a.read = Position(1, 0)
    a.read_entry(Position(1, 0), 100, 100)
    a.read_entry(Position(1, 1), 500, 100)
    assert a.delivered == [Position(1, 0)]
    assert a.take(100) == []
    assert a.take(500) == [Position(1, 1)]


def test_the_index_forgets_what_every_subscription_acknowledged() -> None:
    index = bucket_index()
    a, b = Sub("a"), Sub("b")
    a.attach(index)
    b.attach(index)
    for entry in range(4):
        a.read_entry(Position(1, entry), 100, 0)
    a.mark_delete = Position(1, 3)
    b.mark_delete = Position(1, 1)
    assert index.index_mark_delete_position() == Position(1, 1)
    assert a.view is not None
    a.view.on_mark_delete(a.mark_delete)
    assert index.tracker.number_of_delayed_messages == 2
    assert b.view is not None
    b.view.close()
    assert index.subscriptions == ["a"]
    assert index.tracker.number_of_delayed_messages == 0


#: Operation weights out of 100.
_OPCODES = ["publish"] * 25 + ["read"] * 25 + ["tick"] * 15 + ["take"] * 20 + ["rewind"] * 8 + ["roll"] * 7

operations = st.lists(
    st.builds(lambda code, a, b: (_OPCODES[code], a, b), st.integers(0, 99), st.integers(0, 4), st.integers(-20, 400)),
    min_size=5,
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(ops=operations, bucketed=st.booleans())
# b holds 1:0, a's poll fans it out to b, b rewinds and reads it again before taking.
@example(ops=[("publish", 0, 1), ("read", 1, 0), ("tick", 0, 0), ("take", 0, 0), ("rewind", 1, 0)], bucketed=False)
def test_every_subscription_gets_every_message_once(ops: list[tuple[str, int, int]], bucketed: bool) -> None:
    tracker: DelayedDeliveryTracker
    if bucketed:
        tracker = bucket_index().tracker
    else:
        tracker = InMemoryDelayedDeliveryTracker(tick_time_ms=1, is_delayed_delivery_deliver_at_time_strict=True)
    index = SharedDelayedDeliveryIndex(tracker)
    subs = [Sub(name) for name in "abc"]
    for sub in subs:
        sub.attach(index)
    log: list[tuple[Position, int]] = []
    ledger, entry, now = 1, 0, 0

    def acked(sub: Sub) -> None:
        # The subscription acknowledges what it delivered; mark-delete follows the acked prefix.
        done = set(sub.delivered)
        for position, _ in log:
            if position not in done:
                break
            sub.mark_delete = position
        assert sub.view is not None
        sub.view.on_mark_delete(sub.mark_delete)

    def read(sub: Sub, count: int) -> None:
        for position, at in log:
            if count == 0:
                return
            if position >= sub.read:
                sub.read_entry(position, at, now)
                count -= 1

    for op, a, b in ops:
        sub = subs[a % len(subs)]
        if op == "publish":
            for _ in range(1 + a):
                log.append((Position(ledger, entry), now + b))
                entry += 1
        elif op == "roll":
            ledger, entry = ledger + 1, 0
        elif op == "read":
            read(sub, 1 + b % 5)
        elif op == "tick":
            now += 1 + b % 150
        elif op == "take":
            sub.take(now, 1 + b % 5)
            acked(sub)
        elif op == "rewind":
            # Unacknowledged deliveries come back after a rewind: forget them.
            sub.delivered = [p for p in sub.delivered if p <= sub.mark_delete]
            sub.read = Position(sub.mark_delete.ledger_id, sub.mark_delete.entry_id + 1)
        for sub in subs:
            assert len(sub.delivered) == len(set(sub.delivered)), f"{sub.name} got a duplicate"
            times = dict(log)
            assert all(times[p] <= now for p in sub.delivered), "delivered before its time"

    # Liveness: everyone reads everything, time passes, everyone takes everything.
    now += 1_000
    for sub in subs:
        read(sub, len(log))
    for sub in subs:
        while sub.take(now):
            pass
        assert sorted(sub.delivered) == [p for p, _ in log], f"{sub.name} missed messages"

"""Key_Shared with the official client: the three modes, out-of-order delivery, sticky-range
errors, mode mixing, key-based batching, the classic mode, and a churn test that checks
order and single ownership from what the clients received."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator

import httpx
import pulsar
import pytest
from e2e_helpers import EARLIEST, drain, new_topic, nothing_arrives, quiet_logger, wait_until

from magnetar.core.key_shared.sticky_key import sticky_key_hash
from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.sim.options import AUTO_SPLIT_CONSISTENT
from magnetar.testing.sim.scenario import owners

KEY_SHARED = pulsar.ConsumerType.KeyShared


def _broker(tmp_path_factory: pytest.TempPathFactory, name: str, config: dict[str, str]) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp(name) / "data", config).start()
    yield proc
    proc.kill()


@pytest.fixture(scope="module")
def auto_split_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from _broker(tmp_path_factory, "autosplit", {"subscriptionKeySharedUseConsistentHashing": "false"})


@pytest.fixture(scope="module")
def classic_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from _broker(tmp_path_factory, "classic",
                       {"subscriptionKeySharedUseClassicPersistentImplementation": "true"})


def _client(broker: BrokerProcess) -> pulsar.Client:
    return pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())


def _subscribe(client: pulsar.Client, topic: str, name: str, policy: pulsar.ConsumerKeySharedPolicy | None = None,
               queue: int = 1000, sub: str = "ks") -> pulsar.Consumer:
    return client.subscribe(topic, sub, consumer_type=KEY_SHARED, consumer_name=name, initial_position=EARLIEST,
                            receiver_queue_size=queue, key_shared_policy=policy)


def _send_keyed(producer: pulsar.Producer, keys: list[str],
                sent: dict[str, list[int]] | None = None) -> dict[str, list[int]]:
    """Send one message per key in ``keys`` (payload ``key:seq``); the sequence numbers per key,
    continuing ``sent`` when given."""
    sent = {} if sent is None else sent
    for key in keys:
        seq = len(sent.setdefault(key, []))
        sent[key].append(seq)
        producer.send_async(f"{key}:{seq}".encode(), None, partition_key=key)
    producer.flush()
    return sent


def _parse(msg: pulsar.Message) -> tuple[str, int]:
    key, _, seq = msg.data().decode().partition(":")
    return key, int(seq)


def _received(consumers: dict[str, pulsar.Consumer], ack: bool = True) -> dict[str, list[tuple[str, int]]]:
    got: dict[str, list[tuple[str, int]]] = {}
    for name, consumer in consumers.items():
        for msg in drain(consumer, quiet_ms=500):
            got.setdefault(name, []).append(_parse(msg))
            if ack:
                consumer.acknowledge(msg)
    return got


def _check_affinity_and_order(got: dict[str, list[tuple[str, int]]], sent: dict[str, list[int]]) -> None:
    owner: dict[str, str] = {}
    per_key: dict[str, list[int]] = {}
    for name, messages in got.items():
        for key, seq in messages:
            assert owner.setdefault(key, name) == name, f"key {key} at {owner[key]} and {name}"
            per_key.setdefault(key, []).append(seq)
    assert per_key == sent


def _stats(broker: BrokerProcess, topic: str) -> dict:  # type: ignore[type-arg]
    path = topic.replace("persistent://", "persistent/")
    response = httpx.get(f"{broker.web_url}/admin/v2/{path}/stats", timeout=10)
    response.raise_for_status()
    return response.json()  # type: ignore[no-any-return]


# -- the three modes ----------------------------------------------------------------------------
def test_consistent_hashing_keeps_each_key_at_one_consumer_in_order(broker: BrokerProcess) -> None:
    client = _client(broker)
    try:
        topic = new_topic("ks-ch")
        consumers = {n: _subscribe(client, topic, n) for n in ("c1", "c2", "c3")}
        rng = random.Random(1)
        sent = _send_keyed(client.create_producer(topic, batching_enabled=False),
                           [f"key-{rng.randrange(300)}" for _ in range(1000)])
        got = _received(consumers)
        _check_affinity_and_order(got, sent)
        fair = 1000 / 3
        assert all(abs(len(m) - fair) <= 0.4 * fair for m in got.values())
    finally:
        client.close()


def test_auto_split_hash_ranges_route_by_the_reported_ranges(auto_split_broker: BrokerProcess) -> None:
    client = _client(auto_split_broker)
    try:
        topic = new_topic("ks-as")
        consumers = {n: _subscribe(client, topic, n) for n in ("c1", "c2", "c3")}
        sent = _send_keyed(client.create_producer(topic, batching_enabled=False), [f"a{i % 90}" for i in range(450)])
        got = _received(consumers)
        _check_affinity_and_order(got, sent)
        stats = _stats(auto_split_broker, topic)["subscriptions"]["ks"]["consumers"]
        ranges = {c["consumerName"]: c["keyHashRangeArrays"] for c in stats}
        assert sorted(len(r) for r in ranges.values()) == [1, 1, 1]  # one region each, halved
        sizes = sorted(r[0][1] - r[0][0] + 1 for r in ranges.values())
        assert sum(sizes) == 65536 and abs(sizes[2] - 2 * sizes[0]) <= 2  # the first half, split again
        for name, messages in got.items():
            (start, end), = ranges[name]
            assert all(start <= sticky_key_hash(key.encode()) <= end for key, _ in messages)
    finally:
        client.close()


def test_sticky_ranges_deliver_exactly_the_declared_hashes(broker: BrokerProcess) -> None:
    client = _client(broker)
    try:
        topic = new_topic("ks-sticky")
        halves = {"low": [(0, 32767)], "high": [(32768, 65535)]}
        consumers = {n: _subscribe(client, topic, n, pulsar.ConsumerKeySharedPolicy(
            pulsar.KeySharedMode.Sticky, sticky_ranges=r)) for n, r in halves.items()}
        sent = _send_keyed(client.create_producer(topic, batching_enabled=False), [f"s{i % 100}" for i in range(300)])
        got = _received(consumers)
        _check_affinity_and_order(got, sent)
        for name, messages in got.items():
            (start, end), = halves[name]
            assert all(start <= sticky_key_hash(k.encode()) <= end for k, _ in messages)
        stats = _stats(broker, topic)["subscriptions"]["ks"]
        assert stats["keySharedMode"] == "STICKY"
    finally:
        client.close()


def test_sticky_range_errors(broker: BrokerProcess) -> None:
    client = _client(broker)
    try:
        topic = new_topic("ks-sticky-bad")
        sticky = pulsar.KeySharedMode.Sticky
        _subscribe(client, topic, "c1", pulsar.ConsumerKeySharedPolicy(sticky, sticky_ranges=[(0, 1000)]))
        with pytest.raises(pulsar.ConsumerAssignError):
            _subscribe(client, topic, "c2", pulsar.ConsumerKeySharedPolicy(sticky, sticky_ranges=[(500, 2000)]))
        with pytest.raises(pulsar.PulsarException):
            _subscribe(client, topic, "c3", pulsar.ConsumerKeySharedPolicy(sticky, sticky_ranges=[(5000, 4000)]))
        ok = _subscribe(client, topic, "c4", pulsar.ConsumerKeySharedPolicy(sticky, sticky_ranges=[(1001, 2000)]))
        ok.close()
    finally:
        client.close()


def test_mixing_modes_or_out_of_order_flags_is_refused(broker: BrokerProcess) -> None:
    client = _client(broker)
    try:
        topic = new_topic("ks-mix")
        first = _subscribe(client, topic, "auto")
        with pytest.raises(pulsar.ConsumerBusy):
            _subscribe(client, topic, "sticky", pulsar.ConsumerKeySharedPolicy(
                pulsar.KeySharedMode.Sticky, sticky_ranges=[(0, 100)]))
        with pytest.raises(pulsar.ConsumerBusy):
            _subscribe(client, topic, "ooo", pulsar.ConsumerKeySharedPolicy(allow_out_of_order_delivery=True))
        first.close()
        # with nobody left the subscription takes the next consumer's mode
        _subscribe(client, topic, "sticky", pulsar.ConsumerKeySharedPolicy(
            pulsar.KeySharedMode.Sticky, sticky_ranges=[(0, 65535)])).close()
    finally:
        client.close()


# -- order through joins ---------------------------------------------------------------------------
def _moving_key() -> str:
    before, after = owners(AUTO_SPLIT_CONSISTENT, ["c1"]), owners(AUTO_SPLIT_CONSISTENT, ["c1", "c2"])
    return next(k for k in (f"mv{i}" for i in range(10_000))
                if before(sticky_key_hash(k.encode())) == "c1" and after(sticky_key_hash(k.encode())) == "c2")


def test_a_moved_key_waits_for_its_old_owner_then_arrives_in_order(broker: BrokerProcess) -> None:
    client = _client(broker)
    try:
        topic = new_topic("ks-join")
        key = _moving_key()
        producer = client.create_producer(topic, batching_enabled=False)
        c1 = _subscribe(client, topic, "c1")
        _send_keyed(producer, [key] * 5)
        held = [c1.receive(timeout_millis=5000) for _ in range(5)]
        assert [_parse(m)[1] for m in held] == [0, 1, 2, 3, 4]
        c2 = _subscribe(client, topic, "c2")
        producer.send(f"{key}:5".encode(), partition_key=key)
        assert nothing_arrives(c2, 500)
        stats = _stats(broker, topic)["subscriptions"]["ks"]
        c1_stats = next(c for c in stats["consumers"] if c["consumerName"] == "c1")
        assert c1_stats["drainingHashesCount"] == 1 and c1_stats["drainingHashesUnackedMessages"] == 5
        assert c1_stats["drainingHashes"][0]["hash"] == sticky_key_hash(key.encode())
        for msg in held:
            c1.acknowledge(msg)
        msg = c2.receive(timeout_millis=5000)
        assert _parse(msg) == (key, 5)
    finally:
        client.close()


def test_allow_out_of_order_delivery_keeps_affinity_without_blocking(broker: BrokerProcess) -> None:
    client = _client(broker)
    try:
        topic = new_topic("ks-ooo")
        key = _moving_key()
        policy = pulsar.ConsumerKeySharedPolicy(allow_out_of_order_delivery=True)
        producer = client.create_producer(topic, batching_enabled=False)
        c1 = _subscribe(client, topic, "c1", policy)
        _send_keyed(producer, [key] * 3)
        held = [c1.receive(timeout_millis=5000) for _ in range(3)]
        c2 = _subscribe(client, topic, "c2", policy)
        producer.send(f"{key}:3".encode(), partition_key=key)
        assert _parse(c2.receive(timeout_millis=5000)) == (key, 3)  # no waiting for c1's three
        assert _stats(broker, topic)["subscriptions"]["ks"]["allowOutOfOrderDelivery"] is True
        for msg in held:
            c1.acknowledge(msg)
    finally:
        client.close()


def test_key_based_batching_keeps_keys_together(broker: BrokerProcess) -> None:
    client = _client(broker)
    try:
        topic = new_topic("ks-batch")
        consumers = {n: _subscribe(client, topic, n) for n in ("c1", "c2", "c3")}
        producer = client.create_producer(topic, batching_type=pulsar.BatchingType.KeyBased,
                                          batching_max_messages=20, batching_max_publish_delay_ms=50)
        rng = random.Random(2)
        sent = _send_keyed(producer, [f"b{rng.randrange(40)}" for _ in range(800)])
        got = _received(consumers)
        _check_affinity_and_order(got, sent)
        assert len(got) == 3
    finally:
        client.close()


def test_classic_mode_holds_a_new_consumer_until_earlier_messages_are_acked(classic_broker: BrokerProcess) -> None:
    """testOrderingWhenAddingConsumers on the classic implementation, with its stats."""
    client = _client(classic_broker)
    try:
        topic = new_topic("ks-classic")
        before, after = owners(AUTO_SPLIT_CONSISTENT, ["c1"]), owners(AUTO_SPLIT_CONSISTENT, ["c1", "c2"])
        keys = [k for k in (f"cl{i}" for i in range(2000))
                if before(sticky_key_hash(k.encode())) == "c1" and after(sticky_key_hash(k.encode())) == "c2"][:10]
        producer = client.create_producer(topic, batching_enabled=False)
        c1 = _subscribe(client, topic, "c1")
        sent = _send_keyed(producer, keys)
        held = [c1.receive(timeout_millis=5000) for _ in range(10)]
        c2 = _subscribe(client, topic, "c2")
        _send_keyed(producer, keys, sent)
        assert nothing_arrives(c2, 500)
        stats = _stats(classic_broker, topic)["subscriptions"]["ks"]
        joined = next(c for c in stats["consumers"] if c["consumerName"] == "c2")["lastSentPositionWhenJoining"]
        assert joined and list(stats["consumersAfterMarkDeletePosition"].values()) == [joined]
        assert "individuallySentPositions" in stats
        c1.close()
        got = [_parse(c2.receive(timeout_millis=5000)) for _ in range(20)]
        assert [s for _, s in got] == [0] * 10 + [1] * 10
        assert [k for k, _ in got] == keys + keys
        assert len(held) == 10  # c1 closed holding them: they came back to c2 first
    finally:
        client.close()


# -- churn ------------------------------------------------------------------------------------------
class ChurnLog:
    """What the applications saw, in one total order (a single thread receives and acks)."""

    def __init__(self) -> None:
        #: key -> consumer -> seqs received there and not yet acknowledged
        self.open: dict[str, dict[str, set[int]]] = {}
        self.acked: dict[str, set[int]] = {}
        self.received: dict[str, set[int]] = {}
        self.violations: list[str] = []
        self.redelivered = 0

    def receive(self, consumer: str, key: str, seq: int) -> None:
        holders = {c: s for c, s in self.open.get(key, {}).items() if s and c != consumer}
        if holders:
            self.violations.append(f"{key}:{seq} at {consumer} while {holders} unacked elsewhere")
        mine = self.open.setdefault(key, {}).setdefault(consumer, set())
        earlier_missing = [s for s in range(seq) if s not in self.acked.get(key, set()) and s not in mine]
        if earlier_missing:
            self.violations.append(f"{key}:{seq} at {consumer} before {earlier_missing[:5]}")
        mine.add(seq)
        self.redelivered += seq in self.received.setdefault(key, set())
        self.received[key].add(seq)

    def ack(self, consumer: str, key: str, seq: int) -> None:
        self.open[key][consumer].discard(seq)
        self.acked.setdefault(key, set()).add(seq)

    def closed(self, consumer: str) -> None:
        for holders in self.open.values():
            holders.pop(consumer, None)


def test_churn_keeps_order_and_single_ownership(broker: BrokerProcess) -> None:
    """Consumers join and leave every half second while keyed messages flow; each application
    holds a few messages before acknowledging. From what they received: no key unacked at two
    consumers at once, per key nothing before an earlier message, and every message arrives."""
    client = _client(broker)
    rng = random.Random(3)
    topic = new_topic("ks-churn")
    log = ChurnLog()
    total, keys = 3000, [f"ck{i}" for i in range(60)]
    consumers: dict[str, pulsar.Consumer] = {}
    holding: dict[str, list[pulsar.Message]] = {}
    try:
        names = iter(f"c{i}" for i in range(1000))

        def join() -> None:
            name = next(names)
            consumers[name] = _subscribe(client, topic, name, queue=rng.choice((5, 20, 100)))
            holding[name] = []

        def leave(name: str) -> None:
            consumer = consumers.pop(name)
            holding.pop(name)
            consumer.close()
            log.closed(name)

        join()
        changes = 0
        sent: dict[str, int] = {}

        def produce() -> None:
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(total):
                key = keys[rng.randrange(len(keys))] if i % 2 else keys[i % 7]
                seq = sent.get(key, 0)
                sent[key] = seq + 1
                producer.send_async(f"{key}:{seq}".encode(), None, partition_key=key)
                if i % 100 == 99:
                    time.sleep(0.25)
            producer.flush()

        producer_thread = threading.Thread(target=produce)
        producer_thread.start()
        next_change = time.monotonic() + 0.5
        deadline = time.monotonic() + 60
        local = random.Random(4)
        while time.monotonic() < deadline:
            if time.monotonic() >= next_change and producer_thread.is_alive():
                next_change += 0.5
                changes += 1
                if len(consumers) < 2 or (len(consumers) < 4 and local.random() < 0.5):
                    join()
                else:
                    leave(local.choice(sorted(consumers)))
            for name, consumer in list(consumers.items()):
                try:
                    msg = consumer.receive(timeout_millis=2)
                except pulsar.Timeout:
                    msg = None
                if msg is not None:
                    log.receive(name, *_parse(msg))
                    holding[name].append(msg)
                if holding[name] and (len(holding[name]) > 3 or not producer_thread.is_alive()):
                    done = holding[name].pop(0)
                    consumer.acknowledge(done)
                    log.ack(name, *_parse(done))
            if not producer_thread.is_alive() and sum(len(s) for s in log.acked.values()) == total:
                break
        producer_thread.join()
        assert not log.violations, log.violations[:10]
        assert changes >= 8 and log.redelivered > 0, (changes, log.redelivered)
        assert {k: len(v) for k, v in log.received.items()} == sent
        assert sum(len(s) for s in log.acked.values()) == total
        wait_until(lambda: _stats(broker, topic)["subscriptions"]["ks"]["msgBacklog"] == 0, what="backlog 0")
    finally:
        client.close()


def test_sticky_consumers_restarting_lose_nothing(broker: BrokerProcess) -> None:
    """testStickyKeyRangesRestartConsumers (#14014) with the real client."""
    client = _client(broker)
    try:
        topic = new_topic("ks-sticky-restart")
        halves = {"low": [(0, 32767)], "high": [(32768, 65535)]}

        def connect(name: str) -> pulsar.Consumer:
            return _subscribe(client, topic, name, pulsar.ConsumerKeySharedPolicy(
                pulsar.KeySharedMode.Sticky, sticky_ranges=halves[name]), queue=10)
        consumers = {n: connect(n) for n in halves}
        producer = client.create_producer(topic, batching_enabled=False)
        _send_keyed(producer, [f"r{i}" for i in range(50)])
        for c in consumers.values():
            c.close()
        _send_keyed(producer, [f"r{i}" for i in range(50, 100)])
        consumers = {n: connect(n) for n in halves}
        got = _received(consumers)
        assert sorted(k for m in got.values() for k, _ in m) == sorted(f"r{i}" for i in range(100))
    finally:
        client.close()


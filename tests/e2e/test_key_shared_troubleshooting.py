"""Finding what blocks a key, with the official client: the pending-messages and sticky-hash
endpoints, the draining-hash metrics, and the batched unblocking timer of a real broker."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import httpx
import pulsar
import pytest
from e2e_helpers import EARLIEST, new_topic, nothing_arrives, quiet_logger, wait_until

from magnetar.core.key_shared.sticky_key import sticky_key_hash
from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.sim.options import AUTO_SPLIT_CONSISTENT
from magnetar.testing.sim.scenario import owners

UNBLOCKING_INTERVAL_MS = 300


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("ks-trouble") / "data", {
        "exposeConsumerLevelMetricsInPrometheus": "true",
        "keySharedUnblockingIntervalMs": str(UNBLOCKING_INTERVAL_MS),
    }).start()
    yield proc
    proc.kill()


def _admin(broker: BrokerProcess, topic: str, tail: str, **params: str | int) -> httpx.Response:
    path = topic.replace("persistent://", "persistent/")
    return httpx.get(f"{broker.web_url}/admin/v2/{path}{tail}", params=params, timeout=10)


def _key_owned_after_c2_joins(by: str) -> str:
    """A key at c1 while it is alone, and at ``by`` once c2 has joined."""
    after = owners(AUTO_SPLIT_CONSISTENT, ["c1", "c2"])
    return next(k for k in (f"blk{i}" for i in range(10_000)) if after(sticky_key_hash(k.encode())) == by)


def _metric(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} {labels} in /metrics")


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[pulsar.Client]:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    yield client
    client.close()


def _subscribe(client: pulsar.Client, topic: str, name: str,
               consumer_type: pulsar.ConsumerType = pulsar.ConsumerType.KeyShared) -> pulsar.Consumer:
    return client.subscribe(topic, "ks", consumer_type=consumer_type, consumer_name=name,
                            initial_position=EARLIEST, receiver_queue_size=100)


def test_the_endpoints_name_the_messages_that_block_a_key(broker: BrokerProcess, client: pulsar.Client) -> None:
    topic = new_topic("ks-blocked")
    key, other = _key_owned_after_c2_joins("c2"), _key_owned_after_c2_joins("c1")
    sticky_hash = sticky_key_hash(key.encode())
    producer = client.create_producer(topic, batching_enabled=False)
    c1 = _subscribe(client, topic, "c1")
    held_ids = [producer.send(f"{key}:{i}".encode(), partition_key=key) for i in range(3)]
    producer.send(b"other", partition_key=other)
    held = [c1.receive(timeout_millis=5000) for _ in range(4)]
    c2 = _subscribe(client, topic, "c2")
    producer.send(f"{key}:3".encode(), partition_key=key)
    assert nothing_arrives(c2, 500)

    by_key = _admin(broker, topic, "/subscription/ks/consumer/c1/pendingMessages", key=key).json()
    assert [(m["ledgerId"], m["entryId"]) for m in by_key["pendingMessages"]] == \
        [(i.ledger_id(), i.entry_id()) for i in held_ids]
    assert all(m["stickyKeyHash"] == sticky_hash and m["key"] == key and m["draining"]
               for m in by_key["pendingMessages"])
    by_hash = _admin(broker, topic, "/subscription/ks/consumer/c1/pendingMessages", stickyKeyHash=sticky_hash)
    assert by_hash.json()["pendingMessages"] == by_key["pendingMessages"]
    everything = _admin(broker, topic, "/subscription/ks/consumer/c1/pendingMessages").json()["pendingMessages"]
    assert len(everything) == 4 and {m["key"] for m in everything} == {key, other}
    limited = _admin(broker, topic, "/subscription/ks/consumer/c1/pendingMessages", limit=2).json()
    assert len(limited["pendingMessages"]) == 2 and limited["truncated"] is True

    status = _admin(broker, topic, "/subscription/ks/stickyKeyHash", key=key).json()
    assert status["stickyKeyHash"] == sticky_hash
    part = status["partitions"][0]
    assert part["consumerName"] == "c2" and part["drainingConsumerName"] == "c1"
    assert part["drainingUnackedMessages"] == 3 and part["blockedAttempts"] >= 1
    assert part["messagesWaitingForReplay"] == 1

    metrics = httpx.get(f"{broker.web_url}/metrics", timeout=10).text
    assert _metric(metrics, "pulsar_subscription_draining_hashes_count", topic=topic, subscription="ks") == 1
    assert _metric(metrics, "pulsar_subscription_draining_hashes_unacked_messages", topic=topic) == 3
    assert _metric(metrics, "pulsar_consumer_draining_hashes_count", topic=topic, consumer_name="c1") == 1

    for msg in held:
        c1.acknowledge(msg)
    # Nothing but the unblocking timer dispatches now: c2 must still get the message.
    assert c2.receive(timeout_millis=5000).data() == f"{key}:3".encode()
    metrics = httpx.get(f"{broker.web_url}/metrics", timeout=10).text
    assert _metric(metrics, "pulsar_subscription_draining_hashes_count", topic=topic) == 0
    assert _metric(metrics, "pulsar_subscription_draining_hashes_cleared_total", topic=topic) >= 1


def test_a_keys_sticky_hash_is_computed_as_dispatch_does(broker: BrokerProcess, client: pulsar.Client) -> None:
    topic = new_topic("ks-hash")
    client.create_producer(topic).close()
    got = _admin(broker, topic, "/stickyKeyHash", key="order-42").json()
    assert got == {"key": "order-42", "keyBase64": base64.b64encode(b"order-42").decode(),
                   "stickyKeyHash": sticky_key_hash(b"order-42")}
    raw = bytes([0xFF, 0x00, 0x10])
    got = _admin(broker, topic, "/stickyKeyHash", keyBase64=base64.b64encode(raw).decode()).json()
    assert got["key"] is None and got["stickyKeyHash"] == sticky_key_hash(raw)


def test_pending_messages_of_a_shared_consumer_carry_computed_hashes(broker: BrokerProcess,
                                                                     client: pulsar.Client) -> None:
    topic = new_topic("ks-shared-pending")
    producer = client.create_producer(topic, batching_enabled=False)
    consumer = _subscribe(client, topic, "s1", pulsar.ConsumerType.Shared)
    producer.send(b"a", partition_key="k1")
    consumer.receive(timeout_millis=5000)
    listed = wait_until(lambda: _admin(broker, topic, "/subscription/ks/consumer/s1/pendingMessages",
                                       key="k1").json()["pendingMessages"], what="pending message listed")
    assert listed[0]["stickyKeyHash"] == sticky_key_hash(b"k1") and listed[0]["draining"] is False
    status = _admin(broker, topic, "/subscription/ks/stickyKeyHash", key="k1").json()
    assert status["partitions"] == [{"partitionIndex": -1, "subscriptionType": "Shared"}]


@pytest.mark.parametrize(("tail", "params", "status"), [
    ("/stickyKeyHash", {}, 400),
    ("/stickyKeyHash", {"key": "a", "keyBase64": "YQ=="}, 400),
    ("/stickyKeyHash", {"keyBase64": "not base64!"}, 400),
    ("/stickyKeyHash", {"key": "k" * 1025}, 400),
    ("/subscription/ks/stickyKeyHash", {"key": "a"}, 404),
    ("/subscription/nope/consumer/c1/pendingMessages", {}, 404),
    ("/subscription/ks/consumer/nobody/pendingMessages", {}, 404),
    ("/subscription/ks/consumer/c1/pendingMessages", {"stickyKeyHash": 65536}, 400),
    ("/subscription/ks/consumer/c1/pendingMessages", {"stickyKeyHash": "x"}, 400),
    ("/subscription/ks/consumer/c1/pendingMessages", {"limit": 0}, 400),
])
def test_bad_requests_get_clear_errors(broker: BrokerProcess, client: pulsar.Client, tail: str,
                                       params: dict[str, str | int], status: int) -> None:
    topic = new_topic("ks-bad")
    consumer = _subscribe(client, topic, "c1") if "nope" in tail or "nobody" in tail or "c1" in tail else None
    if tail == "/subscription/ks/stickyKeyHash":
        client.create_producer(topic).close()
    response = _admin(broker, topic, tail, **params)
    assert response.status_code == status, response.text
    assert response.json()["reason"]
    if consumer is not None:
        assert _admin(broker, topic, "/subscription/ks/consumer/c1/pendingMessages").status_code == 200

"""Schema evolution with the official client, as Pulsar decides it with Avro's validators.

Regression tests named for the official Python client's tests they mirror:
``test_schema_evolve`` (a producer with ``User2`` after one with ``User1`` under FORWARD:
record names are not compared, a writer's ``int`` is read as the reader's
``["null", "int"]``) and ``test_avro_required_default`` (``ExampleRequiredDefault``
after ``Example`` under the default strategy).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import httpx
import pulsar
import pytest
from e2e_helpers import quiet_logger
from pulsar.schema import Array, AvroSchema, Boolean, Bytes, Double, Float, Integer, Long, Map, Record, String

from magnetar.testing.broker_process import BrokerProcess


@pytest.fixture
def schema_client(broker: BrokerProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    yield c
    c.close()


def namespace(admin: httpx.Client, strategy: str | None) -> str:
    ns = f"public/evolve-{uuid.uuid4().hex[:8]}"
    assert admin.put(f"/admin/v2/namespaces/{ns}").status_code == 204
    if strategy is not None:
        assert admin.put(f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy", json=strategy).status_code == 204
    return ns


class User1(Record):
    name = String()
    age = Integer()


class User2(Record):
    _sorted_fields = True
    name = String()
    age = Integer(required=True)


def test_schema_evolve(schema_client: pulsar.Client, admin: httpx.Client) -> None:
    topic = f"persistent://{namespace(admin, 'FORWARD')}/evolve"
    producer1 = schema_client.create_producer(topic, schema=AvroSchema(User1))
    consumer = schema_client.subscribe(topic, "sub", schema=AvroSchema(User1))
    producer2 = schema_client.create_producer(topic, schema=AvroSchema(User2))
    for i in range(3):
        producer1.send(User1(age=i + 100, name=f"User1 {i}"))
        producer2.send(User2(age=i + 200, name=f"User2 {i}"))
    got = []
    for _ in range(6):
        message = consumer.receive(timeout_millis=10000)
        got.append((message.value().name, message.value().age))
        consumer.acknowledge(message)
    assert got == [(f"User{k} {i}", k * 100 + i) for i in range(3) for k in (1, 2)]


def test_schema_evolve_is_refused_backward(schema_client: pulsar.Client, admin: httpx.Client) -> None:
    """The other direction: User2 cannot read User1's null ages."""
    topic = f"persistent://{namespace(admin, 'BACKWARD')}/evolve"
    schema_client.create_producer(topic, schema=AvroSchema(User1))
    with pytest.raises(pulsar.IncompatibleSchema):
        schema_client.create_producer(topic, schema=AvroSchema(User2))


class MySubRecord(Record):
    _sorted_fields = True
    x = Integer()
    y = Long()
    z = String()


class Example(Record):
    a = Integer()
    b = Boolean(required=True)
    c = Long()
    d = Float()
    e = Double()
    f = String()
    g = Bytes()
    h = Array(String())
    i = Map(String())
    j = MySubRecord()


class ExampleRequiredDefault(Record):
    _sorted_fields = True
    a = Integer(required_default=True)
    b = Boolean(required=True, required_default=True)
    c = Long(required_default=True)
    d = Float(required_default=True)
    e = Double(required_default=True)
    f = String(required_default=True)
    g = Bytes(required_default=True)
    h = Array(String(), required_default=True)
    i = Map(String(), required_default=True)
    j = MySubRecord(required_default=True)


def test_avro_required_default(schema_client: pulsar.Client, admin: httpx.Client) -> None:
    topic = f"persistent://{namespace(admin, None)}/required-default"
    producer = schema_client.create_producer(topic, schema=AvroSchema(Example))
    producer_default = schema_client.create_producer(topic, schema=AvroSchema(ExampleRequiredDefault))
    versions = admin.get(f"/admin/v2/schemas/{topic.removeprefix('persistent://')}/schemas").json()
    assert [json_name(v) for v in versions["getSchemaResponses"]] == ["Example", "ExampleRequiredDefault"]
    producer.close()
    producer_default.close()


def json_name(version: dict[str, object]) -> str:
    return str(json.loads(str(version["data"]))["name"])

"""The schema registry against the official client's ``pulsar.schema`` classes: evolution
accepted or refused by strategy, the namespace schema policies, GET_SCHEMA and
GET_OR_CREATE_SCHEMA, the ``/admin/v2/schemas`` API with bad bodies, and the CLI verbs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pulsar
import pytest
from e2e_helpers import EARLIEST, new_topic, quiet_logger
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String

from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.raw_client import RawConnection, T
from magnetar.wire import pulsar_api_pb2 as pb


class UserV1(Record):
    _avro_namespace = "shop"
    name = String()


class UserV2(Record):  # adds a field with a default: FULL
    _avro_namespace = "shop"
    name = String()
    age = Integer(required_default=True)


class UserV3(Record):  # adds a field without a default: FORWARD only
    _avro_namespace = "shop"
    name = String()
    age = Integer(required_default=True)
    email = String(required=True)


class Order(Record):
    _avro_namespace = "shop"
    amount = Integer()


for _cls in (UserV1, UserV2, UserV3):
    _cls.__name__ = "User"  # one Avro record name, three versions of it


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("schemas") / "data").start()
    yield proc
    proc.kill()


@pytest.fixture(scope="module")
def client(broker: BrokerProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    yield c
    c.close()


def namespace_with(admin: httpx.Client, strategy: str | None = None, **flags: bool) -> str:
    """A fresh namespace of ``public`` with the given schema policies."""
    ns = f"public/schemas-{uuid.uuid4().hex[:8]}"
    assert admin.put(f"/admin/v2/namespaces/{ns}").status_code == 204
    if strategy is not None:
        assert admin.put(f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy", json=strategy).status_code == 204
    for path, value in flags.items():
        assert admin.post(f"/admin/v2/namespaces/{ns}/{path}", json=value).status_code == 204
    return ns


def topic_in(ns: str) -> str:
    return f"persistent://{ns}/t-{uuid.uuid4().hex[:8]}"


def schema_url(topic: str, suffix: str = "/schema") -> str:
    local = topic.removeprefix("persistent://")
    return f"/admin/v2/schemas/{local}{suffix}"


@pytest.mark.parametrize(("strategy", "v2_ok", "v3_ok"), [
    ("FULL", True, False), ("BACKWARD", True, False), ("FORWARD", True, True),
    ("ALWAYS_COMPATIBLE", True, True), ("ALWAYS_INCOMPATIBLE", False, False),
])
def test_evolution_by_strategy(client: pulsar.Client, admin: httpx.Client, strategy: str, v2_ok: bool,
                               v3_ok: bool) -> None:
    topic = topic_in(namespace_with(admin, strategy))
    client.create_producer(topic, schema=AvroSchema(UserV1)).close()
    for record, expected in ((UserV2, v2_ok), (UserV3, v3_ok)):
        if expected:
            client.create_producer(topic, schema=AvroSchema(record)).close()
        else:
            with pytest.raises(pulsar.IncompatibleSchema):
                client.create_producer(topic, schema=AvroSchema(record))
    client.create_producer(topic, schema=AvroSchema(UserV1)).close()  # a known version is always fine
    versions = admin.get(schema_url(topic, "/schemas")).json()["getSchemaResponses"]
    assert [v["version"] for v in versions] == list(range(1 + v2_ok + v3_ok))


def test_topic_strategy_overrides_the_namespaces(client: pulsar.Client, admin: httpx.Client) -> None:
    topic = topic_in(namespace_with(admin, "ALWAYS_INCOMPATIBLE"))
    client.create_producer(topic, schema=AvroSchema(UserV1)).close()
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(UserV2))
    policy = f"/admin/v2/{topic.replace('://', '/')}/schemaCompatibilityStrategy"
    assert admin.put(policy, json="FORWARD").status_code == 204
    client.create_producer(topic, schema=AvroSchema(UserV2)).close()
    client.create_producer(topic, schema=AvroSchema(UserV3)).close()
    check = admin.post(schema_url(topic, "/compatibility"), json=avro_payload(Order)).json()
    assert check == {"isCompatibility": False, "schemaCompatibilityStrategy": "FORWARD"}
    assert admin.put(policy, json="UNDEFINED").status_code == 204  # defers to the namespace again
    assert admin.post(schema_url(topic, "/compatibility"), json=avro_payload(UserV2)).json()[
        "schemaCompatibilityStrategy"] == "ALWAYS_INCOMPATIBLE"


def test_refusal_carries_pulsars_message(broker: BrokerProcess, admin: httpx.Client) -> None:
    topic = topic_in(namespace_with(admin, "FULL"))
    v1, v3 = (AvroSchema(r).schema_info().schema().encode() for r in (UserV1, UserV3))
    with RawConnection.to_service(broker.service_url) as conn:
        conn.handshake()
        conn.send_command(producer_with_schema(topic, 1, 1, pb.Schema.Avro, v1))
        assert conn.expect_reply(1, T.PRODUCER_SUCCESS).command.producer_success.schema_version == bytes(8)
        conn.send_command(producer_with_schema(topic, 2, 2, pb.Schema.Avro, v3))
        error = conn.expect_reply(2, T.ERROR).command.error
    assert error.error == pb.IncompatibleSchema
    assert error.message.startswith("Error during schema compatibility check with strategy FULL")
    assert "missing required field email" in error.message


def producer_with_schema(topic: str, producer_id: int, request_id: int, kind: int, data: bytes) -> pb.BaseCommand:
    return pb.BaseCommand(type=T.PRODUCER, producer=pb.CommandProducer(
        topic=topic, producer_id=producer_id, request_id=request_id,
        schema=pb.Schema(name="s", type=kind, schema_data=data)))  # type: ignore[arg-type]


def test_json_schema_producers_and_consumers(client: pulsar.Client, admin: httpx.Client) -> None:
    topic = topic_in(namespace_with(admin))
    producer = client.create_producer(topic, schema=JsonSchema(UserV1))
    consumer = client.subscribe(topic, "s", schema=JsonSchema(UserV2), initial_position=EARLIEST)
    producer.send(UserV1(name="ada"))
    msg = consumer.receive(timeout_millis=5000)
    assert msg.value().name == "ada"
    reader = client.create_reader(topic, pulsar.MessageId.earliest, schema=JsonSchema(UserV1))
    assert reader.read_next(timeout_millis=5000).value().name == "ada"
    reader.close()
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "s2", schema=JsonSchema(UserV3))  # cannot read v1's data: email has no default
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "s3", schema=AvroSchema(UserV1))  # another type
    stored = admin.get(schema_url(topic)).json()
    assert stored["type"] == "JSON" and json.loads(stored["data"])["name"] == "User"


def test_consumer_schema_on_a_topic_without_one(client: pulsar.Client) -> None:
    idle = new_topic("idle")
    client.subscribe(idle, "s", schema=AvroSchema(UserV1)).close()  # an idle topic takes the consumer's schema
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(idle, schema=AvroSchema(Order))
    busy = new_topic("busy")
    client.create_producer(busy).send(b"raw bytes")
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(busy, "s", schema=AvroSchema(UserV1))


def test_auto_update_off_and_validation_enforced(client: pulsar.Client, admin: httpx.Client) -> None:
    ns = namespace_with(admin, "FULL", isAllowAutoUpdateSchema=False, schemaValidationEnforced=True)
    assert admin.get(f"/admin/v2/namespaces/{ns}/isAllowAutoUpdateSchema").json() is False
    assert admin.get(f"/admin/v2/namespaces/{ns}").json()["is_allow_auto_update_schema"] is False
    topic = topic_in(ns)
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(UserV1))  # not added: auto update is off
    upload = {"type": "AVRO", "schema": AvroSchema(UserV1).schema_info().schema(), "properties": {}}
    assert admin.post(schema_url(topic), json=upload).json() == {"version": {"version": 0}}
    client.create_producer(topic, schema=AvroSchema(UserV1)).close()  # the uploaded one is fine
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(UserV2))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic)  # no schema on a topic with one, validation enforced
    assert admin.post(f"/admin/v2/namespaces/{ns}/isAllowAutoUpdateSchema", json=True).status_code == 204
    client.create_producer(topic, schema=AvroSchema(UserV2)).close()


def test_partitions_share_their_topics_schemas(client: pulsar.Client, admin: httpx.Client) -> None:
    topic = new_topic("parted")
    assert admin.put(f"/admin/v2/{topic.replace('://', '/')}/partitions", json=3).status_code == 204
    producer = client.create_producer(topic, schema=AvroSchema(UserV1))
    for i in range(6):
        producer.send(UserV1(name=f"u{i}"))
    assert admin.get(schema_url(topic)).json()["version"] == 0
    assert admin.get(schema_url(f"{topic}-partition-2")).json()["version"] == 0
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(f"{topic}-partition-1", schema=AvroSchema(Order))
    with pytest.raises(pulsar.IncompatibleSchema):  # Pulsar's schema id has no domain
        client.create_producer(topic.replace("persistent://", "non-persistent://"), schema=AvroSchema(Order))


def test_get_schema_and_get_or_create_schema_commands(broker: BrokerProcess, client: pulsar.Client) -> None:
    topic = new_topic("cmds")
    client.create_producer(topic, schema=AvroSchema(UserV1)).close()
    v2 = AvroSchema(UserV2).schema_info().schema().encode()
    with RawConnection.to_service(broker.service_url) as conn:
        conn.handshake()
        conn.send_command(pb.BaseCommand(type=T.GET_OR_CREATE_SCHEMA, getOrCreateSchema=pb.CommandGetOrCreateSchema(
            request_id=1, topic=topic, schema=pb.Schema(name="x", type=pb.Schema.Avro, schema_data=v2))))
        created = conn.expect_reply(1, T.GET_OR_CREATE_SCHEMA_RESPONSE).command.getOrCreateSchemaResponse
        assert not created.HasField("error_code") and created.schema_version == (1).to_bytes(8, "big")
        conn.send_command(pb.BaseCommand(type=T.GET_SCHEMA, getSchema=pb.CommandGetSchema(request_id=2, topic=topic)))
        got = conn.expect_reply(2, T.GET_SCHEMA_RESPONSE).command.getSchemaResponse
        assert got.schema_version == (1).to_bytes(8, "big") and got.schema.schema_data == v2
        assert got.schema.type == pb.Schema.Avro and got.schema.name == topic.removeprefix("persistent://")
        conn.send_command(pb.BaseCommand(type=T.GET_SCHEMA, getSchema=pb.CommandGetSchema(
            request_id=3, topic=topic, schema_version=(0).to_bytes(8, "big"))))
        first = conn.expect_reply(3, T.GET_SCHEMA_RESPONSE).command.getSchemaResponse
        assert first.schema.schema_data == AvroSchema(UserV1).schema_info().schema().encode()
        conn.send_command(pb.BaseCommand(type=T.GET_SCHEMA, getSchema=pb.CommandGetSchema(
            request_id=4, topic=new_topic("none"))))
        missing = conn.expect_reply(4, T.GET_SCHEMA_RESPONSE).command.getSchemaResponse
        assert (missing.error_code, missing.error_message) == (pb.TopicNotFound, "Topic not found or no-schema")
        conn.send_command(pb.BaseCommand(type=T.GET_OR_CREATE_SCHEMA, getOrCreateSchema=pb.CommandGetOrCreateSchema(
            request_id=5, topic=topic, schema=pb.Schema(name="x", type=pb.Schema.String, schema_data=b""))))
        refused = conn.expect_reply(5, T.GET_OR_CREATE_SCHEMA_RESPONSE).command.getOrCreateSchemaResponse
        assert refused.error_code == pb.IncompatibleSchema and "exists schema type AVRO" in refused.error_message
        conn.send_command(pb.BaseCommand(type=T.GET_OR_CREATE_SCHEMA, getOrCreateSchema=pb.CommandGetOrCreateSchema(
            request_id=6, topic=new_topic("absent"),
            schema=pb.Schema(name="x", type=pb.Schema.String, schema_data=b""))))
        absent = conn.expect_reply(6, T.GET_OR_CREATE_SCHEMA_RESPONSE).command.getOrCreateSchemaResponse
        assert absent.error_code == pb.TopicNotFound and "does not exist" in absent.error_message


def test_auto_consume_consumers_do_not_hold_a_schema(broker: BrokerProcess, client: pulsar.Client,
                                                    admin: httpx.Client) -> None:
    topic = new_topic("auto")
    with RawConnection.to_service(broker.service_url) as conn:
        conn.handshake()
        conn.send_command(pb.BaseCommand(type=T.SUBSCRIBE, subscribe=pb.CommandSubscribe(
            topic=topic, subscription="any", subType=pb.CommandSubscribe.Shared, consumer_id=1, request_id=1,
            schema=pb.Schema(name="x", type=pb.Schema.AutoConsume, schema_data=b""))))
        conn.expect_reply(1, T.SUCCESS)
        assert admin.get(schema_url(topic)).status_code == 404  # AUTO_CONSUME is never stored
        client.subscribe(topic, "typed", schema=AvroSchema(UserV1)).close()  # the topic counts as idle
        assert admin.get(schema_url(topic)).json()["version"] == 0
    plain = new_topic("plain")
    client.subscribe(plain, "bytes")  # a consumer without a schema holds the topic
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(plain, "typed", schema=AvroSchema(UserV1))


# -- the REST API --------------------------------------------------------------------------------
def avro_payload(record: type[Record], **properties: str) -> dict[str, Any]:
    return {"type": "AVRO", "schema": AvroSchema(record).schema_info().schema(), "properties": properties}


def test_rest_round_trip(admin: httpx.Client) -> None:
    topic = topic_in(namespace_with(admin, "BACKWARD"))
    assert admin.get(schema_url(topic)).status_code == 404
    assert admin.post(schema_url(topic), json=avro_payload(UserV1, owner="shop")).json() == {"version": {"version": 0}}
    assert admin.post(schema_url(topic), json=avro_payload(UserV1)).json() == {"version": {"version": 0}}
    got = admin.get(schema_url(topic)).json()
    assert set(got) == {"version", "type", "timestamp", "data", "properties"}
    assert (got["version"], got["type"], got["properties"]) == (0, "AVRO", {"owner": "shop"})
    assert json.loads(got["data"]) == json.loads(AvroSchema(UserV1).schema_info().schema())
    check = admin.post(schema_url(topic, "/compatibility"), json=avro_payload(UserV3))
    assert (check.status_code, check.json()) == (202, {"isCompatibility": False,
                                                      "schemaCompatibilityStrategy": "BACKWARD"})
    assert admin.post(schema_url(topic, "/compatibility"), json=avro_payload(UserV2)).json()["isCompatibility"]
    conflict = admin.post(schema_url(topic), json=avro_payload(UserV3))
    assert conflict.status_code == 409 and "strategy BACKWARD" in conflict.json()["reason"]
    assert admin.post(schema_url(topic), json=avro_payload(UserV2)).json() == {"version": {"version": 1}}
    assert admin.post(schema_url(topic, "/version"), json=avro_payload(UserV2)).json() == 1
    assert admin.post(schema_url(topic, "/version"), json=avro_payload(UserV3)).json() == -1
    assert admin.get(schema_url(topic, "/schema/0")).json()["version"] == 0
    assert admin.get(schema_url(topic, "/schema/7")).status_code == 404
    assert admin.delete(schema_url(topic)).json() == {"version": 2}  # the delete marker
    assert admin.get(schema_url(topic)).json() == {"reason": "Schema not found"}
    assert admin.get(schema_url(topic, "/schema/1")).status_code == 404
    assert admin.get(schema_url(topic, "/schemas")).json() == {"getSchemaResponses": []}
    assert admin.post(schema_url(topic), json=avro_payload(Order)).json() == {"version": {"version": 3}}
    assert admin.delete(schema_url(topic), params={"force": "true"}).status_code == 200
    assert admin.post(schema_url(topic), json={"type": "STRING", "schema": ""}).json() == {"version": {"version": 0}}


def test_rest_key_value_schemas(admin: httpx.Client) -> None:
    topic = new_topic("kv")
    user = json.loads(AvroSchema(UserV1).schema_info().schema())
    payload = {"type": "KEY_VALUE", "schema": json.dumps({"key": "", "value": user}),
               "properties": {"key.schema.type": "STRING", "value.schema.type": "AVRO", "kv.encoding.type": "INLINE"}}
    assert admin.post(schema_url(topic), json=payload).json() == {"version": {"version": 0}}
    got = admin.get(schema_url(topic)).json()
    assert got["type"] == "KEY_VALUE" and json.loads(got["data"]) == {"key": "", "value": user}
    other_key = {**payload, "properties": {**payload["properties"], "key.schema.type": "INT64"}}
    refused = admin.post(schema_url(topic), json=other_key)
    assert refused.status_code == 409 and "Key schemas or Value schemas are different" in refused.json()["reason"]


@pytest.mark.parametrize(("body", "status", "reason"), [
    ({"schema": "{}"}, 400, "type"),
    ({"type": "TEXT", "schema": ""}, 400, "Invalid schema type 'TEXT'"),
    ({"type": "AVRO", "schema": "{not json"}, 400, "the schema field must be a JSON definition"),
    ({"type": "AVRO", "schema": '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "nope"}]}'},
     422, "Invalid schema definition data for AVRO schema"),
    ({"type": "STRING", "schema": "abc"}, 422, "Invalid schema definition data for string schema : 'abc'"),
    ({"type": "INT64", "schema": "abc"}, 422, "length of schema data should be zero"),
    ({"type": "KEY_VALUE", "schema": "[]"}, 400, "Invalid KEY_VALUE schema"),
    ({"type": "AVRO", "schema": 5}, 400, "schema"),
    ({"type": "AVRO", "schema": "{}", "extra": 1}, 400, "extra"),
    ([1, 2], 400, "body"),
])
def test_bad_bodies_get_a_clear_reason(admin: httpx.Client, body: Any, status: int, reason: str) -> None:
    topic = new_topic("bad")
    for suffix in ("/schema", "/compatibility"):
        response = admin.post(schema_url(topic, suffix), json=body)
        assert response.status_code == status, response.text
        assert reason in response.json()["reason"]
    assert admin.get(schema_url(topic)).status_code == 404
    assert admin.get(schema_url(topic, "/schema/latest")).status_code == 400
    assert admin.put("/admin/v2/namespaces/public/default/schemaCompatibilityStrategy",
                     json="SOMETIMES").status_code == 400
    assert admin.get("/admin/v2/schemas/public/nope/t/schema").json() == {"reason": "Namespace does not exist"}


# -- the CLI ---------------------------------------------------------------------------------------
def magnetar(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MAGNETAR_ADMIN_URL": broker.web_url, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "magnetar.cli", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def test_cli_verbs(broker: BrokerProcess, admin: httpx.Client, tmp_path: Path) -> None:
    ns = namespace_with(admin)
    topic = topic_in(ns)
    v1, v3 = tmp_path / "v1.json", tmp_path / "v3.json"
    v1.write_text(json.dumps(avro_payload(UserV1)))
    v3.write_text(json.dumps(avro_payload(UserV3)))
    done = magnetar(broker, "admin", "schemas", "upload", topic, "--filename", str(v1))
    assert done.returncode == 0 and "version 0" in done.stdout, done.stderr
    shown = magnetar(broker, "admin", "--json", "schemas", "get", topic)
    assert json.loads(shown.stdout)["type"] == "AVRO"
    verdict = magnetar(broker, "admin", "schemas", "compatibility", topic, "-f", str(v3))
    assert verdict.stdout.strip() == "The schema is NOT compatible (strategy FULL)"
    refused = magnetar(broker, "admin", "schemas", "upload", topic, "-f", str(v3))
    assert refused.returncode != 0 and "HTTP 409" in refused.stderr
    assert magnetar(broker, "admin", "namespaces", "set-schema-compatibility-strategy", ns, "-c",
                    "forward").returncode == 0
    assert admin.get(f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy").json() == "FORWARD"
    assert magnetar(broker, "admin", "schemas", "upload", topic, "-f", str(v3)).returncode == 0
    everything = json.loads(magnetar(broker, "admin", "--json", "schemas", "get", topic, "--all-version").stdout)
    assert [v["version"] for v in everything] == [0, 1]
    assert magnetar(broker, "admin", "schemas", "delete", topic).returncode == 0
    assert admin.get(schema_url(topic)).json() == {"reason": "Schema not found"}
    missing = magnetar(broker, "admin", "schemas", "upload", topic, "-f", str(tmp_path / "absent.json"))
    assert missing.returncode != 0 and "cannot read" in missing.stderr
    assert magnetar(broker, "admin", "namespaces", "set-is-allow-auto-update-schema", ns, "--disable").returncode == 0
    assert admin.get(f"/admin/v2/namespaces/{ns}/isAllowAutoUpdateSchema").json() is False

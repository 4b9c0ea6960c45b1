"""The schema registry's decisions in core/schemas: every compatibility strategy on Avro
evolution cases, JSON, KEY_VALUE, PROTOBUF_NATIVE and primitives; versions, deletes,
producer and consumer rules; where the strategy comes from."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.core.broker.broker_config import LIFECYCLE_CHOICES, BrokerConfig
from magnetar.core.errors import IncompatibleSchema, InvalidSchemaData
from magnetar.core.policies import Policies, TopicPolicies, schema_compatibility_strategy, schema_validation_enforced
from magnetar.core.schemas.avro_resolution import InvalidAvroSchema, parse, read_problem
from magnetar.core.schemas.compatibility import check_compatible, check_consumer_compatible
from magnetar.core.schemas.schema_data import SchemaCompatibilityStrategy as S
from magnetar.core.schemas.schema_data import SchemaData, encode_key_value, key_value_parts
from magnetar.core.schemas.validation import validate
from magnetar.core.schemas.versions import (
    StoredVersion,
    check_producer_without_schema,
    consumer_adds_schema,
    find_version,
    latest,
    live_versions,
    version_to_add,
)

NON_TRANSITIVE = [S.BACKWARD, S.FORWARD, S.FULL]


def record(*fields: dict[str, Any], name: str = "User", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "shop", "fields": list(fields), **extra}


def avro(schema: dict[str, Any], kind: str = "AVRO") -> SchemaData:
    return SchemaData(kind, json.dumps(schema).encode())


def field(name: str, kind: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, **extra}


def accepted(old: SchemaData, new: SchemaData, strategy: S) -> bool:
    try:
        check_compatible([old], new, strategy)
    except IncompatibleSchema:
        return False
    return True


BASE = record(field("name", "string"))
# (case, old, new, {strategy: accepted}) -- FULL is BACKWARD and FORWARD together
EVOLUTIONS: list[tuple[str, dict[str, Any], dict[str, Any], tuple[bool, bool]]] = [
    ("added field with default", BASE, record(field("name", "string"), field("age", "int", default=0)),
     (True, True)),
    ("added field without default", BASE, record(field("name", "string"), field("age", "int")), (False, True)),
    ("removed field without default", record(field("name", "string"), field("age", "int")), BASE, (True, False)),
    ("removed field with default", record(field("name", "string"), field("age", "int", default=1)), BASE,
     (True, True)),
    ("int promoted to long", record(field("n", "int")), record(field("n", "long")), (True, False)),
    ("long narrowed to int", record(field("n", "long")), record(field("n", "int")), (False, True)),
    ("float promoted to double", record(field("n", "float")), record(field("n", "double")), (True, False)),
    ("string read as bytes", record(field("n", "string")), record(field("n", "bytes")), (True, True)),
    ("renamed with alias", BASE, record(field("fullName", "string", aliases=["name"])), (True, False)),
    ("renamed without alias", BASE, record(field("fullName", "string")), (False, False)),
    # Avro's validators never compare a record's name, with or without an alias
    ("record renamed with alias", BASE, record(field("name", "string"), name="Customer", aliases=["shop.User"]),
     (True, True)),
    # a symbol the reader lacks fails when such a value is read, not in Avro's validators
    ("enum symbol added", record(field("c", {"type": "enum", "name": "Color", "symbols": ["RED"]})),
     record(field("c", {"type": "enum", "name": "Color", "symbols": ["RED", "BLUE"]})), (True, True)),
    ("enum symbol removed", record(field("c", {"type": "enum", "name": "Color", "symbols": ["RED", "BLUE"]})),
     record(field("c", {"type": "enum", "name": "Color", "symbols": ["RED"]})), (True, True)),
    ("enum symbol added, readers have a default",
     record(field("c", {"type": "enum", "name": "Color", "symbols": ["RED"], "default": "RED"})),
     record(field("c", {"type": "enum", "name": "Color", "symbols": ["RED", "BLUE"], "default": "RED"})),
     (True, True)),
    ("type made nullable (union)", BASE, record(field("name", ["null", "string"])), (True, False)),
    ("union branch added", record(field("v", ["null", "int"])), record(field("v", ["null", "int", "string"])),
     (True, False)),
    ("union narrowed to its branch", record(field("name", ["null", "string"])), BASE, (False, True)),
    ("field type changed", record(field("n", "int")), record(field("n", "string")), (False, False)),
    ("array items promoted", record(field("xs", {"type": "array", "items": "int"})),
     record(field("xs", {"type": "array", "items": "long"})), (True, False)),
    ("map values changed", record(field("m", {"type": "map", "values": "int"})),
     record(field("m", {"type": "map", "values": "boolean"})), (False, False)),
    ("fixed size changed", record(field("f", {"type": "fixed", "name": "F", "size": 4})),
     record(field("f", {"type": "fixed", "name": "F", "size": 8})), (False, False)),
    ("nested record field added with default",
     record(field("a", record(field("x", "int"), name="Addr"))),
     record(field("a", record(field("x", "int"), field("y", "int", default=0), name="Addr"))), (True, True)),
]


@pytest.mark.parametrize(("case", "old", "new", "expected"), EVOLUTIONS, ids=[e[0] for e in EVOLUTIONS])
@pytest.mark.parametrize("kind", ["AVRO", "JSON"])
def test_avro_evolution_under_every_strategy(case: str, old: dict[str, Any], new: dict[str, Any],
                                             expected: tuple[bool, bool], kind: str) -> None:
    backward, forward = expected
    before, after = avro(old, kind), avro(new, kind)
    assert accepted(before, after, S.BACKWARD) is backward
    assert accepted(before, after, S.BACKWARD_TRANSITIVE) is backward
    assert accepted(before, after, S.FORWARD) is forward
    assert accepted(before, after, S.FORWARD_TRANSITIVE) is forward
    assert accepted(before, after, S.FULL) is (backward and forward)
    assert accepted(before, after, S.FULL_TRANSITIVE) is (backward and forward)
    assert accepted(before, after, S.ALWAYS_COMPATIBLE)
    assert not accepted(before, after, S.ALWAYS_INCOMPATIBLE)


def test_transitive_strategies_compare_with_every_version() -> None:
    v1 = avro(record(field("a", "int")))
    v2 = avro(record(field("a", "int"), field("b", "int", default=1)))
    v3 = avro(record(field("a", "int"), field("b", "int")))
    check_compatible([v1, v2], v3, S.BACKWARD)  # v3 reads v2
    with pytest.raises(IncompatibleSchema, match="missing required field b"):
        check_compatible([v1, v2], v3, S.BACKWARD_TRANSITIVE)  # ...but not v1
    w1 = avro(record(field("a", "int"), field("b", "int")))
    w2 = avro(record(field("a", "int"), field("b", "int", default=0)))
    w3 = avro(record(field("a", "int")))
    check_compatible([w1, w2], w3, S.FORWARD)  # w2 reads w3 (b has a default)
    with pytest.raises(IncompatibleSchema, match="FORWARD_TRANSITIVE"):
        check_compatible([w1, w2], w3, S.FORWARD_TRANSITIVE)  # w1 cannot
    with pytest.raises(IncompatibleSchema):
        check_compatible([w1, w2], w3, S.FULL_TRANSITIVE)


def test_refusals_name_the_strategy_and_the_field() -> None:
    with pytest.raises(IncompatibleSchema) as refused:
        check_compatible([avro(BASE)], avro(record(field("name", "string"), field("age", "int"))), S.FULL)
    assert refused.value.message.startswith(
        "Error during schema compatibility check with strategy FULL: org.apache.avro.SchemaValidationException")
    assert "(Found shop.User, expecting shop.User, missing required field age)" in refused.value.message


def test_a_type_change_is_refused_under_any_strategy_but_always_compatible() -> None:
    for strategy in (*NON_TRANSITIVE, S.BACKWARD_TRANSITIVE, S.ALWAYS_INCOMPATIBLE):
        with pytest.raises(IncompatibleSchema, match="exists schema type AVRO, new schema type JSON"):
            check_compatible([avro(BASE)], avro(BASE, "JSON"), strategy)
    check_compatible([avro(BASE)], SchemaData("STRING", b""), S.ALWAYS_COMPATIBLE)


def test_primitives_only_need_the_same_type() -> None:
    string, ints = SchemaData("STRING", b""), SchemaData("INT32", b"")
    for strategy in (*NON_TRANSITIVE, S.FULL_TRANSITIVE, S.ALWAYS_INCOMPATIBLE):
        check_compatible([string], string, strategy)  # the same schema is always fine
        with pytest.raises(IncompatibleSchema, match="exists schema type STRING, new schema type INT32"):
            check_compatible([string], ints, strategy)
    with pytest.raises(IncompatibleSchema, match="ALWAYS_INCOMPATIBLE"):
        check_compatible([string], SchemaData("STRING", b"x"), S.ALWAYS_INCOMPATIBLE)


def test_json_in_the_old_json_schema_format() -> None:
    legacy = SchemaData("JSON", json.dumps({"type": "object", "id": "urn:jsonschema:User"}).encode())
    other = SchemaData("JSON", json.dumps({"type": "object", "id": "urn:jsonschema:Order"}).encode())
    check_compatible([legacy], SchemaData("JSON", legacy.data + b" "), S.FULL)
    with pytest.raises(IncompatibleSchema, match="Incompatible Schema from"):
        check_compatible([legacy], other, S.FULL)
    check_compatible([legacy], avro(BASE, "JSON"), S.FULL)  # moving to the Avro format is allowed
    check_compatible([avro(BASE, "JSON")], legacy, S.FULL)
    with pytest.raises(IncompatibleSchema, match="Unknown schema format"):
        check_compatible([legacy], SchemaData("JSON", b"not json"), S.FULL)


def key_value(key: SchemaData, value: SchemaData) -> SchemaData:
    return SchemaData("KEY_VALUE", encode_key_value(key.data, value.data),
                      {"key.schema.type": key.schema_type, "value.schema.type": value.schema_type,
                       "kv.encoding.type": "INLINE"})


def test_key_value_compares_key_and_value_by_their_own_rules() -> None:
    string = SchemaData("STRING", b"")
    old = key_value(string, avro(BASE))
    assert key_value_parts(old) == (SchemaData("STRING", b""), SchemaData("AVRO", avro(BASE).data))
    check_compatible([old], key_value(string, avro(record(field("name", "string"), field("a", "int", default=0)))),
                     S.FULL)
    with pytest.raises(IncompatibleSchema, match="missing required field a"):
        check_compatible([old], key_value(string, avro(record(field("name", "string"), field("a", "int")))),
                         S.BACKWARD)
    with pytest.raises(IncompatibleSchema, match="from key schema type is STRING and to key schema is INT64"):
        check_compatible([old], key_value(SchemaData("INT64", b""), avro(BASE)), S.FULL)
    with pytest.raises(IncompatibleSchema, match="Invalid KEY_VALUE schema data"):
        check_compatible([old], SchemaData("KEY_VALUE", b"\x00\x00", old.properties), S.FULL)


def protobuf_native(root: str, descriptor: str = "AAAA") -> SchemaData:
    return SchemaData("PROTOBUF_NATIVE", json.dumps({"fileDescriptorSet": descriptor, "rootMessageTypeName": root,
                                                     "rootFileDescriptorName": "a.proto"}).encode())


def test_protobuf_native_checks_only_the_root_message_name() -> None:
    old = protobuf_native("shop.User")
    for strategy in (*NON_TRANSITIVE, S.FULL_TRANSITIVE):
        check_compatible([old], protobuf_native("shop.User", "BBBB"), strategy)
        with pytest.raises(IncompatibleSchema, match="Protobuf root message isn't allow change!"):
            check_compatible([old], protobuf_native("shop.Order"), strategy)
    with pytest.raises(IncompatibleSchema, match="Unknown SchemaCompatibilityStrategy"):
        check_compatible([old], protobuf_native("shop.User", "BBBB"), S.ALWAYS_INCOMPATIBLE)


def test_bad_avro_definitions_are_refused_with_the_reason() -> None:
    with pytest.raises(InvalidAvroSchema, match="not JSON"):
        parse(b"{")
    with pytest.raises(InvalidAvroSchema, match="not an Avro schema"):
        parse(b'{"type": "record", "name": "R", "fields": [{"name": "x", "type": "nope"}]}')
    with pytest.raises(IncompatibleSchema, match="Invalid schema definition"):
        check_compatible([avro(BASE)], SchemaData("AVRO", b"[1, 2"), S.FULL)


def test_recursive_records_resolve() -> None:
    node = record(field("value", "int"), field("next", ["null", "shop.Node"], default=None), name="Node")
    grown = record(field("value", "long"), field("next", ["null", "shop.Node"], default=None),
                   field("label", "string", default=""), name="Node")
    assert read_problem(parse(json.dumps(grown).encode()), parse(json.dumps(node).encode())) is None
    assert read_problem(parse(json.dumps(node).encode()), parse(json.dumps(grown).encode())) is not None


# -- versions ---------------------------------------------------------------------------------
def history(*schemas: SchemaData | None) -> list[StoredVersion]:
    """Versions from 0; None stands for a delete marker."""
    return [StoredVersion(i, s or SchemaData("NONE", b""), deleted=s is None) for i, s in enumerate(schemas)]


def test_the_same_schema_keeps_its_version_however_it_is_spelled() -> None:
    v0 = avro(BASE)
    respelled = SchemaData("AVRO", json.dumps(BASE, indent=4, sort_keys=True).encode())
    assert find_version(history(v0), respelled) == 0
    assert version_to_add(history(v0), respelled, S.ALWAYS_INCOMPATIBLE, allow_auto_update=False) == 0
    assert find_version(history(v0), avro(BASE, "JSON")) is None  # same definition, other type
    assert find_version(history(SchemaData("STRING", b"")), SchemaData("STRING", b"")) == 0


def test_a_new_schema_needs_auto_update_and_compatibility() -> None:
    grown = avro(record(field("name", "string"), field("age", "int", default=0)))
    assert version_to_add(history(avro(BASE)), grown, S.FULL, allow_auto_update=True) is None
    with pytest.raises(IncompatibleSchema, match="Schema not found and schema auto updating is disabled."):
        version_to_add(history(avro(BASE)), grown, S.FULL, allow_auto_update=False)
    with pytest.raises(IncompatibleSchema):
        version_to_add(history(avro(BASE)), avro(record(field("x", "int"))), S.FULL, allow_auto_update=True)


def test_a_delete_forgets_the_versions_before_it() -> None:
    unrelated = SchemaData("STRING", b"")
    deleted = history(avro(BASE), None)
    assert latest(deleted) is None and live_versions(deleted) == []
    assert version_to_add(deleted, unrelated, S.FULL, allow_auto_update=True) is None
    after = history(avro(BASE), None, unrelated)
    assert [v.version for v in live_versions(after)] == [2]
    assert find_version(after, avro(BASE)) is None


def test_consumers_add_a_schema_to_an_idle_topic_only() -> None:
    schema = avro(BASE)
    assert consumer_adds_schema([], schema, S.FULL, topic_in_use=False)
    with pytest.raises(IncompatibleSchema, match=r"active topic with empty\(BYTES\) schema: new schema type AVRO"):
        consumer_adds_schema([], schema, S.FULL, topic_in_use=True)
    assert not consumer_adds_schema([], schema, S.ALWAYS_COMPATIBLE, topic_in_use=True)
    assert not consumer_adds_schema(history(schema), schema, S.FULL, topic_in_use=False)


def test_consumer_checks_use_backward_against_the_latest_for_non_transitive_strategies() -> None:
    old = avro(BASE)
    reads_old = avro(record(field("name", "string"), field("age", "int", default=0)))
    needs_age = avro(record(field("name", "string"), field("age", "int")))
    for strategy in (S.BACKWARD, S.FORWARD, S.FULL, S.FORWARD_TRANSITIVE):
        check_consumer_compatible([old], reads_old, strategy)
        with pytest.raises(IncompatibleSchema, match="strategy BACKWARD"):
            check_consumer_compatible([old], needs_age, strategy)
    with pytest.raises(IncompatibleSchema, match="strategy FULL_TRANSITIVE"):
        check_consumer_compatible([old], needs_age, S.FULL_TRANSITIVE)
    check_consumer_compatible([old], SchemaData("STRING", b""), S.ALWAYS_COMPATIBLE)


def test_producers_without_a_schema_when_validation_is_enforced() -> None:
    check_producer_without_schema(history(avro(BASE)), validation_enforced=False)
    check_producer_without_schema([], validation_enforced=True)
    check_producer_without_schema(history(avro(BASE), None), validation_enforced=True)
    with pytest.raises(IncompatibleSchema, match="Producers cannot connect or send message without a schema"):
        check_producer_without_schema(history(avro(BASE)), validation_enforced=True)


# -- where the strategy comes from ---------------------------------------------------------------
def test_strategy_resolution_topic_then_namespace_then_broker() -> None:
    unset = TopicPolicies()
    assert schema_compatibility_strategy(unset, Policies(), BrokerConfig()) == "FULL"
    broker = BrokerConfig(schemaCompatibilityStrategy="BACKWARD")
    assert schema_compatibility_strategy(unset, Policies(), broker) == "BACKWARD"
    undefined = Policies(schema_compatibility_strategy="UNDEFINED")
    assert schema_compatibility_strategy(unset, undefined, broker) == "BACKWARD"
    namespace = Policies(schema_compatibility_strategy="FORWARD_TRANSITIVE")
    assert schema_compatibility_strategy(unset, namespace, broker) == "FORWARD_TRANSITIVE"
    topic = TopicPolicies(schemaCompatibilityStrategy="ALWAYS_COMPATIBLE")
    assert schema_compatibility_strategy(topic, namespace, broker) == "ALWAYS_COMPATIBLE"
    topic_undefined = TopicPolicies(schemaCompatibilityStrategy="UNDEFINED")
    assert schema_compatibility_strategy(topic_undefined, namespace, broker) == "FORWARD_TRANSITIVE"
    deprecated = Policies(schema_auto_update_compatibility_strategy="AutoUpdateDisabled")
    assert schema_compatibility_strategy(unset, deprecated, broker) == "ALWAYS_INCOMPATIBLE"


def test_validation_is_enforced_by_the_broker_or_the_namespace() -> None:
    assert not schema_validation_enforced(Policies(), BrokerConfig())
    assert schema_validation_enforced(Policies(schema_validation_enforced=True), BrokerConfig())
    assert schema_validation_enforced(Policies(schema_validation_enforced=False),
                                      BrokerConfig(isSchemaValidationEnforced=True))


def test_strategy_names_match_the_config_keys_values() -> None:
    assert tuple(s.value for s in S) == ("UNDEFINED", *LIFECYCLE_CHOICES["schema"])
    with pytest.raises(ValueError, match="schemaCompatibilityStrategy"):
        BrokerConfig().with_overrides({"schemaCompatibilityStrategy": "SOMETIMES"})


@pytest.mark.parametrize(("schema", "reason"), [
    (SchemaData("INT32", b"x"), "length of schema data should be zero, but 1 bytes is found"),
    (SchemaData("STRING", b"x"), "Invalid schema definition data for string schema : 'x'"),
    (SchemaData("AUTO_CONSUME", b""), "Schema AUTO_CONSUME is a client-side schema type"),
    (SchemaData("AVRO", b"{"), "Invalid schema definition data for AVRO schema: not JSON"),
    (SchemaData("AVRO", b'{"type": "record", "name": "R"}'), "not an Avro schema"),
    (SchemaData("JSON", b"[1]"), "Invalid schema definition data for JSON schema"),
    (SchemaData("PROTOBUF_NATIVE", b"{}"), "fileDescriptorSet and rootMessageTypeName"),
    (SchemaData("KEY_VALUE", encode_key_value(b"", b"{")), "for AVRO schema"),
    (SchemaData("KEY_VALUE", b"\x00"), "Invalid KEY_VALUE schema data"),
])
def test_definitions_that_are_not_of_their_type_are_refused(schema: SchemaData, reason: str) -> None:
    if schema.schema_type == "KEY_VALUE":
        schema = SchemaData("KEY_VALUE", schema.data, {"key.schema.type": "STRING", "value.schema.type": "AVRO"})
    with pytest.raises(InvalidSchemaData, match=re.escape(reason)):
        validate(schema)
    with pytest.raises(InvalidSchemaData):
        version_to_add([], schema, S.FULL, allow_auto_update=True)


def test_valid_definitions_pass() -> None:
    for schema in (SchemaData("STRING", b""), SchemaData("STRING", b"null"), SchemaData("NONE", b"raw"), avro(BASE),
                   avro(BASE, "JSON"), protobuf_native("a.B"),
                   SchemaData("JSON", b'{"type": "object", "id": "urn:x"}'),
                   key_value(SchemaData("STRING", b""), avro(BASE))):
        validate(schema)


# -- properties of the resolution rules -----------------------------------------------------------
PRIMITIVE_DEFAULTS = {"int": 0, "long": 0, "float": 0.0, "double": 0.0, "string": "", "bytes": "", "boolean": False}
field_types = st.sampled_from(sorted(PRIMITIVE_DEFAULTS)) | st.lists(
    st.sampled_from(["int", "string", "boolean"]), min_size=1, max_size=3, unique=True).map(lambda b: ["null", *b])
records = st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True), field_types, min_size=1,
                          max_size=6).map(lambda fields: record(*(field(n, t) for n, t in fields.items())))


def parsed(schema: dict[str, Any]) -> Any:
    return parse(json.dumps(schema).encode())


@settings(max_examples=60, deadline=None)
@given(records)
def test_every_schema_reads_itself(schema: dict[str, Any]) -> None:
    assert read_problem(parsed(schema), parsed(schema)) is None


@settings(max_examples=60, deadline=None)
@given(records, st.sampled_from(sorted(PRIMITIVE_DEFAULTS)))
def test_a_field_added_with_a_default_is_fully_compatible(schema: dict[str, Any], kind: str) -> None:
    grown = {**schema, "fields": [*schema["fields"], field("zz_added", kind, default=PRIMITIVE_DEFAULTS[kind])]}
    check_compatible([avro(schema)], avro(grown), S.FULL_TRANSITIVE)
    without_default = {**schema, "fields": [*schema["fields"], field("zz_added", kind)]}
    check_compatible([avro(schema)], avro(without_default), S.FORWARD)
    with pytest.raises(IncompatibleSchema, match="zz_added"):
        check_compatible([avro(schema)], avro(without_default), S.BACKWARD)

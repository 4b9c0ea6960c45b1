"""``/admin/v2/schemas``: a topic's schemas (Pulsar's ``SchemasResource`` v2).

The JSON shapes are Pulsar's: ``GetSchemaResponse`` (version, type, timestamp, data,
properties), ``GetAllVersionsSchemaResponse`` (``getSchemaResponses``),
``PostSchemaPayload`` (type, schema, properties) in, ``PostSchemaResponse``
(``{"version": {"version": N}}``), ``DeleteSchemaResponse`` and
``IsCompatibilityResponse``; ``POST .../version`` answers a schema's version (-1 when
the topic does not have it). A KEY_VALUE schema travels as the JSON text
``{"key": <key schema>, "value": <value schema>}``, as Pulsar's admin converts it.
Partitions share their partitioned topic's schemas.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

from fastapi import APIRouter, Body
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from magnetar.admin.admin_broker import AdminBroker
from magnetar.admin.common import Broker, namespace_in, topic_name
from magnetar.admin.errors import bad_request, not_found
from magnetar.admin.store_access import StoreRules, in_rules, shared_store
from magnetar.core.errors import IncompatibleSchema
from magnetar.core.names import TopicName
from magnetar.core.schemas import versions as schema_versions
from magnetar.core.schemas.schema_data import (
    REST_TYPE_ALIASES,
    SCHEMA_TYPE_NUMBERS,
    SchemaData,
    encode_key_value,
    key_value_parts,
    schema_id,
)
from magnetar.core.schemas.validation import validate
from magnetar.core.schemas.versions import StoredVersion

router = APIRouter(prefix="/admin/v2/schemas", tags=["schemas"])
TOPIC = "/{tenant}/{namespace}/{topic}"
#: types a client may upload (AUTO_CONSUME and EXTERNAL are client-side notions)
_UPLOADABLE = sorted(set(SCHEMA_TYPE_NUMBERS) - {"AUTO_CONSUME", "EXTERNAL"} | set(REST_TYPE_ALIASES))


class PostSchemaPayload(BaseModel):
    """Pulsar's ``PostSchemaPayload``."""

    model_config = ConfigDict(extra="forbid")
    type: StrictStr = Field(description="the schema type, e.g. AVRO, JSON, STRING, KEY_VALUE")
    schema_: StrictStr = Field("", alias="schema", description="the schema definition (JSON text for AVRO/JSON)")
    properties: dict[StrictStr, StrictStr] = Field(default_factory=dict)


async def _require_topic(broker: AdminBroker, tenant: str, namespace: str, topic: str) -> TopicName:
    """The topic's name, 404 without its namespace. On a cluster's broker, what the schema
    registry and the compatibility strategy then read on the loop (the topic's schemas and
    policies) is read here first, off the loop, so those reads find it in the store's cache."""
    name = topic_name("persistent", tenant, namespace, topic)
    warm = shared_store(broker)

    def check(rules: StoreRules) -> None:
        namespace_in(rules.store, name.namespace_name)
        if warm:
            rules.policies.topic_policies(name)
            rules.policies.policies_of(name)
            rules.store.get_schemas(schema_id(name))
    await in_rules(broker, check)
    return name


def schema_from_payload(payload: PostSchemaPayload) -> SchemaData:
    """The schema a payload describes; 400 with the reason when it cannot be one."""
    kind = REST_TYPE_ALIASES.get(payload.type, payload.type)
    if kind not in _UPLOADABLE:
        raise bad_request(f"Invalid schema type {payload.type!r}: use one of {', '.join(_UPLOADABLE)}")
    if kind == "KEY_VALUE":
        return SchemaData(kind, _key_value_data(payload.schema_), payload.properties)
    if kind in ("AVRO", "JSON", "PROTOBUF", "PROTOBUF_NATIVE"):
        _require_json(kind, payload.schema_)
    return SchemaData(kind, payload.schema_.encode(), payload.properties)


def _require_json(kind: str, text: str) -> None:
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError as exc:
        raise bad_request(f"Invalid {kind} schema: the schema field must be a JSON definition ({exc})") from None
    if not isinstance(loaded, dict | str | list):
        raise bad_request(f"Invalid {kind} schema: the schema field must be a JSON object")


def _key_value_data(text: str) -> bytes:
    """Pulsar's ``convertKeyValueDataStringToSchemaInfoSchema``: JSON {"key", "value"}."""
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError as exc:
        raise bad_request(f"Invalid KEY_VALUE schema: expected JSON {{\"key\": ..., \"value\": ...}} ({exc})") \
            from None
    if not isinstance(loaded, dict) or "key" not in loaded or "value" not in loaded:
        raise bad_request('Invalid KEY_VALUE schema: expected JSON {"key": ..., "value": ...}')
    return encode_key_value(_definition(loaded["key"]), _definition(loaded["value"]))


def _definition(part: Any) -> bytes:
    return part.encode() if isinstance(part, str) else json.dumps(part).encode()


def _data_text(schema: SchemaData) -> str:
    """The ``data`` field of ``GetSchemaResponse``; a KEY_VALUE schema as JSON key/value."""
    if schema.schema_type != "KEY_VALUE":
        return schema.data.decode("utf-8", errors="replace")
    key, value = key_value_parts(schema)
    return json.dumps({"key": _as_json(key.data), "value": _as_json(value.data)}, separators=(",", ":"))


def _as_json(data: bytes) -> Any:
    text = data.decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _response(stored: StoredVersion) -> dict[str, Any]:
    return {"version": stored.version, "type": stored.schema.schema_type, "timestamp": stored.timestamp_ms,
            "data": _data_text(stored.schema), "properties": dict(stored.schema.properties)}


@router.get(TOPIC + "/schema", summary="Get the schema of a topic")
async def get_schema(broker: Broker, tenant: str, namespace: str, topic: str,
                     authoritative: bool = False) -> dict[str, Any]:
    name = await _require_topic(broker, tenant, namespace, topic)
    found = schema_versions.latest(broker.schemas.history(name))
    if found is None:
        raise not_found("Schema not found")
    return _response(found)


@router.get(TOPIC + "/schema/{version}", summary="Get the schema of a topic at a given version")
async def get_schema_version(broker: Broker, tenant: str, namespace: str, topic: str, version: str,
                             authoritative: bool = False) -> dict[str, Any]:
    name = await _require_topic(broker, tenant, namespace, topic)
    try:
        number = int(version)
    except ValueError:
        raise bad_request(f"Invalid schema version {version!r}: a version is a number") from None
    found = schema_versions.version_of(broker.schemas.history(name), number)
    if found is None:
        raise not_found("Schema not found")
    return _response(found)


@router.get(TOPIC + "/schemas", summary="Get every live schema version of a topic")
async def get_all_schemas(broker: Broker, tenant: str, namespace: str, topic: str,
                          authoritative: bool = False) -> dict[str, Any]:
    name = await _require_topic(broker, tenant, namespace, topic)
    live = schema_versions.live_versions(broker.schemas.history(name))
    return {"getSchemaResponses": [_response(v) for v in live]}


@router.post(TOPIC + "/schema", summary="Upload a schema (a new version if compatible)")
async def post_schema(broker: Broker, tenant: str, namespace: str, topic: str,
                      payload: Annotated[PostSchemaPayload, Body()], authoritative: bool = False) -> dict[str, Any]:
    name = await _require_topic(broker, tenant, namespace, topic)
    history = broker.schemas.history(name)
    schema = schema_from_payload(payload)
    found = schema_versions.version_to_add(history, schema, broker.topic_schemas.strategy(name), allow_auto_update=True)
    number = found if found is not None else broker.schemas.append(name, schema, broker.now_ms()).version
    await asyncio.wrap_future(broker.schemas.written())
    return {"version": {"version": number}}


@router.post(TOPIC + "/compatibility", status_code=202, summary="Test a schema's compatibility with the topic's")
async def test_compatibility(broker: Broker, tenant: str, namespace: str, topic: str,
                             payload: Annotated[PostSchemaPayload, Body()],
                             authoritative: bool = False) -> dict[str, Any]:
    name = await _require_topic(broker, tenant, namespace, topic)
    strategy = broker.topic_schemas.strategy(name)
    schema = schema_from_payload(payload)
    validate(schema)  # an invalid definition is a 422, not an answer
    try:
        schema_versions.check_compatibility(broker.schemas.history(name), schema, strategy)
    except IncompatibleSchema:
        return {"isCompatibility": False, "schemaCompatibilityStrategy": strategy.value}
    return {"isCompatibility": True, "schemaCompatibilityStrategy": strategy.value}


@router.post(TOPIC + "/version", summary="The version a schema has on the topic (-1: none)")
async def get_version_by_schema(broker: Broker, tenant: str, namespace: str, topic: str,
                                payload: Annotated[PostSchemaPayload, Body()], authoritative: bool = False) -> int:
    name = await _require_topic(broker, tenant, namespace, topic)
    found = schema_versions.find_version(broker.schemas.history(name), schema_from_payload(payload))
    return -1 if found is None else found


@router.delete(TOPIC + "/schema", summary="Delete a topic's schema (every version with force=true)")
async def delete_schema(broker: Broker, tenant: str, namespace: str, topic: str, authoritative: bool = False,
                        force: bool = False) -> dict[str, Any]:
    name = await _require_topic(broker, tenant, namespace, topic)
    marker = broker.topic_schemas.delete(name, force, broker.now_ms())
    await asyncio.wrap_future(broker.schemas.written())
    return {"version": -1 if marker is None else marker}

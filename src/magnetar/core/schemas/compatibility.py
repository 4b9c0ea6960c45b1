"""Whether a new schema may join a topic's schemas under a compatibility strategy:
Pulsar's ``SchemaRegistryServiceImpl`` checks and its per-type
``SchemaCompatibilityCheck`` classes.

- Non-transitive strategies compare with the latest version, transitive ones with every
  version since the last delete. ALWAYS_COMPATIBLE accepts anything.
- A type that differs from an existing version's is refused, whatever the type.
- AVRO (and JSON, whose definition is an Avro schema): Avro Java's schema validators
  (``avro_resolution``), as Pulsar's ``AvroSchemaBasedCompatibilityCheck`` builds them:
  BACKWARD asks that the new schema read what the old wrote (``canReadStrategy``),
  FORWARD the reverse (``canBeReadStrategy``), FULL both (``mutualReadStrategy``);
  ALWAYS_INCOMPATIBLE (and anything else) refuses (``NeverSchemaValidator``).
- KEY_VALUE: key and value types must match, then each side by its own type's rules.
- PROTOBUF_NATIVE: only the root message's full name may not change (Pulsar's
  ``ProtobufNativeSchemaCompatibilityCheck`` checks nothing else).
- Anything else (primitives, PROTOBUF): accepted unless ALWAYS_INCOMPATIBLE (Pulsar's
  ``SchemaCompatibilityCheck.DEFAULT``).

Messages are Pulsar's where it has them; Avro refusals add the field that failed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from magnetar.core.errors import IncompatibleSchema
from magnetar.core.schemas.avro_resolution import AvroSchema, InvalidAvroSchema, parse, read_problem
from magnetar.core.schemas.schema_data import SchemaCompatibilityStrategy as Strategy
from magnetar.core.schemas.schema_data import SchemaData, json_object, key_value_parts

_READ_NEW_WITH_OLD = {Strategy.FORWARD, Strategy.FORWARD_TRANSITIVE, Strategy.FULL, Strategy.FULL_TRANSITIVE}
_READ_OLD_WITH_NEW = {Strategy.BACKWARD, Strategy.BACKWARD_TRANSITIVE, Strategy.FULL, Strategy.FULL_TRANSITIVE}
#: consumer checks (Pulsar's ``checkConsumerCompatibility``): these compare with the latest as BACKWARD
_CONSUMER_AGAINST_LATEST = {Strategy.BACKWARD, Strategy.FORWARD, Strategy.FORWARD_TRANSITIVE, Strategy.FULL}


def check_compatible(existing: Sequence[SchemaData], new: SchemaData, strategy: Strategy) -> None:
    """Raise :class:`IncompatibleSchema` unless ``new`` may follow ``existing`` (oldest
    first, versions since the last delete) under ``strategy``."""
    if strategy == Strategy.ALWAYS_COMPATIBLE or not existing:
        return
    compared = list(existing) if strategy.transitive else [existing[-1]]
    for old in compared:
        if old.schema_type != new.schema_type:
            raise IncompatibleSchema(f"Incompatible schema: exists schema type {old.schema_type}, "
                                     f"new schema type {new.schema_type}")
    if not strategy.transitive and compared[0].same_definition(new):
        return
    _check_by_type(compared, new, strategy)


def check_consumer_compatible(existing: Sequence[SchemaData], new: SchemaData, strategy: Strategy) -> None:
    """A consumer's schema against a topic that has schemas: BACKWARD with the latest for
    the non-transitive strategies and FORWARD_TRANSITIVE, else ``strategy`` with all."""
    if strategy == Strategy.ALWAYS_COMPATIBLE:
        return
    if strategy in _CONSUMER_AGAINST_LATEST:
        check_compatible(existing[-1:], new, Strategy.BACKWARD)
    else:
        check_compatible(existing, new, strategy)


def _check_by_type(existing: Sequence[SchemaData], new: SchemaData, strategy: Strategy) -> None:
    kind = new.schema_type
    if kind == "AVRO":
        _check_avro(existing, new, strategy)
    elif kind == "JSON":
        _check_json(existing, new, strategy)
    elif kind == "KEY_VALUE":
        _check_key_value(existing, new, strategy)
    elif kind == "PROTOBUF_NATIVE":
        _check_protobuf_native(existing, new, strategy)
    elif strategy == Strategy.ALWAYS_INCOMPATIBLE:
        raise IncompatibleSchema("Schema compatibility strategy is ALWAYS_INCOMPATIBLE")


def _check_avro(existing: Sequence[SchemaData], new: SchemaData, strategy: Strategy) -> None:
    try:
        olds = [parse(old.data) for old in existing]
        candidate = parse(new.data)
    except InvalidAvroSchema as exc:
        raise IncompatibleSchema(f"Invalid schema definition: {exc}") from None
    for old in reversed(olds):
        problem = _avro_problem(old, candidate, strategy)
        if problem is not None:
            raise IncompatibleSchema(
                f"Error during schema compatibility check with strategy {strategy.value}: "
                f"org.apache.avro.SchemaValidationException: {problem}")


def _avro_problem(old: AvroSchema, new: AvroSchema, strategy: Strategy) -> str | None:
    """Avro's ``SchemaValidationException`` text, on one line, with the field that failed."""
    if strategy not in _READ_NEW_WITH_OLD | _READ_OLD_WITH_NEW:
        return f"Unable to read schema: {_compact(old)} using schema: {_compact(new)} (strategy {strategy.value})"
    checks = []
    if strategy in _READ_OLD_WITH_NEW:
        checks.append((new, old))
    if strategy in _READ_NEW_WITH_OLD:
        checks.append((old, new))
    for reader, writer in checks:
        problem = read_problem(reader, writer)
        if problem is not None:
            return f"Unable to read schema: {_compact(writer)} using schema: {_compact(reader)} ({problem})"
    return None


def _compact(schema: AvroSchema) -> str:
    return json.dumps(json.loads(schema.text), separators=(",", ":"))


def _check_json(existing: Sequence[SchemaData], new: SchemaData, strategy: Strategy) -> None:
    """JSON schemas carry an Avro definition; the old JSON-Schema format (Jackson's) is
    tolerated as Pulsar's ``JsonSchemaCompatibilityCheck`` does when switching formats."""
    if _is_avro(new) and all(_is_avro(old) for old in existing):
        _check_avro(existing, new, strategy)
        return
    for old in existing:
        _check_legacy_json(old, new)


def _check_legacy_json(old: SchemaData, new: SchemaData) -> None:
    old_avro, new_avro = _is_avro(old), _is_avro(new)
    if (old_avro and json_object(new.data) is not None) or (not old_avro and new_avro):
        return
    old_json, new_json = json_object(old.data), json_object(new.data)
    if old_json is None:
        return  # an unreadable stored definition is overwritten, as Pulsar does
    if new_json is None:
        raise IncompatibleSchema("Unknown schema format")
    if old_json.get("id") != new_json.get("id"):
        raise IncompatibleSchema(f"Incompatible Schema from {old.data.decode(errors='replace')} + "
                                 f"to {new.data.decode(errors='replace')}")


def _is_avro(schema: SchemaData) -> bool:
    try:
        parse(schema.data)
    except InvalidAvroSchema:
        return False
    return True


def _check_key_value(existing: Sequence[SchemaData], new: SchemaData, strategy: Strategy) -> None:
    new_key, new_value = key_value_parts(new)
    keys, values = [], []
    for old in existing:
        old_key, old_value = key_value_parts(old)
        if (old_key.schema_type, old_value.schema_type) != (new_key.schema_type, new_value.schema_type):
            raise IncompatibleSchema(
                "Key schemas or Value schemas are different schema type, from key schema type is "
                f"{old_key.schema_type} and to key schema is {new_key.schema_type}, from value schema is "
                f"{old_value.schema_type} and to value schema is {new_value.schema_type}")
        keys.append(old_key)
        values.append(old_value)
    _check_by_type(keys, new_key, strategy)
    _check_by_type(values, new_value, strategy)


def _check_protobuf_native(existing: Sequence[SchemaData], new: SchemaData, strategy: Strategy) -> None:
    if strategy not in _READ_NEW_WITH_OLD | _READ_OLD_WITH_NEW:
        raise IncompatibleSchema("Unknown SchemaCompatibilityStrategy.")
    root = _protobuf_root(new)
    for old in existing:
        if _protobuf_root(old) != root:
            raise IncompatibleSchema("Protobuf root message isn't allow change!")


def _protobuf_root(schema: SchemaData) -> str:
    """The root message's full name of a ``ProtobufNativeSchemaData`` definition."""
    loaded = json_object(schema.data)
    root = None if loaded is None else loaded.get("rootMessageTypeName")
    if not isinstance(root, str):
        raise IncompatibleSchema("Invalid PROTOBUF_NATIVE schema: no rootMessageTypeName")
    return root

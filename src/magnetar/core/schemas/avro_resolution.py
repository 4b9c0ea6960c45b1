"""Whether data written with one Avro schema can be read with another: the schema
resolution rules of the Avro specification ("Schema Resolution"), as Avro's Java
``SchemaCompatibility.checkReaderWriterCompatibility`` applies them and Pulsar's
``AvroSchemaBasedCompatibilityCheck`` relies on.

Parsing and name resolution are fastavro's (``parse_schema``); this module walks two
parsed schemas side by side. The rules, reader against writer:

- same primitive type: yes; int -> long, float, double; long -> float, double;
  float -> double; string <-> bytes (promotions).
- records: names match (or the writer's full name is one of the reader's aliases);
  every reader field is found in the writer by name or alias, with a readable type,
  or has a default.
- enums: names match; every writer symbol is a reader symbol, unless the reader has a
  default symbol.
- fixed: names and sizes match. Arrays and maps: their items and values.
- a writer union: every branch readable; a reader union: some branch reads the writer.

Logical types are read as their underlying type, as Avro's Java check does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

from fastavro import parse_schema
from fastavro.schema import SchemaParseException, UnknownType

#: a parsed schema: a type name, a list (union) or a dict (complex or annotated type)
Parsed = str | list["Parsed"] | dict[str, object]

_PROMOTIONS: dict[str, frozenset[str]] = {
    "long": frozenset({"int"}),
    "float": frozenset({"int", "long"}),
    "double": frozenset({"int", "long", "float"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}
_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


class InvalidAvroSchema(ValueError):
    """The text is not an Avro schema; the message says why."""


@dataclass(frozen=True)
class AvroSchema:
    """A parsed schema with the named types it defines, so references can be followed."""

    root: Parsed
    named: Mapping[str, Parsed]
    text: str


def parse(definition: bytes) -> AvroSchema:
    """Parse an Avro schema definition (JSON text), or raise :class:`InvalidAvroSchema`."""
    try:
        text = definition.decode("utf-8")
        loaded = json.loads(text)
        named: dict[str, dict[str, object]] = {}
        root = parse_schema(loaded, named_schemas=named, _write_hint=False, _ignore_default_error=True)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidAvroSchema(f"not JSON: {exc}") from None
    except (SchemaParseException, UnknownType, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise InvalidAvroSchema(f"not an Avro schema: {exc}") from None
    unnamed = _record_without_fields(loaded)
    if unnamed is not None:
        raise InvalidAvroSchema(f"not an Avro schema: record {unnamed} has no fields")
    return AvroSchema(cast(Parsed, root), cast(dict[str, Parsed], named), text)


def _record_without_fields(loaded: object) -> str | None:
    """fastavro takes a record without ``fields`` as empty; Avro (and so Pulsar) refuses it."""
    if isinstance(loaded, list):
        return next((found for item in loaded if (found := _record_without_fields(item)) is not None), None)
    if not isinstance(loaded, dict):
        return None
    if loaded.get("type") == "record" and not isinstance(loaded.get("fields"), list):
        return str(loaded.get("name"))
    children = [loaded.get(key) for key in ("type", "items", "values")] + list(loaded.get("fields") or [])
    return _record_without_fields(children)


def same_schema(a: AvroSchema, b: AvroSchema) -> bool:
    """Equal once parsed (whitespace, key order and namespace spelling aside)."""
    return a.root == b.root and dict(a.named) == dict(b.named)


def read_problem(reader: AvroSchema, writer: AvroSchema) -> str | None:
    """Why data written with ``writer`` cannot be read with ``reader``; None when it can."""
    return _Resolver(reader.named, writer.named).problem(reader.root, writer.root, "")


class _Resolver:
    def __init__(self, reader_named: Mapping[str, Parsed], writer_named: Mapping[str, Parsed]) -> None:
        self.reader_named = reader_named
        self.writer_named = writer_named
        #: pairs of named types being compared: a recursive type is assumed readable on a revisit
        self.visiting: set[tuple[str, str]] = set()

    def problem(self, reader: Parsed, writer: Parsed, path: str) -> str | None:
        reader = _deref(reader, self.reader_named)
        writer = _deref(writer, self.writer_named)
        if isinstance(writer, list):
            for branch in writer:
                found = self.problem(reader, branch, path)
                if found is not None:
                    return found
            return None
        if isinstance(reader, list):
            if any(self.problem(branch, writer, path) is None for branch in reader):
                return None
            return f"{_where(path)}the reader's union {_describe(reader)} has no branch that reads {_describe(writer)}"
        reader_type, writer_type = _type_of(reader), _type_of(writer)
        if reader_type != writer_type:
            if writer_type in _PROMOTIONS.get(reader_type, frozenset()):
                return None
            return f"{_where(path)}{writer_type} cannot be read as {reader_type}"
        if reader_type in _PRIMITIVES:
            return None
        assert isinstance(reader, dict) and isinstance(writer, dict)
        return self._complex(reader_type, reader, writer, path)

    def _complex(self, kind: str, reader: dict[str, object], writer: dict[str, object], path: str) -> str | None:
        if kind == "array":
            return self.problem(cast(Parsed, reader["items"]), cast(Parsed, writer["items"]), f"{path}[]")
        if kind == "map":
            return self.problem(cast(Parsed, reader["values"]), cast(Parsed, writer["values"]), f"{path}{{}}")
        if not _names_match(reader, writer):
            return f"{_where(path)}{kind} {writer['name']} cannot be read as {reader['name']} (names differ)"
        if kind == "fixed":
            if reader.get("size") != writer.get("size"):
                return (f"{_where(path)}fixed {reader['name']} has size {reader.get('size')}, "
                        f"written {writer.get('size')}")
            return None
        if kind == "enum":
            return _enum_problem(reader, writer, path)
        pair = (str(reader["name"]), str(writer["name"]))
        if pair in self.visiting:
            return None
        self.visiting.add(pair)
        try:
            return self._record_problem(reader, writer, path)
        finally:
            self.visiting.discard(pair)

    def _record_problem(self, reader: dict[str, object], writer: dict[str, object], path: str) -> str | None:
        written = {str(f["name"]): f for f in _fields(writer)}
        for field in _fields(reader):
            name = str(field["name"])
            source = written.get(name) or next(
                (written[alias] for alias in _aliases(field) if alias in written), None)
            field_path = f"{path}.{name}" if path else name
            if source is None:
                if "default" not in field:
                    return f"field '{field_path}' is missing in the writer's schema and has no default"
                continue
            found = self.problem(cast(Parsed, field["type"]), cast(Parsed, source["type"]), field_path)
            if found is not None:
                return found
        return None


def _deref(schema: Parsed, named: Mapping[str, Parsed]) -> Parsed:
    while isinstance(schema, str) and schema not in _PRIMITIVES and schema in named:
        schema = named[schema]
    return schema


def _type_of(schema: Parsed) -> str:
    """The Avro type; an annotated primitive (logical type) is its underlying type."""
    if isinstance(schema, str):
        return schema
    if isinstance(schema, dict):
        kind = schema["type"]
        return _type_of(cast(Parsed, kind)) if not isinstance(kind, str) or kind in _PRIMITIVES else kind
    return "union"


def _names_match(reader: dict[str, object], writer: dict[str, object]) -> bool:
    """Avro's ``schemaNameEquals``: same unqualified name, or the writer's full name is
    one of the reader's aliases."""
    reader_name, writer_name = str(reader["name"]), str(writer["name"])
    if reader_name.rsplit(".", 1)[-1] == writer_name.rsplit(".", 1)[-1]:
        return True
    return writer_name in _aliases(reader)


def _aliases(schema: Mapping[str, object]) -> list[str]:
    aliases = schema.get("aliases") or []
    return [str(alias) for alias in cast(list[object], aliases)]


def _fields(record: dict[str, object]) -> list[dict[str, object]]:
    return cast(list[dict[str, object]], record.get("fields") or [])


def _enum_problem(reader: dict[str, object], writer: dict[str, object], path: str) -> str | None:
    if "default" in reader:
        return None
    symbols = set(cast(list[str], reader.get("symbols") or []))
    missing = [s for s in cast(list[str], writer.get("symbols") or []) if s not in symbols]
    if missing:
        return f"{_where(path)}enum {reader['name']} lacks the written symbols {missing} and has no default"
    return None


def _where(path: str) -> str:
    return f"field '{path}': " if path else ""


def _describe(schema: Parsed) -> str:
    return json.dumps(schema, default=str)

"""Whether data written with one Avro schema can be read with another, decided as Avro
Java's schema validators decide it (``SchemaValidatorBuilder`` strategies, whose
``canRead`` asks ``ResolvingGrammarGenerator`` for the resolving grammar of a writer and
a reader and refuses when it holds an error). Pulsar's
``AvroSchemaBasedCompatibilityCheck`` uses those validators for every strategy.

Parsing and name resolution are fastavro's (``parse_schema``); this module walks two
parsed schemas side by side as Avro's ``Resolver`` does, after renaming the writer's
types and fields by the reader's aliases (``Schema.applyAliases``):

- a writer union: every branch is resolved against the reader (branch by branch when
  the two unions are equivalent, which never fails).
- same type: primitives read; fixed types need the same unqualified name and size;
  enums the same unqualified name (a writer symbol the reader lacks is not an error
  here: it fails only when such a value is read); arrays and maps their items and
  values. Records are not compared by name at all: each reader field the writer lacks
  needs a default (one that fits the field's type), each field both have is resolved.
- a reader union: the first branch of the writer's type (for a named type: the same
  full name, else for a record the first branch, or the last of the same unqualified
  name, whose fields resolve without a direct error), else the first branch the
  writer's type promotes to; none is an error.
- otherwise the promotions: int -> long, float, double; long -> float, double;
  float -> double; string <-> bytes. Anything else is an error.

Logical types are read as their underlying type, as Avro's Java check does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

from fastavro import parse_schema
from fastavro.schema import SchemaParseException, UnknownType

from magnetar.core.schemas.avro_defaults import default_problem
from magnetar.core.schemas.avro_types import NAMED, PRIMITIVES, Parsed, deref, type_of

#: what each writer type may be read as besides itself, in Avro's order of preference
_PROMOTIONS: dict[str, tuple[str, ...]] = {
    "int": ("long", "float", "double"),
    "long": ("float", "double"),
    "float": ("double",),
    "string": ("bytes",),
    "bytes": ("string",),
}


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
    """Why data written with ``writer`` cannot be read with ``reader`` (the first error of
    the resolution); None when it can."""
    resolver = _Resolver(reader, writer)
    return _first_error(resolver.resolve(writer.root, reader.root, ""))


@dataclass(eq=False)
class _Action:
    """One step of a resolution (Avro's ``Resolver.Action``); ``error`` is set for an
    ``ErrorAction``. A record's action is shared by every place the same pair of records
    meets, so the steps form a graph, which recursive types make cyclic."""

    error: str | None = None
    parts: list[_Action] = field(default_factory=list)


_READS = _Action()


def _error(path: str, message: str) -> _Action:
    return _Action(error=f"{_where(path)}{message}")


def _first_error(root: _Action) -> str | None:
    seen: set[int] = set()
    stack = [root]
    while stack:
        action = stack.pop()
        if id(action) in seen:
            continue
        seen.add(id(action))
        if action.error is not None:
            return action.error
        stack.extend(reversed(action.parts))
    return None


class _Resolver:
    def __init__(self, reader: AvroSchema, writer: AvroSchema) -> None:
        self.reader_named = reader.named
        self.writer_named = writer.named
        self.renamed, self.field_renames = _reader_aliases(reader.named)
        #: record actions by (writer record, reader record) full names
        self.records: dict[tuple[str, str], _Action] = {}

    def resolve(self, writer: Parsed, reader: Parsed, path: str) -> _Action:
        writer = deref(writer, self.writer_named)
        reader = deref(reader, self.reader_named)
        writer_type, reader_type = type_of(writer), type_of(reader)
        if writer_type == "union":
            return self._writer_union(cast(list[Parsed], writer), reader, path)
        if writer_type == reader_type:
            return self._same_type(writer_type, writer, reader, path)
        if reader_type == "union":
            return self._reader_union(writer, cast(list[Parsed], reader), path)
        if reader_type in _PROMOTIONS.get(writer_type, ()):
            return _READS
        return _error(path, f"Found {self._writer_full_name(writer)}, expecting {_full_name(reader)}")

    def _same_type(self, kind: str, writer: Parsed, reader: Parsed, path: str) -> _Action:
        if kind in PRIMITIVES:
            return _READS
        w, r = cast(dict[str, object], writer), cast(dict[str, object], reader)
        if kind == "array":
            return _Action(parts=[self.resolve(cast(Parsed, w["items"]), cast(Parsed, r["items"]), f"{path}[]")])
        if kind == "map":
            return _Action(parts=[self.resolve(cast(Parsed, w["values"]), cast(Parsed, r["values"]), f"{path}{{}}")])
        if kind == "record":
            return self._record(w, r, path)
        written, expected = self._writer_full_name(w), str(r["name"])
        if _short(written) != _short(expected):
            return _error(path, f"Found {written}, expecting {expected}")
        if kind == "fixed" and w.get("size") != r.get("size"):
            return _error(path, f"Found {written}, expecting {expected} (size {w.get('size')}, "
                                f"expecting {r.get('size')})")
        return _READS  # an enum: symbols are matched when a value is read, never refused here

    def _record(self, writer: dict[str, object], reader: dict[str, object], path: str) -> _Action:
        key = (str(writer["name"]), str(reader["name"]))
        known = self.records.get(key)
        if known is not None:
            return known
        action = self.records[key] = _Action()
        written_name = self._writer_full_name(writer)
        renames = self.field_renames.get(written_name, {})
        reader_fields = {str(f["name"]): f for f in _fields(reader)}
        written: set[str] = set()
        for writer_field in _fields(writer):
            name = renames.get(str(writer_field["name"]), str(writer_field["name"]))
            written.add(name)
            reader_field = reader_fields.get(name)
            if reader_field is not None:
                action.parts.append(self.resolve(cast(Parsed, writer_field["type"]),
                                                 cast(Parsed, reader_field["type"]), _join(path, name)))
        for name, reader_field in reader_fields.items():
            if name in written:
                continue
            if "default" not in reader_field:
                missing = self.records[key] = _error(
                    path, f"Found {written_name}, expecting {reader['name']}, missing required field {name}")
                return missing
            problem = default_problem(cast(Parsed, reader_field["type"]), reader_field["default"],
                                      self.reader_named)
            if problem is not None:
                action.parts.append(_error(_join(path, name), f"invalid default value: {problem}"))
        return action

    def _writer_union(self, writer: list[Parsed], reader: Parsed, path: str) -> _Action:
        if self._union_equivalent(writer, reader, {}):
            return _READS
        return _Action(parts=[self.resolve(branch, reader, path) for branch in writer])

    def _reader_union(self, writer: Parsed, reader: list[Parsed], path: str) -> _Action:
        index = self._first_matching_branch(writer, reader, path)
        if index < 0:
            return _error(path, f"Found {self._writer_full_name(writer)}, expecting union {_describe(reader)}")
        return _Action(parts=[self.resolve(writer, reader[index], path)])

    def _first_matching_branch(self, writer: Parsed, reader: list[Parsed], path: str) -> int:
        """Avro's ``ReaderUnion.firstMatchingBranch``."""
        kind = type_of(writer)
        branches = [deref(branch, self.reader_named) for branch in reader]
        structure_match = -1
        for index, branch in enumerate(branches):
            if type_of(branch) != kind:
                continue
            if kind not in NAMED:
                return index
            written, candidate = self._writer_full_name(writer), _full_name(branch)
            if written == candidate:
                return index
            if kind == "record" and not _direct_error(
                    self._record(cast(dict[str, object], writer), cast(dict[str, object], branch), path)):
                if structure_match < 0 or _short(written) == _short(candidate):
                    structure_match = index
        if structure_match >= 0:
            return structure_match
        promotions = _PROMOTIONS.get(kind, ())
        return next((index for index, branch in enumerate(branches) if type_of(branch) in promotions), -1)

    def _union_equivalent(self, writer: Parsed, reader: Parsed, seen: dict[tuple[str, str], bool]) -> bool:
        """Avro's ``Resolver.unionEquiv``: the same shape, names and symbols throughout."""
        writer = deref(writer, self.writer_named)
        reader = deref(reader, self.reader_named)
        kind = type_of(writer)
        if kind != type_of(reader):
            return False
        if kind in PRIMITIVES:
            return True
        if kind == "union":
            w_branches, r_branches = cast(list[Parsed], writer), cast(list[Parsed], reader)
            return len(w_branches) == len(r_branches) and all(
                self._union_equivalent(w, r, seen) for w, r in zip(w_branches, r_branches, strict=True))
        w, r = cast(dict[str, object], writer), cast(dict[str, object], reader)
        if kind == "array":
            return self._union_equivalent(cast(Parsed, w["items"]), cast(Parsed, r["items"]), seen)
        if kind == "map":
            return self._union_equivalent(cast(Parsed, w["values"]), cast(Parsed, r["values"]), seen)
        written_name = self._writer_full_name(w)
        if _short(written_name) != _short(str(r["name"])):
            return False
        if kind == "fixed":
            return w.get("size") == r.get("size")
        if kind == "enum":
            return w.get("symbols") == r.get("symbols")
        key = (str(w["name"]), str(r["name"]))
        if key not in seen:
            seen[key] = True
            renames = self.field_renames.get(written_name, {})
            w_fields, r_fields = _fields(w), _fields(r)
            seen[key] = len(w_fields) == len(r_fields) and all(
                renames.get(str(wf["name"]), str(wf["name"])) == str(rf["name"])
                and self._union_equivalent(cast(Parsed, wf["type"]), cast(Parsed, rf["type"]), seen)
                for wf, rf in zip(w_fields, r_fields, strict=True))
        return seen[key]

    def _writer_full_name(self, writer: Parsed) -> str:
        """A writer type's full name once renamed by the reader's aliases (for a named type)."""
        name = _full_name(writer)
        return self.renamed.get(name, name) if type_of(writer) in NAMED else name


def _reader_aliases(named: Mapping[str, Parsed]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """Avro's ``Schema.getAliases`` over the reader: the writer full names its named types
    answer to, and per record the writer field names its fields answer to."""
    renamed: dict[str, str] = {}
    field_renames: dict[str, dict[str, str]] = {}
    for full_name, schema in named.items():
        if not isinstance(schema, dict):
            continue
        namespace = full_name.rpartition(".")[0]
        for alias in _aliases(schema):
            qualified = alias if "." in alias or not namespace else f"{namespace}.{alias}"
            renamed[qualified] = full_name
        if schema.get("type") == "record":
            fields = {alias: str(f["name"]) for f in _fields(schema) for alias in _aliases(f)}
            if fields:
                field_renames[full_name] = fields
    return renamed, field_renames


def _direct_error(action: _Action) -> bool:
    """Avro's ``hasMatchError``: the record's action, or one of its fields' own, is an error."""
    return action.error is not None or any(part.error is not None for part in action.parts)


def _full_name(schema: Parsed) -> str:
    """Avro's ``getFullName``: a named type's full name, else its type's name."""
    if isinstance(schema, dict) and type_of(schema) in NAMED:
        return str(schema["name"])
    return type_of(schema)


def _short(full_name: str) -> str:
    return full_name.rpartition(".")[2]


def _aliases(schema: Mapping[str, object]) -> list[str]:
    aliases = schema.get("aliases") or []
    return [str(alias) for alias in cast(list[object], aliases)]


def _fields(record: Mapping[str, object]) -> list[dict[str, object]]:
    return cast(list[dict[str, object]], record.get("fields") or [])


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _where(path: str) -> str:
    return f"field '{path}': " if path else ""


def _describe(schema: Parsed) -> str:
    return json.dumps(schema, default=str)

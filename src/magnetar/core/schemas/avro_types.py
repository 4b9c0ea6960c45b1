"""Avro schemas as fastavro's ``parse_schema`` leaves them: the shapes and the two
questions every walk over them asks (what a named reference stands for, what type a
node is)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

#: a parsed schema: a type name, a list (union) or a dict (complex or annotated type)
Parsed = str | list["Parsed"] | dict[str, object]

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "enum", "fixed"})


def deref(schema: Parsed, named: Mapping[str, Parsed]) -> Parsed:
    """The definition a named reference stands for (anything else as it is)."""
    while isinstance(schema, str) and schema not in PRIMITIVES and schema in named:
        schema = named[schema]
    return schema


def type_of(schema: Parsed) -> str:
    """The Avro type ("union" for a list); an annotated primitive (logical type) is its
    underlying type."""
    if isinstance(schema, str):
        return schema
    if isinstance(schema, dict):
        kind = schema["type"]
        return type_of(cast(Parsed, kind)) if not isinstance(kind, str) or kind in PRIMITIVES else kind
    return "union"

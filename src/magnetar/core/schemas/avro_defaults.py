"""Whether a field's default value can stand in for data the writer did not write.

When a reader field is missing from the writer's schema, Avro Java's
``ResolvingGrammarGenerator`` encodes the field's default (``encode``) to build the
grammar, and a default that does not fit the field's type stops the check (Pulsar
parses schemas without validating defaults, so this is where such a default shows).
The rules, by the field's type: null needs null; boolean a boolean; the numeric types
any number; bytes, string and fixed a string; an enum one of its symbols; a union the
first branch whose kind fits the value (then that branch's rule); a record every field,
from the value or the field's own default; arrays and maps their items and values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import cast

from magnetar.core.schemas.avro_types import Parsed, deref, type_of

_NUMERIC = frozenset({"int", "long", "float", "double"})
_TEXTUAL = frozenset({"bytes", "string", "fixed"})


def default_problem(schema: Parsed, value: object, named: Mapping[str, Parsed]) -> str | None:
    """Why ``value`` cannot be the default of a field of type ``schema``; None when it can."""
    schema = deref(schema, named)
    kind = type_of(schema)
    if kind == "null":
        return None if value is None else f"Non-null default value for null type: {_json(value)}"
    if kind == "boolean":
        return None if isinstance(value, bool) else f"Non-boolean default for boolean: {_json(value)}"
    if kind in _NUMERIC:
        return None if _is_number(value) else f"Non-numeric default value for {kind}: {_json(value)}"
    if kind in _TEXTUAL:
        return None if isinstance(value, str) else f"Non-string default value for {kind}: {_json(value)}"
    if kind == "union":
        branch = next((b for b in cast(list[Parsed], schema) if _fits(type_of(deref(b, named)), value)), None)
        if branch is None:
            return f"Not compatible default value for union: {_json(value)}"
        return default_problem(branch, value, named)
    definition = cast(dict[str, object], schema)
    if kind == "enum":
        symbols = cast(list[str], definition.get("symbols") or [])
        return None if isinstance(value, str) and value in symbols else \
            f"Default {_json(value)} is not a symbol of enum {definition['name']}"
    if kind == "array":
        items = value if isinstance(value, list) else list(value.values()) if isinstance(value, dict) else []
        return _first_problem(cast(Parsed, definition["items"]), items, named)
    if kind == "map":
        return _first_problem(cast(Parsed, definition["values"]), list(value.values()) if isinstance(value, dict)
                              else [], named)
    return _record_problem(definition, value, named)


def _first_problem(schema: Parsed, values: list[object], named: Mapping[str, Parsed]) -> str | None:
    for value in values:
        problem = default_problem(schema, value, named)
        if problem is not None:
            return problem
    return None


def _record_problem(record: dict[str, object], value: object, named: Mapping[str, Parsed]) -> str | None:
    given = value if isinstance(value, dict) else {}
    for field in cast(list[dict[str, object]], record.get("fields") or []):
        name = str(field["name"])
        if name in given:
            item = given[name]
        elif "default" in field:
            item = field["default"]
        else:
            return f"No default value for: {name}"
        problem = default_problem(cast(Parsed, field["type"]), item, named)
        if problem is not None:
            return problem
    return None


def _fits(kind: str, value: object) -> bool:
    """Avro's ``isCompatible``: whether a union branch of this kind may take the value."""
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind in _NUMERIC:
        return _is_number(value)
    if kind in _TEXTUAL:
        return isinstance(value, str)
    return True


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _json(value: object) -> str:
    return json.dumps(value, default=str)

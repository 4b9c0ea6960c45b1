"""Avro compatibility as Avro Java's schema validators decide it (which Pulsar's
``AvroSchemaBasedCompatibilityCheck`` uses for every strategy): a table of writer and
reader schemas with whether the reader can read what the writer wrote.

The expected answers follow Avro's rules for schema resolution as its Java validators
apply them (``ResolvingGrammarGenerator`` over ``Resolver``): records are never compared
by name; a reader's union takes the first branch of the writer's type (or a record
branch whose fields resolve), else the first the writer's type promotes to; enums and
fixed types compare unqualified names; a writer symbol an enum lacks is not refused (it
fails only when read). The cases named ``avro-*`` are those of Avro's own
``TestSchemaValidation``; ``test_schema_evolve`` and ``test_avro_required_default`` are
the official Python client's tests whose schemas they use.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from magnetar.core.errors import IncompatibleSchema
from magnetar.core.schemas.avro_resolution import parse, read_problem
from magnetar.core.schemas.compatibility import check_compatible
from magnetar.core.schemas.schema_data import SchemaCompatibilityStrategy as S
from magnetar.core.schemas.schema_data import SchemaData


def rec(name: str, *fields: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def f(name: str, kind: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, **extra}


def enum(name: str, *symbols: str, **extra: Any) -> dict[str, Any]:
    return {"type": "enum", "name": name, "symbols": list(symbols), **extra}


def fixed(name: str, size: int, **extra: Any) -> dict[str, Any]:
    return {"type": "fixed", "name": name, "size": size, **extra}


def in_record(kind: Any, name: str = "R") -> dict[str, Any]:
    return rec(name, f("v", kind))


# Avro's TestSchemaValidation records
REC = rec("test.Rec", f("a", "int", default=1), f("b", "long"))
REC2 = rec("test.Rec", f("a", "int", default=1), f("b", "long"), f("c", "int", default=0))
REC3 = rec("test.Rec", f("b", "long"), f("c", "int", default=0))
REC4 = rec("test.Rec", f("b", "long"), f("c", "int"))
REC5 = rec("test.Rec", f("a", "string", default=""), f("b", "long"), f("c", "int", default=0))
POINT = rec("Point", f("x", "double"), f("y", "double"))
CIRCLE = rec("Circle", f("center", POINT), f("radius", "double"))
CRCL = rec("crcl", f("center", rec("pt", f("x", "double"), f("y", "double"))), f("radius", "double"))
CIRCLE_ALLOW_NULL = rec("Circle", f("center", ["null", POINT]), f("radius", ["null", "double"]))

# the official Python client's records (pulsar.schema.Record's output)
USER1 = rec("User1", f("name", ["null", "string"]), f("age", ["null", "int"]))
USER2 = rec("User2", f("age", "int"), f("name", ["null", "string"]))
SUB = rec("MySubRecord", f("x", ["null", "int"]), f("y", ["null", "long"]), f("z", ["null", "string"]))
EXAMPLE = rec("Example", f("a", ["null", "int"]), f("b", "boolean"), f("c", ["null", "long"]),
              f("d", ["null", "float"]), f("e", ["null", "double"]), f("f", ["null", "string"]),
              f("g", ["null", "bytes"]), f("h", ["null", {"type": "array", "items": "string"}]),
              f("i", ["null", {"type": "map", "values": "string"}]), f("j", ["null", SUB]))
EXAMPLE_REQUIRED_DEFAULT = rec(
    "ExampleRequiredDefault", f("a", ["null", "int"], default=None), f("b", "boolean", default=False),
    f("c", ["null", "long"], default=None), f("d", ["null", "float"], default=None),
    f("e", ["null", "double"], default=None), f("f", ["null", "string"], default=None),
    f("g", ["null", "bytes"], default=None), f("h", ["null", {"type": "array", "items": "string"}], default=None),
    f("i", ["null", {"type": "map", "values": "string"}], default=None), f("j", ["null", SUB], default=None))

LIST = rec("Node", f("value", "int"), f("next", ["null", "Node"]))
LIST_GROWN = rec("Node", f("value", "int"), f("next", ["null", "Node"]), f("tag", "string", default=""))

# (case, writer, reader, the reader reads what the writer wrote)
CASES: list[tuple[str, Any, Any, bool]] = [
    # -- Avro's TestSchemaValidation
    ("avro-rec3-reads-rec", REC, REC3, True),
    ("avro-rec5-reads-rec3", REC3, REC5, True),
    ("avro-rec4-cannot-read-rec", REC, REC4, False),
    ("avro-rec5-cannot-read-rec", REC, REC5, False),
    ("avro-rec-reads-rec3", REC3, REC, True),  # rec3 has no a: rec's a has a default
    ("avro-union-of-rec3-reads-union-of-rec", [REC], [REC3], True),
    ("avro-union-of-rec4-cannot-read-union-of-rec", [REC], [REC4], False),
    ("avro-record-names-differ", CRCL, CIRCLE, True),
    ("avro-record-names-differ-reverse", CIRCLE, CRCL, True),
    ("avro-record-read-into-nullable-fields", CRCL, CIRCLE_ALLOW_NULL, True),
    # -- the official client's schema tests
    ("test_schema_evolve-user2-read-as-user1", USER2, USER1, True),
    ("test_schema_evolve-user1-read-as-user2", USER1, USER2, False),  # a null age cannot be an int
    ("test_avro_required_default-forward", EXAMPLE_REQUIRED_DEFAULT, EXAMPLE, True),
    ("test_avro_required_default-backward", EXAMPLE, EXAMPLE_REQUIRED_DEFAULT, True),
    # -- primitives and promotions
    ("int-as-long", "int", "long", True),
    ("int-as-float", "int", "float", True),
    ("int-as-double", "int", "double", True),
    ("long-as-float", "long", "float", True),
    ("long-as-double", "long", "double", True),
    ("float-as-double", "float", "double", True),
    ("string-as-bytes", "string", "bytes", True),
    ("bytes-as-string", "bytes", "string", True),
    ("long-as-int", "long", "int", False),
    ("double-as-float", "double", "float", False),
    ("int-as-string", "int", "string", False),
    ("boolean-as-int", "boolean", "int", False),
    ("null-as-null", "null", "null", True),
    ("date-as-int", {"type": "int", "logicalType": "date"}, "int", True),
    ("timestamp-as-int", {"type": "long", "logicalType": "timestamp-millis"}, "int", False),
    # -- unions
    ("int-as-nullable-int", "int", ["null", "int"], True),
    ("int-as-nullable-long", "int", ["null", "long"], True),
    ("int-as-nullable-string", "int", ["null", "string"], False),
    ("nullable-int-as-int", ["null", "int"], "int", False),
    ("union-grows", ["null", "int"], ["null", "int", "string"], True),
    ("union-shrinks", ["null", "int", "string"], ["null", "int"], False),
    ("union-reordered", ["int", "string"], ["string", "int"], True),
    ("union-promoted", ["null", "int"], ["null", "long"], True),
    ("record-into-union-by-structure", in_record("int", "A"), ["null", in_record("int", "B")], True),
    ("record-into-union-picks-a-readable-branch", in_record("int", "A"),
     ["null", rec("B", f("w", "int")), in_record("long", "C")], True),
    ("record-into-union-no-readable-branch", in_record("int", "A"), ["null", rec("B", f("w", "int"))], False),
    ("enum-into-union-needs-the-full-name", enum("a.E", "X"), ["null", enum("b.E", "X")], False),
    ("enum-into-union-same-full-name", enum("a.E", "X"), ["null", enum("a.E", "X", "Y")], True),
    # -- records, fields, defaults, aliases
    ("top-level-record-renamed", in_record("int", "Old"), in_record("int", "New"), True),
    ("nested-record-renamed", rec("R", f("n", in_record("int", "Old"))), rec("R", f("n", in_record("int", "New"))),
     True),
    ("field-added-with-default", in_record("int"), rec("R", f("v", "int"), f("w", "string", default="")), True),
    ("field-added-with-null-default", in_record("int"), rec("R", f("v", "int"), f("w", ["null", "int"], default=None)),
     True),
    ("field-added-without-default", in_record("int"), rec("R", f("v", "int"), f("w", "string")), False),
    ("field-removed", rec("R", f("v", "int"), f("w", "string")), in_record("int"), True),
    ("field-added-with-a-default-of-the-wrong-type", in_record("int"),
     rec("R", f("v", "int"), f("w", "int", default="zero")), False),
    ("union-default-fits-a-later-branch", in_record("int"), rec("R", f("v", "int"), f("w", ["int", "null"],
                                                                                      default=None)), True),
    ("field-renamed-with-alias", rec("R", f("name", "string")), rec("R", f("fullName", "string", aliases=["name"])),
     True),
    ("field-renamed-without-alias", rec("R", f("name", "string")), rec("R", f("fullName", "string")), False),
    ("field-alias-needs-the-same-record-name", rec("a.A", f("x", "int")), rec("b.B", f("y", "int", aliases=["x"])),
     False),
    ("field-alias-through-a-record-alias", rec("a.A", f("x", "int")),
     rec("b.B", f("y", "int", aliases=["x"]), aliases=["a.A"]), True),
    ("recursive-record", LIST, LIST, True),
    ("recursive-record-grows-with-default", LIST, LIST_GROWN, True),
    # -- enums, fixed, arrays, maps
    ("enum-symbol-added", in_record(enum("E", "A")), in_record(enum("E", "A", "B")), True),
    ("enum-symbol-removed", in_record(enum("E", "A", "B")), in_record(enum("E", "A")), True),
    ("enum-renamed", in_record(enum("E1", "A")), in_record(enum("E2", "A")), False),
    ("enum-renamed-with-alias", in_record(enum("E1", "A")), in_record(enum("E2", "A", aliases=["E1"])), True),
    ("enum-namespace-changed", in_record(enum("a.E", "A")), in_record(enum("b.E", "A")), True),
    ("fixed-same", in_record(fixed("F", 4)), in_record(fixed("F", 4)), True),
    ("fixed-resized", in_record(fixed("F", 4)), in_record(fixed("F", 8)), False),
    ("fixed-renamed", in_record(fixed("F", 4)), in_record(fixed("G", 4)), False),
    ("fixed-namespace-changed", in_record(fixed("a.F", 4)), in_record(fixed("b.F", 4)), True),
    ("array-items-promoted", {"type": "array", "items": "int"}, {"type": "array", "items": "long"}, True),
    ("array-items-narrowed", {"type": "array", "items": "long"}, {"type": "array", "items": "int"}, False),
    ("map-values-changed", {"type": "map", "values": "int"}, {"type": "map", "values": "string"}, False),
    ("array-as-map", {"type": "array", "items": "int"}, {"type": "map", "values": "int"}, False),
]


def schema(definition: Any) -> SchemaData:
    return SchemaData("AVRO", json.dumps(definition).encode())


def reads(writer: Any, reader: Any) -> bool:
    return read_problem(parse(schema(reader).data), parse(schema(writer).data)) is None


def accepted(existing: list[Any], new: Any, strategy: S) -> bool:
    try:
        check_compatible([schema(old) for old in existing], schema(new), strategy)
    except IncompatibleSchema:
        return False
    return True


@pytest.mark.parametrize(("case", "writer", "reader", "readable"), CASES, ids=[c[0] for c in CASES])
def test_reader_against_writer(case: str, writer: Any, reader: Any, readable: bool) -> None:
    assert reads(writer, reader) is readable


@pytest.mark.parametrize(("case", "writer", "reader", "readable"), CASES, ids=[c[0] for c in CASES])
def test_every_strategy_on_the_pair(case: str, writer: Any, reader: Any, readable: bool) -> None:
    """BACKWARD: the new schema reads the old one's data; FORWARD: the old reads the new
    one's; FULL: both; the transitive forms the same against one version; ALWAYS_*."""
    if writer == reader:  # an unchanged schema is its own latest version
        assert readable
        assert all(accepted([writer], reader, strategy) for strategy in (S.BACKWARD, S.FORWARD, S.FULL))
        return
    assert accepted([writer], reader, S.BACKWARD) is readable
    assert accepted([writer], reader, S.BACKWARD_TRANSITIVE) is readable
    assert accepted([reader], writer, S.FORWARD) is readable
    assert accepted([reader], writer, S.FORWARD_TRANSITIVE) is readable
    both = readable and reads(reader, writer)
    assert accepted([writer], reader, S.FULL) is both
    assert accepted([reader], writer, S.FULL_TRANSITIVE) is both
    assert accepted([writer], reader, S.ALWAYS_COMPATIBLE)
    assert not accepted([writer], reader, S.ALWAYS_INCOMPATIBLE)


def test_transitive_strategies_as_avros_validate_all() -> None:
    """Avro's ``validateAll`` cases: every earlier version, not only the latest."""
    assert accepted([REC, REC2], REC3, S.BACKWARD_TRANSITIVE)
    assert not accepted([REC, REC2, REC3], REC4, S.BACKWARD_TRANSITIVE)
    assert not accepted([REC, REC2, REC3], REC5, S.BACKWARD_TRANSITIVE)
    assert accepted([REC3], REC5, S.BACKWARD)  # the latest alone reads
    assert accepted([REC2, REC3], REC, S.FORWARD_TRANSITIVE)
    assert not accepted([REC2, REC3, REC4], REC, S.FORWARD_TRANSITIVE)
    assert accepted([REC2, REC3], REC, S.FULL_TRANSITIVE) is (reads(REC2, REC) and reads(REC3, REC))
    assert not accepted([REC2, REC3, REC4], REC, S.FULL_TRANSITIVE)


def test_the_clients_schema_evolve_under_forward() -> None:
    """``test_schema_evolve``: User2 follows User1 under FORWARD (not under BACKWARD)."""
    assert accepted([USER1], USER2, S.FORWARD)
    assert not accepted([USER1], USER2, S.BACKWARD)


def test_the_clients_required_defaults_under_the_default_strategy() -> None:
    """``test_avro_required_default``: ExampleRequiredDefault follows Example under FULL."""
    assert accepted([EXAMPLE], EXAMPLE_REQUIRED_DEFAULT, S.FULL)


def test_refusals_say_what_avro_found() -> None:
    with pytest.raises(IncompatibleSchema) as refused:
        check_compatible([schema(REC)], schema(REC4), S.BACKWARD)
    assert "Found test.Rec, expecting test.Rec, missing required field c" in refused.value.message
    with pytest.raises(IncompatibleSchema) as refused:
        check_compatible([schema(in_record("long"))], schema(in_record("int")), S.BACKWARD)
    assert "field 'v': Found long, expecting int" in refused.value.message
    with pytest.raises(IncompatibleSchema) as refused:
        check_compatible([schema(in_record("int"))], schema(rec("R", f("v", "int"), f("w", "int", default="x"))),
                         S.BACKWARD)
    assert "field 'w': invalid default value: Non-numeric default value for int" in refused.value.message

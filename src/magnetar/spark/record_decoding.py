"""Message payloads as typed Arrow columns: AVRO, JSON, primitive and KEY_VALUE values.

Each message is decoded with the schema version it was written with (its
``schema_version``; a message without one with the latest) and laid out in the
columns of the *latest* version, pulsar-spark's rule: a field an older version lacks
is null, and a field the latest version no longer has is not read.

The work is per column where it can be. AVRO payloads of a run of messages with one
version are concatenated into a single block of an in-memory Avro object container, so
fastavro's compiled reader decodes them in one call rather than one call a message
(half the cost); primitive values are one ``numpy.frombuffer`` over the joined bytes.
Logical types are read as their base type and converted by one Arrow cast per batch
(:func:`~magnetar.spark.schema_mapping.storage_arrow_type`).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import struct
import sys
from array import array
from collections.abc import Callable, Iterator, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any, Protocol

from magnetar.spark.schema_mapping import (
    KEY_VALUE,
    PRIMITIVE_TYPES,
    RECORD_TYPES,
    SchemaMappingError,
    TopicSchema,
    spark_arrow_type,
    storage_arrow_type,
    storage_avro,
    value_type,
)

if TYPE_CHECKING:
    import pyarrow as pa

#: A run of rows written with one schema version: (end row, exclusive; version, -1 for none).
VersionRuns = Sequence[tuple[int, int]]
_I32 = struct.Struct(">i")
#: Pulsar's fixed-width primitive encodings (big-endian, as ``ByteBuffer`` writes them).
#: Width and ``array`` type code of each.
_FIXED_WIDTH = {"BOOLEAN": (1, "B"), "INT8": (1, "b"), "INT16": (2, "h"), "INT32": (4, "i"), "INT64": (8, "q"),
                "FLOAT": (4, "f"), "DOUBLE": (8, "d"), "DATE": (8, "q"), "TIME": (8, "q"), "TIMESTAMP": (8, "q"),
                "LOCAL_DATE": (8, "q"), "LOCAL_TIME": (8, "q")}
_MS_PER_DAY = 86_400_000
#: Arrow's name for the type of each ``array`` type code.
_ARROW_OF_CODE = {"B": "uint8", "b": "int8", "h": "int16", "i": "int32", "q": "int64", "f": "float32",
                  "d": "float64"}
_SYNC = b"magnetar-records"  # 16 bytes: the container's sync marker
#: The field each AVRO record is framed with when a run is decoded in one call.
FRAME_FIELD = "magnetar_spark_frame_index"


class RecordDecodingError(ValueError):
    """A payload that does not decode with its schema version; the message says which row."""


class SchemaFetcher(Protocol):
    def __call__(self, version: int) -> TopicSchema: ...


class SchemaVersions:
    """The latest schema (the columns) and the older versions met while reading, fetched once each."""

    def __init__(self, latest: TopicSchema, fetch: SchemaFetcher) -> None:
        self.latest = latest
        self._fetch = fetch
        #: Numbers are per topic, and topics read together may number one schema differently.
        self._known: dict[int, TopicSchema] = {}

    def get(self, version: int) -> TopicSchema:
        if version < 0:
            return self.latest
        found = self._known.get(version)
        if found is None:
            found = self._known[version] = self._fetch(version)
        if found.schema_type != self.latest.schema_type:
            raise RecordDecodingError(f"messages of schema version {version} are {found.schema_type}, but the "
                                      f"query reads with the latest version, {self.latest.schema_type}")
        return found


class ValueDecoder(Protocol):
    def decode(self, values: list[bytes | None], runs: VersionRuns) -> pa.Array: ...


def segments(runs: VersionRuns) -> Iterator[tuple[int, int, int]]:
    """(start, end, version) of the longest stretches of rows with one version."""
    start = 0
    pending: tuple[int, int] | None = None
    for end, version in runs:
        if pending is not None and pending[1] != version:
            yield start, pending[0], pending[1]
            start = pending[0]
        pending = (end, version)
    if pending is not None and pending[0] > start:
        yield start, pending[0], pending[1]


class AvroValues:
    """AVRO payloads (Pulsar's ``AvroSchema``: the record's Avro binary, no header)."""

    def __init__(self, reader: TopicSchema, writer_avro: Callable[[int], Any]) -> None:
        spark_type = value_type(reader)
        self.storage = storage_arrow_type(spark_type, reader.avro())
        self.target = spark_arrow_type(spark_type)
        self._writer_avro = writer_avro
        self._headers: dict[int, bytes] = {}

    def decode(self, values: list[bytes | None], runs: VersionRuns) -> pa.Array:
        import pyarrow as pa
        parts = []
        for start, end, version in segments(runs):
            chunk = values[start:end]
            columnar = self._columnar(chunk, version)
            if columnar is None:
                rows = _with_nulls(chunk, lambda present, v=version: self._read(present, v))  # type: ignore[misc]
                columnar = _to_arrow(rows, self.storage, self.target)
            parts.append(columnar)
        return pa.concat_arrays(parts) if len(parts) != 1 else parts[0]

    def _columnar(self, chunk: list[bytes | None], version: int) -> pa.Array | None:
        """The run decoded straight into Arrow columns by polars' Avro reader (compiled, no Python
        object per value), framed as :meth:`_read` explains; None where it does not apply (polars
        missing, maps, which it cannot read, null messages, a writer that is not a record) or
        the frames do not check out: the caller then decodes through fastavro."""
        try:
            import polars as pl
        except ImportError:
            return None
        import pyarrow as pa
        writer = self._writer_avro(version)
        present = [v for v in chunk if v is not None]
        if len(present) != len(chunk) or not chunk or not _is_record(writer) or _has_map(writer):
            return None
        framed = {**writer, "fields": [*writer.get("fields", []), {"name": FRAME_FIELD, "type": "long"}]}
        count = len(present)
        body = b"".join(chain.from_iterable(zip(present, _frame_indexes(count), strict=False)))
        block = _container_header(framed) + _zigzag(count) + _zigzag(len(body)) + body + _SYNC
        try:
            table = pl.read_avro(io.BytesIO(block)).to_arrow()
            if not table.column(FRAME_FIELD).equals(pa.chunked_array([pa.array(range(count), pa.int64())])):
                return None
            fields = [self.target.field(i) for i in range(self.target.num_fields)]
            columns = [table.column(f.name).combine_chunks().cast(f.type) if f.name in table.column_names
                       else pa.nulls(count, f.type) for f in fields]
            return pa.StructArray.from_arrays(columns, fields=fields)
        except Exception:  # anything polars or a cast refuses: the fastavro path decides
            return None

    def _read(self, present: list[bytes], version: int) -> list[Any]:
        """Decode one run of payloads of one version in a single call.

        Avro binary has no record boundaries, so a payload with bytes missing or left over
        would shift every record after it. Each record is therefore followed by its index,
        read as one more field (:data:`FRAME_FIELD`): a shift shows as a wrong index, and the
        run is then decoded message by message to name the one at fault. Writers that are not
        records (rare) are decoded message by message.
        """
        import fastavro
        writer = storage_avro(self._writer_avro(version))
        if not _is_record(writer):
            return [_read_one(p, writer, version, i) for i, p in enumerate(present)]
        header = self._headers.get(version)
        if header is None:
            framed = {**writer, "fields": [*writer.get("fields", []), {"name": FRAME_FIELD, "type": "long"}]}
            header = self._headers[version] = _container_header(framed)
        count = len(present)
        body = b"".join(chain.from_iterable(zip(present, _frame_indexes(count), strict=False)))
        block = header + _zigzag(count) + _zigzag(len(body)) + body + _SYNC
        try:
            records: list[Any] = list(fastavro.reader(io.BytesIO(block)))
        except Exception:  # fastavro raises many kinds; the message by message pass names the culprit
            records = []
        if len(records) != count or [r.pop(FRAME_FIELD) for r in records] != list(range(count)):
            return [_read_one(p, writer, version, i) for i, p in enumerate(present)]
        return records


class JsonValues:
    """JSON payloads (Pulsar's ``JsonSchema``: one JSON object, the Avro definition naming its fields)."""

    def __init__(self, reader: TopicSchema) -> None:
        spark_type = value_type(reader)
        self.storage = storage_arrow_type(spark_type, reader.avro())
        self.target = spark_arrow_type(spark_type)

    def decode(self, values: list[bytes | None], runs: VersionRuns) -> pa.Array:
        loads = json.loads
        try:
            rows = [loads(v) if v is not None else None for v in values]
        except ValueError as exc:
            raise RecordDecodingError(f"a JSON-schema message is not JSON: {exc}") from None
        return _to_arrow(rows, self.storage, self.target)


class PrimitiveValues:
    """Primitive payloads, with Pulsar's encodings (``Schema.INT64`` is 8 bytes big-endian, ...)."""

    def __init__(self, schema_type: str) -> None:
        self.schema_type = schema_type
        self.target = spark_arrow_type(PRIMITIVE_TYPES[schema_type])

    def decode(self, values: list[bytes | None], runs: VersionRuns) -> pa.Array:
        import pyarrow as pa
        raw = pa.array(values, pa.binary())
        kind = self.schema_type
        if kind in ("NONE", "BYTES"):
            return raw
        if kind == "STRING":
            try:
                return raw.cast(pa.string())
            except pa.ArrowInvalid as exc:
                raise RecordDecodingError(f"a STRING-schema message is not UTF-8: {exc}") from None
        if kind == "INSTANT":
            return self._instants(raw)
        if kind == "LOCAL_DATE_TIME":
            return self._local_date_times(raw)
        width, dtype = _FIXED_WIDTH[kind]
        numbers = _fixed(raw, width, dtype, kind)
        if kind == "BOOLEAN":
            return numbers.cast(pa.bool_())
        if kind in ("DATE", "TIMESTAMP"):
            millis = numbers.cast(pa.timestamp("ms", tz="UTC"))
            return millis.cast(self.target) if kind == "TIMESTAMP" else \
                _floor_div(numbers, _MS_PER_DAY).cast(pa.int32()).cast(pa.date32())
        if kind == "LOCAL_DATE":
            return numbers.cast(pa.int32()).cast(pa.date32())
        return numbers.cast(self.target)

    def _instants(self, raw: pa.Array) -> pa.Array:
        import pyarrow as pa
        import pyarrow.compute as pc
        seconds = _fixed(raw, 12, "q", "INSTANT", part=(0, 8))
        nanos = _fixed(raw, 12, "i", "INSTANT", part=(8, 12))
        micros = pc.add(pc.multiply(seconds, 1_000_000), _floor_div(nanos.cast(pa.int64()), 1000))
        return micros.cast(pa.timestamp("us", tz="UTC"))

    def _local_date_times(self, raw: pa.Array) -> pa.Array:
        import pyarrow as pa
        import pyarrow.compute as pc
        days = _fixed(raw, 16, "q", "LOCAL_DATE_TIME", part=(0, 8))
        nanos = _fixed(raw, 16, "q", "LOCAL_DATE_TIME", part=(8, 16))
        micros = pc.add(pc.multiply(days, 86_400_000_000), _floor_div(nanos, 1000))
        return micros.cast(pa.timestamp("us"))


class KeyValueValues:
    """KEY_VALUE messages: ``INLINE`` payloads hold ``[key size][key][value size][value]`` (sizes
    int32 big-endian, -1 for null); ``SEPARATED`` ones hold the value, the key being the message
    key (base64, as Pulsar's producers set it with ``partition_key_b64_encoded``)."""

    def __init__(self, reader: TopicSchema, versions: SchemaVersions) -> None:
        key, value = reader.key_value_parts()
        self.separated = reader.key_value_encoding == "SEPARATED"
        self.keys = value_decoder(key, lambda v: versions.get(v).key_value_parts()[0].avro())
        self.values = value_decoder(value, lambda v: versions.get(v).key_value_parts()[1].avro())

    def split(self, payloads: list[bytes | None], message_keys: list[str | None]) -> tuple[list[Any], list[Any]]:
        if self.separated:
            return [_key_bytes(k) for k in message_keys], payloads
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        for i, payload in enumerate(payloads):
            if payload is None:
                keys.append(None)
                values.append(None)
                continue
            try:
                key, value = _split_inline(payload)
            except (struct.error, ValueError) as exc:
                raise RecordDecodingError(f"KEY_VALUE message {i} of the batch is not INLINE-encoded: {exc}") \
                    from None
            keys.append(key)
            values.append(value)
        return keys, values


def value_decoder(schema: TopicSchema, writer_avro: Callable[[int], Any]) -> ValueDecoder:
    if schema.schema_type == "AVRO":
        return AvroValues(schema, writer_avro)
    if schema.schema_type == "JSON":
        return JsonValues(schema)
    if schema.schema_type in PRIMITIVE_TYPES:
        return PrimitiveValues(schema.schema_type)
    raise SchemaMappingError(f"{schema.schema_type} values cannot be decoded into columns")


class TypedColumns:
    """The data columns of a batch of messages, as :func:`~magnetar.spark.schema_mapping.data_fields` lays them out."""

    def __init__(self, versions: SchemaVersions) -> None:
        latest = self.schema = versions.latest
        self.key_value = KeyValueValues(latest, versions) if latest.schema_type == KEY_VALUE else None
        self.decoder = value_decoder(latest, lambda v: versions.get(v).avro()) if self.key_value is None else None
        self.flatten = latest.schema_type in RECORD_TYPES and isinstance(latest.avro(), dict) and \
            latest.avro().get("type") == "record"

    def columns(self, values: list[bytes | None], message_keys: list[str | None], runs: VersionRuns) -> list[pa.Array]:
        if self.key_value is not None:
            keys, payloads = self.key_value.split(values, message_keys)
            return [self.key_value.keys.decode(keys, runs), self.key_value.values.decode(payloads, runs)]
        assert self.decoder is not None
        decoded = self.decoder.decode(values, runs)
        return decoded.flatten() if self.flatten else [decoded]


def _with_nulls(values: list[bytes | None], read: Callable[[list[bytes]], list[Any]]) -> list[Any]:
    present = [v for v in values if v is not None]
    if len(present) == len(values):
        return read(present) if present else []
    decoded = iter(read(present) if present else [])
    return [next(decoded) if v is not None else None for v in values]


def _to_arrow(rows: list[Any], storage: pa.DataType, target: pa.DataType) -> pa.Array:
    import pyarrow as pa
    try:
        array = pa.array(rows, storage)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
        raise RecordDecodingError(f"decoded values do not fit the latest schema's columns: {exc}") from None
    return array if storage == target else array.cast(target)


def _fixed(raw: pa.Array, width: int, code: str, kind: str, part: tuple[int, int] | None = None) -> pa.Array:
    """Numbers from big-endian values of ``width`` bytes (the ``part`` slice of each), nulls kept:
    one byte swap over the joined bytes, no Python object per value."""
    import pyarrow as pa
    import pyarrow.compute as pc
    filled = pc.fill_null(raw, pa.scalar(b"\0" * width, pa.binary())) if raw.null_count else raw
    lengths = pc.binary_length(filled)
    if len(filled) and (pc.min(lengths).as_py() != width or pc.max(lengths).as_py() != width):
        raise RecordDecodingError(f"a {kind}-schema message is not {width} bytes long")
    blob = b"".join(filled.to_pylist()) if filled.offset or filled.buffers()[2] is None else \
        filled.buffers()[2].to_pybytes()[_first_offset(filled):][:width * len(filled)]
    if part is not None:
        lo, hi = part
        blob = b"".join(blob[i + lo:i + hi] for i in range(0, len(blob), width))
    numbers = array(code)
    numbers.frombytes(blob)
    if numbers.itemsize > 1 and sys.byteorder == "little":
        numbers.byteswap()
    validity = raw.is_valid().buffers()[1] if raw.null_count else None
    return pa.Array.from_buffers(pa.type_for_alias(_ARROW_OF_CODE[code]), len(raw), [validity, pa.py_buffer(numbers)])


def _first_offset(values: pa.Array) -> int:
    offsets = array("i")
    offsets.frombytes(values.buffers()[1].to_pybytes()[:4])
    return offsets[0]


def _floor_div(numbers: pa.Array, divisor: int) -> pa.Array:
    import pyarrow as pa
    import pyarrow.compute as pc
    quotient = pc.divide(numbers, pa.scalar(divisor, numbers.type))  # truncates towards zero
    negative_rest = pc.and_(pc.less(numbers, 0), pc.not_equal(pc.multiply(quotient, divisor), numbers))
    return pc.if_else(negative_rest, pc.subtract(quotient, 1), quotient)


def _split_inline(payload: bytes) -> tuple[bytes | None, bytes | None]:
    key_size = _I32.unpack_from(payload, 0)[0]
    at = 4 + max(key_size, 0)
    value_size = _I32.unpack_from(payload, at)[0]
    end = at + 4 + max(value_size, 0)
    if end != len(payload):
        raise ValueError(f"sizes {key_size} and {value_size} do not add up to the payload's {len(payload)} bytes")
    return (payload[4:at] if key_size >= 0 else None), (payload[at + 4:end] if value_size >= 0 else None)


def _key_bytes(key: str | None) -> bytes | None:
    if key is None:
        return None
    try:
        return base64.b64decode(key, validate=True)
    except (binascii.Error, ValueError):
        return key.encode()  # a producer that set a plain key


def _zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _avro_bytes(data: bytes) -> bytes:
    return _zigzag(len(data)) + data


def _container_header(writer: Any) -> bytes:
    """An Avro object container's header for ``writer``; a block of payloads follows it."""
    meta = _avro_bytes(b"avro.schema") + _avro_bytes(json.dumps(writer).encode()) + \
        _avro_bytes(b"avro.codec") + _avro_bytes(b"null")
    return b"Obj\x01" + _zigzag(2) + meta + _zigzag(0) + _SYNC


def _is_record(avro: Any) -> bool:
    return isinstance(avro, dict) and avro.get("type") == "record"


def _has_map(avro: Any) -> bool:
    if isinstance(avro, list):
        return any(_has_map(b) for b in avro)
    if not isinstance(avro, dict):
        return False
    if avro.get("type") == "map":
        return True
    return any(_has_map(f["type"]) for f in avro.get("fields", [])) or \
        any(_has_map(avro[k]) for k in ("items", "values", "type") if isinstance(avro.get(k), dict | list))


def _read_one(payload: bytes, writer: Any, version: int, row: int) -> Any:
    """One AVRO payload on its own, which must be exactly one record of ``writer``."""
    import fastavro
    stream = io.BytesIO(payload)
    try:
        record = fastavro.schemaless_reader(stream, fastavro.parse_schema(writer), None)
    except Exception as exc:
        raise RecordDecodingError(f"an AVRO message (row {row} of its run) does not decode with schema "
                                  f"version {version}: {exc}") from None
    if stream.tell() != len(payload):
        raise RecordDecodingError(f"an AVRO message (row {row} of its run) has {len(payload) - stream.tell()} "
                                  f"bytes after the record of schema version {version}")
    return record


#: Frame indexes by position, grown as runs get longer.
_FRAME_INDEXES: list[bytes] = []


def _frame_indexes(count: int) -> list[bytes]:
    """At least ``count`` frame indexes, each a zig-zag varint as Avro writes a long."""
    while len(_FRAME_INDEXES) < count:
        _FRAME_INDEXES.append(_zigzag(len(_FRAME_INDEXES)))
    return _FRAME_INDEXES

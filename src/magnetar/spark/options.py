"""The data source's options, checked once on the driver before anything connects.

Option names follow streamnative/pulsar-spark (``service.url``, ``admin.url``,
``topic`` / ``topics`` / ``topicsPattern``, ``startingOffsets``, ``endingOffsets``,
``startingTime``, ``failOnDataLoss``, ``maxRecordsPerTrigger``, ``pulsar.client.*``),
so a pipeline can switch by changing its format name. Spark hands options over
lower-cased; every message here uses the documented spelling. Unknown options and
contradictory combinations raise :class:`MagnetarOptionError` at query start.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from magnetar.spark.option_error import MagnetarOptionError

if TYPE_CHECKING:
    from magnetar.spark.schema_mapping import TopicSchema

SERVICE_URL = "service.url"
ADMIN_URL = "admin.url"
TOPIC = "topic"
TOPICS = "topics"
TOPICS_PATTERN = "topicsPattern"
STARTING_OFFSETS = "startingOffsets"
ENDING_OFFSETS = "endingOffsets"
STARTING_TIME = "startingTime"
FAIL_ON_DATA_LOSS = "failOnDataLoss"
MAX_RECORDS_PER_TRIGGER = "maxRecordsPerTrigger"
SUBSCRIPTION_NAME = "subscriptionName"
POLL_TIMEOUT_MS = "pollTimeoutMs"
MAX_ENTRIES_PER_SPLIT = "maxEntriesPerSplit"
WRITE_ID = "writeId"
REQUIRE_DEDUPLICATION = "requireDeduplication"
PRODUCER_NAME_PREFIX = "producerNamePrefix"
CLIENT_PREFIX = "pulsar.client."
READER_PREFIX = "pulsar.reader."
PRODUCER_PREFIX = "pulsar.producer."

COMMON_OPTIONS = (SERVICE_URL, ADMIN_URL)
READ_OPTIONS = (TOPIC, TOPICS, TOPICS_PATTERN, STARTING_OFFSETS, ENDING_OFFSETS, STARTING_TIME,
                FAIL_ON_DATA_LOSS, MAX_RECORDS_PER_TRIGGER, SUBSCRIPTION_NAME, POLL_TIMEOUT_MS,
                MAX_ENTRIES_PER_SPLIT)
WRITE_OPTIONS = (TOPIC, WRITE_ID, REQUIRE_DEDUPLICATION, PRODUCER_NAME_PREFIX)
#: Options Spark itself may add to the map a source or sink receives.
SPARK_OPTIONS = ("path", "checkpointLocation", "queryName")

DEFAULT_POLL_TIMEOUT_MS = 120_000
DEFAULT_MAX_ENTRIES_PER_SPLIT = 50_000
DEFAULT_PRODUCER_NAME_PREFIX = "magnetar-spark"




# -- converters ------------------------------------------------------------------------------

def _bool(name: str, raw: str) -> bool:
    text = raw.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise MagnetarOptionError(f"option {name}={raw!r}: expected true or false")


def _int(name: str, raw: str, minimum: int | None = None) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise MagnetarOptionError(f"option {name}={raw!r}: expected an integer") from None
    if minimum is not None and value < minimum:
        raise MagnetarOptionError(f"option {name}={value}: must be at least {minimum}")
    return value


def _str(name: str, raw: str) -> str:
    return raw


def _seconds_from_ms(name: str, raw: str) -> int:
    return max(1, -(-_int(name, raw, 1) // 1000))


def _compression(name: str, raw: str) -> Any:
    import pulsar
    kinds = {"NONE": pulsar.CompressionType.NONE, "LZ4": pulsar.CompressionType.LZ4,
             "ZLIB": pulsar.CompressionType.ZLib, "ZSTD": pulsar.CompressionType.ZSTD,
             "SNAPPY": pulsar.CompressionType.SNAPPY}
    try:
        return kinds[raw.strip().upper()]
    except KeyError:
        raise MagnetarOptionError(f"option {name}={raw!r}: expected one of {', '.join(kinds)}") from None


Converter = Callable[[str, str], Any]

#: ``pulsar.client.<Java ClientConfigurationData name>`` -> (Python client keyword, converter).
CLIENT_KEYS: dict[str, tuple[str, Converter]] = {
    "operationTimeoutMs": ("operation_timeout_seconds", _seconds_from_ms),
    "connectionTimeoutMs": ("connection_timeout_ms", lambda n, r: _int(n, r, 1)),
    "numIoThreads": ("io_threads", lambda n, r: _int(n, r, 1)),
    "numListenerThreads": ("message_listener_threads", lambda n, r: _int(n, r, 1)),
    "concurrentLookupRequest": ("concurrent_lookup_requests", lambda n, r: _int(n, r, 1)),
    "statsIntervalSeconds": ("stats_interval_in_seconds", lambda n, r: _int(n, r, 0)),
    "useTls": ("use_tls", _bool),
    "tlsTrustCertsFilePath": ("tls_trust_certs_file_path", _str),
    "tlsAllowInsecureConnection": ("tls_allow_insecure_connection", _bool),
    "tlsHostnameVerificationEnable": ("tls_validate_hostname", _bool),
    "tlsCertificateFilePath": ("tls_certificate_file_path", _str),
    "tlsKeyFilePath": ("tls_private_key_file_path", _str),
    "listenerName": ("listener_name", _str),
    "authPluginClassName": ("", _str),
    "authParams": ("", _str),
}

#: ``pulsar.reader.<Java ReaderConfigurationData name>`` -> (Python keyword, converter).
READER_KEYS: dict[str, tuple[str, Converter]] = {
    "receiverQueueSize": ("receiver_queue_size", lambda n, r: _int(n, r, 1)),
    "readerName": ("reader_name", _str),
    "subscriptionRolePrefix": ("subscription_role_prefix", _str),
}

#: ``pulsar.producer.<Java ProducerConfigurationData name>`` -> (Python keyword, converter).
PRODUCER_KEYS: dict[str, tuple[str, Converter]] = {
    "sendTimeoutMs": ("send_timeout_millis", lambda n, r: _int(n, r, 0)),
    "maxPendingMessages": ("max_pending_messages", lambda n, r: _int(n, r, 1)),
    "batchingEnabled": ("batching_enabled", _bool),
    "batchingMaxMessages": ("batching_max_messages", lambda n, r: _int(n, r, 1)),
    "batchingMaxBytes": ("batching_max_allowed_size_in_bytes", lambda n, r: _int(n, r, 1)),
    "batchingMaxPublishDelayMicros": ("batching_max_publish_delay_ms", lambda n, r: max(1, _int(n, r, 0) // 1000)),
    "compressionType": ("compression_type", _compression),
}

#: Producer settings the sink decides itself, and why a user may not change them.
PRODUCER_FIXED: dict[str, str] = {
    "producerName": "the sink names producers after the query and Spark partition so retries deduplicate",
    "blockIfQueueFull": "the sink always waits for room instead of failing sends",
    "chunkingEnabled": "chunked messages cannot be batched; the sink batches",
    "initialSequenceId": "the sink derives every sequence id from the batch id and row position",
    "accessMode": "producers of one task share the topic with the other tasks' producers",
}


# -- parsed options ----------------------------------------------------------------------------

@dataclass(frozen=True)
class ConnectionOptions:
    """How executors and the driver reach the broker; picklable, no live objects."""

    service_url: str
    admin_url: str | None
    client_settings: Mapping[str, str] = field(default_factory=dict)

    def new_client(self) -> Any:
        """An official ``pulsar.Client`` that logs warnings and errors only."""
        import pulsar
        kwargs = {"logger": pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn), **self.client_kwargs()}
        return pulsar.Client(self.service_url, **kwargs)

    def client_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        for key, raw in self.client_settings.items():
            keyword, convert = CLIENT_KEYS[key]
            if keyword:
                kwargs[keyword] = convert(CLIENT_PREFIX + key, raw)
        auth = self.authentication()
        if auth is not None:
            kwargs["authentication"] = auth
        return kwargs

    def authentication(self) -> Any:
        plugin = self.client_settings.get("authPluginClassName")
        if not plugin:
            return None
        import pulsar
        params = self.client_settings.get("authParams", "")
        short = plugin.rsplit(".", 1)[-1]
        if short == "AuthenticationToken":
            return pulsar.AuthenticationToken(_token_of(params))
        if short in ("AuthenticationTls", "AuthenticationTLS"):
            parts = dict(p.split(":", 1) for p in params.split(",") if ":" in p)
            return pulsar.AuthenticationTLS(parts.get("tlsCertFile", ""), parts.get("tlsKeyFile", ""))
        return pulsar.Authentication(plugin, params)

    def admin_headers(self) -> dict[str, str]:
        plugin = self.client_settings.get("authPluginClassName", "")
        if plugin.rsplit(".", 1)[-1] == "AuthenticationToken":
            return {"Authorization": f"Bearer {_token_of(self.client_settings.get('authParams', ''))}"}
        return {}

    def admin_verify(self) -> bool | str:
        if _bool_setting(self.client_settings, "tlsAllowInsecureConnection"):
            return False
        return self.client_settings.get("tlsTrustCertsFilePath") or True

    def require_admin_url(self, why: str) -> str:
        if not self.admin_url:
            raise MagnetarOptionError(f"option {ADMIN_URL} is required: {why} (for example "
                                      f"http://localhost:8080)")
        return self.admin_url


def _token_of(params: str) -> str:
    if params.startswith("token:"):
        return params[len("token:"):]
    if params.startswith("file:"):
        from pathlib import Path
        return Path(params[len("file:"):].removeprefix("//")).read_text().strip()
    return params


def _bool_setting(settings: Mapping[str, str], key: str) -> bool:
    raw = settings.get(key)
    return raw is not None and _bool(CLIENT_PREFIX + key, raw)


@dataclass(frozen=True)
class TopicSelection:
    """Exactly one of: fixed topic names, or a regular expression over a namespace's topics."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None

    def describe(self) -> str:
        return f"{TOPICS_PATTERN}={self.pattern}" if self.pattern else ", ".join(self.topics)


@dataclass(frozen=True)
class SourceOptions:
    connection: ConnectionOptions
    selection: TopicSelection
    starting_offsets: str | None
    ending_offsets: str | None
    starting_time_ms: int | None
    fail_on_data_loss: bool
    max_records_per_trigger: int | None
    subscription_name: str | None
    poll_timeout_ms: int
    max_entries_per_split: int
    reader_settings: Mapping[str, str] = field(default_factory=dict)
    #: The schema rows are decoded with, resolved on the driver (None: binary ``value``).
    topic_schema: TopicSchema | None = None

    def reader_kwargs(self) -> dict[str, Any]:
        return client_kwargs(READER_PREFIX, READER_KEYS, self.reader_settings)


@dataclass(frozen=True)
class SinkOptions:
    connection: ConnectionOptions
    topic: str | None
    write_id: str | None
    require_deduplication: bool
    producer_name_prefix: str
    producer_settings: Mapping[str, str] = field(default_factory=dict)
    #: The AVRO or JSON schema rows are encoded with, resolved on the driver (None: ``value`` as is).
    topic_schema: TopicSchema | None = None

    def producer_kwargs(self) -> dict[str, Any]:
        return client_kwargs(PRODUCER_PREFIX, PRODUCER_KEYS, self.producer_settings)


def client_kwargs(prefix: str, keys: Mapping[str, tuple[str, Converter]],
                  settings: Mapping[str, str]) -> dict[str, Any]:
    """The official client's keyword arguments for ``prefix``-ed options (``keys`` maps
    each option to its keyword and converter)."""
    return {keyword: convert(prefix + key, raw)
            for key, raw in settings.items()
            for keyword, convert in [keys[key]]}


# -- parsing --------------------------------------------------------------------------------------

class _Options:
    """Lower-cased keys in, documented names out; remembers which keys were read."""

    def __init__(self, raw: Mapping[str, str]) -> None:
        self.values = {str(k).lower(): str(v) for k, v in raw.items()}

    def get(self, name: str) -> str | None:
        value = self.values.get(name.lower())
        if value is not None and not value.strip():
            raise MagnetarOptionError(f"option {name} is empty")
        return value

    def prefixed(self, prefix: str, known: Mapping[str, Any], fixed: Mapping[str, str] | None = None,
                 ) -> dict[str, str]:
        by_lower = {k.lower(): k for k in known}
        out: dict[str, str] = {}
        for key, value in self.values.items():
            if not key.startswith(prefix):
                continue
            suffix = key[len(prefix):]
            if fixed is not None:
                for fixed_name, why in fixed.items():
                    if fixed_name.lower() == suffix:
                        raise MagnetarOptionError(f"option {prefix}{fixed_name} cannot be set: {why}")
            if suffix not in by_lower:
                raise MagnetarOptionError(
                    f"unknown option {prefix}{suffix}; supported: "
                    + ", ".join(prefix + k for k in sorted(known)))
            out[by_lower[suffix]] = value
        return out

    def check_known(self, allowed: tuple[str, ...], prefixes: tuple[str, ...], other_side: tuple[str, ...],
                    side: str) -> None:
        allowed_lower = {a.lower(): a for a in allowed + SPARK_OPTIONS}
        other_lower = {o.lower(): o for o in other_side}
        for key in self.values:
            if key in allowed_lower or any(key.startswith(p) for p in prefixes):
                continue
            if key in other_lower:
                raise MagnetarOptionError(f"option {other_lower[key]} does not apply when {side}")
            for other in other_side:
                if other.endswith(".") and key.startswith(other):
                    raise MagnetarOptionError(f"option {key} does not apply when {side} ({other}* options "
                                              "are for the other direction)")
            raise MagnetarOptionError(f"unknown option {key!r}; options for {side}: "
                                      + ", ".join(sorted(allowed)) + ", " + ", ".join(p + "*" for p in prefixes))


def parse_connection(opts: _Options) -> ConnectionOptions:
    service_url = opts.get(SERVICE_URL)
    if service_url is None:
        raise MagnetarOptionError(f"option {SERVICE_URL} is required (for example pulsar://localhost:6650)")
    scheme = urlparse(service_url).scheme
    if scheme not in ("pulsar", "pulsar+ssl"):
        raise MagnetarOptionError(f"option {SERVICE_URL}={service_url!r}: expected a pulsar:// or "
                                  f"pulsar+ssl:// URL")
    admin_url = opts.get(ADMIN_URL)
    if admin_url is not None:
        admin_url = admin_url.rstrip("/")
        if urlparse(admin_url).scheme not in ("http", "https"):
            raise MagnetarOptionError(f"option {ADMIN_URL}={admin_url!r}: expected an http:// or https:// URL")
    settings = opts.prefixed(CLIENT_PREFIX, CLIENT_KEYS)
    connection = ConnectionOptions(service_url, admin_url, settings)
    connection.client_kwargs()  # converts every value now, so a bad one fails at query start
    return connection


def parse_source_options(raw: Mapping[str, str], *, streaming: bool | None) -> SourceOptions:
    """Check reading options; ``streaming=None`` (at ``load()``, before Spark says which) skips
    the checks that depend on batch or stream."""
    opts = _Options(raw)
    side = {True: "reading a stream", False: "reading a batch", None: "reading"}[streaming]
    opts.check_known(COMMON_OPTIONS + READ_OPTIONS, (CLIENT_PREFIX, READER_PREFIX),
                     WRITE_OPTIONS + (PRODUCER_PREFIX,), side)
    connection = parse_connection(opts)
    connection.require_admin_url("latest offsets and partitions come from the broker's admin REST API")
    selection = parse_topic_selection(opts)
    starting = opts.get(STARTING_OFFSETS)
    ending = opts.get(ENDING_OFFSETS)
    starting_time = opts.get(STARTING_TIME)
    if starting is not None and starting_time is not None:
        raise MagnetarOptionError(f"options {STARTING_OFFSETS} and {STARTING_TIME} contradict each other; "
                                  "set only one")
    _check_offsets_option(STARTING_OFFSETS, starting, allow_latest=True, allow_earliest=True)
    _check_offsets_option(ENDING_OFFSETS, ending, allow_latest=True, allow_earliest=False)
    max_records = opts.get(MAX_RECORDS_PER_TRIGGER)
    subscription = opts.get(SUBSCRIPTION_NAME)
    if streaming is True and ending is not None:
        raise MagnetarOptionError(f"option {ENDING_OFFSETS} applies to batch reads only; a stream reads "
                                  "until it is stopped")
    if streaming is False and max_records is not None:
        raise MagnetarOptionError(f"option {MAX_RECORDS_PER_TRIGGER} applies to streaming reads only")
    if streaming is False and subscription is not None:
        raise MagnetarOptionError(f"option {SUBSCRIPTION_NAME} applies to streaming reads only: the "
                                  "subscription follows the offsets each micro-batch commits")
    if subscription is not None:
        _check_name_part(SUBSCRIPTION_NAME, subscription)
    return SourceOptions(
        connection=connection,
        selection=selection,
        starting_offsets=starting,
        ending_offsets=ending,
        starting_time_ms=_int(STARTING_TIME, starting_time, 0) if starting_time is not None else None,
        fail_on_data_loss=_bool(FAIL_ON_DATA_LOSS, opts.get(FAIL_ON_DATA_LOSS) or "true"),
        max_records_per_trigger=_int(MAX_RECORDS_PER_TRIGGER, max_records, 1) if max_records else None,
        subscription_name=subscription,
        poll_timeout_ms=_int(POLL_TIMEOUT_MS, opts.get(POLL_TIMEOUT_MS) or str(DEFAULT_POLL_TIMEOUT_MS), 1),
        max_entries_per_split=_int(MAX_ENTRIES_PER_SPLIT,
                                   opts.get(MAX_ENTRIES_PER_SPLIT) or str(DEFAULT_MAX_ENTRIES_PER_SPLIT), 1),
        reader_settings=opts.prefixed(READER_PREFIX, READER_KEYS),
    )


def parse_sink_options(raw: Mapping[str, str], *, streaming: bool) -> SinkOptions:
    opts = _Options(raw)
    side = "writing a stream" if streaming else "writing a batch"
    opts.check_known(COMMON_OPTIONS + WRITE_OPTIONS, (CLIENT_PREFIX, PRODUCER_PREFIX),
                     READ_OPTIONS + (READER_PREFIX,), side)
    connection = parse_connection(opts)
    require_dedup = _bool(REQUIRE_DEDUPLICATION, opts.get(REQUIRE_DEDUPLICATION) or "true")
    if require_dedup:
        connection.require_admin_url("the sink checks that deduplication is enabled on its topics "
                                     f"(or set {REQUIRE_DEDUPLICATION}=false to write at-least-once)")
    topic = opts.get(TOPIC)
    if topic is not None:
        topic = normalise_topic(topic)
    write_id = opts.get(WRITE_ID)
    if write_id is not None:
        if streaming:
            raise MagnetarOptionError(f"option {WRITE_ID} applies to batch writes; a streaming query is "
                                      "identified by its checkpointed query id")
        _check_name_part(WRITE_ID, write_id)
    prefix = opts.get(PRODUCER_NAME_PREFIX) or DEFAULT_PRODUCER_NAME_PREFIX
    _check_name_part(PRODUCER_NAME_PREFIX, prefix)
    settings = opts.prefixed(PRODUCER_PREFIX, PRODUCER_KEYS, PRODUCER_FIXED)
    sink = SinkOptions(connection, topic, write_id, require_dedup, prefix, settings)
    sink.producer_kwargs()
    return sink


def _check_name_part(name: str, value: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", value):
        raise MagnetarOptionError(f"option {name}={value!r}: use 1 to 64 letters, digits, '.', '_' or '-'")


def parse_topic_selection(opts: _Options) -> TopicSelection:
    given = {name: opts.get(name) for name in (TOPIC, TOPICS, TOPICS_PATTERN)}
    present = [name for name, value in given.items() if value is not None]
    if len(present) != 1:
        what = "none" if not present else " and ".join(present)
        raise MagnetarOptionError(f"set exactly one of {TOPIC}, {TOPICS} or {TOPICS_PATTERN} (got {what})")
    pattern = given[TOPICS_PATTERN]
    if pattern is not None:
        return TopicSelection(pattern=normalise_pattern(pattern))
    raw = given[TOPIC] if given[TOPIC] is not None else given[TOPICS]
    assert raw is not None
    names = [t.strip() for t in raw.split(",") if t.strip()]
    if not names:
        raise MagnetarOptionError(f"option {present[0]} names no topic")
    if given[TOPIC] is not None and len(names) > 1:
        raise MagnetarOptionError(f"option {TOPIC} takes one topic; use {TOPICS} for a comma-separated list")
    topics = tuple(dict.fromkeys(normalise_topic(n) for n in names))
    return TopicSelection(topics=topics)


def normalise_topic(name: str) -> str:
    """Pulsar's short forms: ``t`` -> persistent://public/default/t, ``tenant/ns/t`` -> persistent://..."""
    name = name.strip()
    if "://" in name:
        domain, _, rest = name.partition("://")
        if domain not in ("persistent", "non-persistent") or rest.count("/") < 2:
            raise MagnetarOptionError(f"invalid topic name {name!r}: expected "
                                      "persistent://tenant/namespace/topic")
        if domain != "persistent":
            raise MagnetarOptionError(f"topic {name!r} is non-persistent: it keeps no backlog, so it has no "
                                      "offsets to read or replay; use a persistent topic")
        return name
    parts = name.split("/")
    if len(parts) == 1 and parts[0]:
        return f"persistent://public/default/{name}"
    if len(parts) == 3 and all(parts):
        return f"persistent://{name}"
    raise MagnetarOptionError(f"invalid topic name {name!r}: expected a short name or "
                              "persistent://tenant/namespace/topic")


def normalise_pattern(pattern: str) -> str:
    """A regex over full topic names; its tenant and namespace must be literal."""
    text = pattern.strip()
    if "://" not in text:
        text = "persistent://" + text
    domain, _, rest = text.partition("://")
    parts = rest.split("/", 2)
    literal = re.compile(r"[A-Za-z0-9_\-=:]+")
    if domain != "persistent" or len(parts) != 3 or not all(literal.fullmatch(p) for p in parts[:2]):
        raise MagnetarOptionError(f"option {TOPICS_PATTERN}={pattern!r}: expected "
                                  "persistent://tenant/namespace/<regex> with a literal tenant and namespace")
    try:
        re.compile(parts[2])
    except re.error as exc:
        raise MagnetarOptionError(f"option {TOPICS_PATTERN}={pattern!r}: invalid regex: {exc}") from None
    return text


def pattern_namespace(pattern: str) -> tuple[str, str]:
    tenant, namespace, _ = pattern.partition("://")[2].split("/", 2)
    return tenant, namespace


def _check_offsets_option(name: str, value: str | None, *, allow_latest: bool, allow_earliest: bool) -> None:
    if value is None:
        return
    text = value.strip()
    if text.lower() == "latest" and allow_latest or text.lower() == "earliest" and allow_earliest:
        return
    if text.startswith("{"):
        import json
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise MagnetarOptionError(f"option {name} is not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise MagnetarOptionError(f"option {name}: expected a JSON object of topic partition -> message id")
        return
    allowed = [w for w, ok in (("earliest", allow_earliest), ("latest", allow_latest)) if ok]
    raise MagnetarOptionError(f"option {name}={value!r}: expected {' or '.join(allowed)} or a JSON object "
                              "of topic partition -> message id")

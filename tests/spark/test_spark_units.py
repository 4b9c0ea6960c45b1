"""The data source's plain parts without Spark or a broker: offsets, options, planning, sink ids."""

from __future__ import annotations

import json

import pulsar
import pytest

from magnetar.spark.offsets import EARLIEST, MessagePosition, OffsetError, SourceOffset
from magnetar.spark.options import MagnetarOptionError, parse_sink_options, parse_source_options
from magnetar.spark.planning import plan_partitions, split_points
from magnetar.spark.rest import LedgerInfo, base_topic, tls_context, topic_path
from magnetar.spark.sink import key_partition, producer_name, sequence_id
from magnetar.spark.source import MagnetarBatchReader, MagnetarStreamReader

pytestmark = pytest.mark.spark

URLS = {"service.url": "pulsar://localhost:6650", "admin.url": "http://localhost:8080"}
P = MessagePosition


# -- offsets -------------------------------------------------------------------------------------

def test_offset_json_is_deterministic_and_round_trips() -> None:
    a = SourceOffset({"persistent://p/n/b": P(3, 4, 1), "persistent://p/n/a": EARLIEST})
    b = SourceOffset({"persistent://p/n/a": EARLIEST, "persistent://p/n/b": P(3, 4, 1)})
    assert json.dumps(a.to_json()) == json.dumps(b.to_json())
    assert json.dumps(a.to_json()) == (
        '{"topics": {"persistent://p/n/a": {"batchIndex": -1, "entryId": -1, "ledgerId": -1}, '
        '"persistent://p/n/b": {"batchIndex": 1, "entryId": 4, "ledgerId": 3}}, "version": 1}')
    assert SourceOffset.from_json(json.loads(json.dumps(a.to_json()))) == a


def test_offset_carries_the_subscription_name() -> None:
    held = SourceOffset({"persistent://p/n/a": P(3, 4)}, "magnetar-spark-0123456789abcdef")
    text = json.dumps(held.to_json())
    assert text.startswith('{"subscription": "magnetar-spark-0123456789abcdef", "topics"')
    assert SourceOffset.from_json(text) == held
    # Offsets checkpointed before subscriptions were kept have none.
    assert SourceOffset.from_json({"topics": {}, "version": 1}).subscription is None
    with pytest.raises(OffsetError, match="subscription must be a name"):
        SourceOffset.from_json({"subscription": 7, "topics": {}, "version": 1})


def test_offset_version_and_shape_are_checked() -> None:
    with pytest.raises(OffsetError, match="version 2 is not supported"):
        SourceOffset.from_json({"topics": {}, "version": 2})
    with pytest.raises(OffsetError, match="must be"):
        SourceOffset.from_json({"nope": 1})


def test_message_positions_parse_every_spelling() -> None:
    assert MessagePosition.from_json({"ledgerId": 7, "entryId": 2}, "x") == P(7, 2, -1)
    assert MessagePosition.from_json("7:2:5", "x") == P(7, 2, 5)
    assert MessagePosition.from_json("earliest", "x") == EARLIEST
    serialized = list(pulsar.MessageId(3, 7, 2, 5).serialize())
    assert MessagePosition.from_json(serialized, "x") == P(7, 2, 5)
    assert MessagePosition.from_serialized(pulsar.MessageId.earliest.serialize(), "x") == EARLIEST
    with pytest.raises(OffsetError, match="ledgerId:entryId"):
        MessagePosition.from_json("7-2", "x")


def test_whole_entry_sorts_after_its_batch_indexes() -> None:
    assert P(5, 3, 900) < P(5, 3, -1) < P(5, 4, 0)
    assert EARLIEST < P(0, 0, 0)


@pytest.mark.parametrize(("previous", "nxt", "follows"), [
    (P(5, 3, -1), P(5, 4, -1), True),
    (P(5, 3, -1), P(5, 4, 0), True),
    (P(5, 3, 2), P(5, 3, 3), True),
    (P(5, 3, 2), P(5, 3, 4), False),
    (P(5, 3, -1), P(5, 5, -1), False),
    (P(5, -1, -1), P(5, 0, -1), True),
    (P(5, 9, -1), P(8, 0, -1), False),
    (EARLIEST, P(9, 9, 9), True),
])
def test_follows_means_nothing_can_be_in_between(previous: MessagePosition, nxt: MessagePosition,
                                                 follows: bool) -> None:
    assert nxt.follows(previous) is follows


# -- planning ----------------------------------------------------------------------------------------

def test_split_points_cut_every_n_entries_across_ledgers() -> None:
    ledgers = [LedgerInfo(1, 5), LedgerInfo(4, 5), LedgerInfo(6, 3)]
    points = split_points(P(1, 1, -1), P(6, 1, 3), ledgers, 3)
    # Entries after (1,1): 1:2 1:3 1:4 | 4:0 4:1 4:2 | 4:3 4:4 6:0 | then the end's entry.
    assert points == [P(1, 4, -1), P(4, 2, -1), P(6, 0, -1)]
    parts = plan_partitions("t", P(1, 1, -1), P(6, 1, 3), ledgers, 3)
    assert [(p.start, p.end) for p in parts] == [
        (P(1, 1, -1), P(1, 4, -1)), (P(1, 4, -1), P(4, 2, -1)), (P(4, 2, -1), P(6, 0, -1)),
        (P(6, 0, -1), P(6, 1, 3))]


def test_split_points_keep_a_partial_start_entry_and_skip_a_trimmed_start() -> None:
    ledgers = [LedgerInfo(2, 4)]
    assert split_points(P(2, 0, 5), P(2, 3, -1), ledgers, 2) == [P(2, 1, -1)]
    assert split_points(P(1, 3, -1), P(2, 3, -1), ledgers, 1) == []
    assert plan_partitions("t", P(2, 3, -1), P(2, 3, -1), ledgers, 1) == []


def test_topic_paths() -> None:
    assert topic_path("persistent://public/default/a b") == "persistent/public/default/a%20b"
    assert base_topic("persistent://t/n/x-partition-3") == "persistent://t/n/x"
    assert base_topic("persistent://t/n/x-partition-y") == "persistent://t/n/x-partition-y"


# -- sink ids ---------------------------------------------------------------------------------------

def test_admin_clients_share_one_tls_context_per_setting() -> None:
    """Loading CA certificates costs tens of milliseconds; a planning process makes several clients."""
    import ssl
    assert tls_context(True) is tls_context(True)
    assert tls_context(True).verify_mode == ssl.CERT_REQUIRED and tls_context(True).check_hostname
    assert tls_context(False).verify_mode == ssl.CERT_NONE and not tls_context(False).check_hostname
    with pytest.raises(FileNotFoundError):
        tls_context("/no/such/ca.pem")


def test_sequence_ids_grow_across_epochs_and_never_use_zero() -> None:
    assert sequence_id(0, 1) == 1
    assert sequence_id(0, 2**32 - 1) < sequence_id(1, 1) < sequence_id(1, 2)
    with pytest.raises(Exception, match="at most"):
        sequence_id(0, 2**32)
    assert producer_name("magnetar-spark", "q1", 3) == "magnetar-spark-q1-3"


def test_key_routing_is_stable_murmur3() -> None:
    assert [key_partition(k, 4) for k in ("a", "b", "a")] == [key_partition("a", 4), key_partition("b", 4),
                                                                key_partition("a", 4)]
    assert {key_partition(f"k{i}", 4) for i in range(100)} == {0, 1, 2, 3}


# -- options ---------------------------------------------------------------------------------------

def test_source_options_parse() -> None:
    opts = parse_source_options({**URLS, "topics": "a, persistent://t/n/b,a", "failOnDataLoss": "false",
                                 "maxRecordsPerTrigger": "10", "pulsar.client.operationTimeoutMs": "1500",
                                 "pulsar.reader.receiverQueueSize": "50"}, streaming=True)
    assert opts.selection.topics == ("persistent://public/default/a", "persistent://t/n/b")
    assert not opts.fail_on_data_loss and opts.max_records_per_trigger == 10
    assert opts.connection.client_kwargs() == {"operation_timeout_seconds": 2}
    assert opts.reader_kwargs() == {"receiver_queue_size": 50}


@pytest.mark.parametrize(("options", "streaming", "message"), [
    ({"service.url": None}, False, "service.url is required"),
    ({"service.url": "http://localhost:6650"}, False, "expected a pulsar:// or pulsar\\+ssl:// URL"),
    ({"admin.url": None}, False, "admin.url is required"),
    ({"admin.url": "localhost:8080"}, False, "expected an http:// or https:// URL"),
    ({"topics": "a,b"}, False, "set exactly one of topic, topics or topicsPattern"),
    ({"topic": None}, False, "set exactly one of topic, topics or topicsPattern \\(got none\\)"),
    ({"topic": "a,b"}, False, "takes one topic; use topics"),
    ({"topic": "non-persistent://public/default/x"}, False, "non-persistent"),
    ({"startingOffset": "earliest"}, False, "unknown option 'startingoffset'"),
    ({"startingOffsets": "first"}, False, "expected earliest or latest or a JSON object"),
    ({"startingOffsets": "{bad json"}, False, "not valid JSON"),
    ({"startingOffsets": "earliest", "startingTime": "1000"}, False, "contradict each other"),
    ({"endingOffsets": "earliest"}, False, "expected latest or a JSON object"),
    ({"endingOffsets": "latest"}, True, "endingOffsets applies to batch reads only"),
    ({"maxRecordsPerTrigger": "10"}, False, "applies to streaming reads only"),
    ({"maxRecordsPerTrigger": "0"}, True, "must be at least 1"),
    ({"subscriptionName": "s"}, False, "subscriptionName applies to streaming reads only"),
    ({"subscriptionName": "a/b"}, True, "use 1 to 64 letters"),
    ({"pollTimeoutMs": "0"}, True, "pollTimeoutMs=0: must be at least 1"),
    ({"failOnDataLoss": "maybe"}, False, "expected true or false"),
    ({"pulsar.client.operationTimeoutMs": "soon"}, False, "expected an integer"),
    ({"pulsar.client.bogus": "1"}, False, "unknown option pulsar.client.bogus"),
    ({"pulsar.producer.sendTimeoutMs": "1"}, False, "pulsar.producer.sendtimeoutms does not apply"),
    ({"writeId": "w"}, False, "writeId does not apply when reading"),
    ({"topic": None, "topicsPattern": "persistent://public/def.*/x"}, False, "literal tenant and namespace"),
    ({"topic": None, "topicsPattern": "public/default/(x"}, False, "invalid regex"),
])
def test_bad_source_options(options: dict[str, str | None], streaming: bool, message: str) -> None:
    merged = {**URLS, "topic": "t", **options}
    with pytest.raises(MagnetarOptionError, match=message):
        parse_source_options({k: v for k, v in merged.items() if v is not None}, streaming=streaming)


@pytest.mark.parametrize(("options", "streaming", "message"), [
    ({"startingOffsets": "earliest"}, False, "startingOffsets does not apply when writing"),
    ({"topics": "a,b"}, False, "topics does not apply when writing"),
    ({"admin.url": None}, False, "requireDeduplication=false"),
    ({"writeId": "w"}, True, "writeId applies to batch writes"),
    ({"writeId": "has space"}, False, "use 1 to 64 letters"),
    ({"pulsar.producer.producerName": "mine"}, False, "producerName cannot be set"),
    ({"pulsar.producer.initialSequenceId": "10"}, False, "derives every sequence id"),
    ({"pulsar.producer.compressionType": "GZIP"}, False, "expected one of NONE, LZ4"),
])
def test_bad_sink_options(options: dict[str, str | None], streaming: bool, message: str) -> None:
    merged = {**URLS, "topic": "t", **options}
    with pytest.raises(MagnetarOptionError, match=message):
        parse_sink_options({k: v for k, v in merged.items() if v is not None}, streaming=streaming)


def test_sink_without_deduplication_check_needs_no_admin_url() -> None:
    opts = parse_sink_options({"service.url": URLS["service.url"], "topic": "t",
                               "requireDeduplication": "false", "pulsar.producer.batchingMaxMessages": "10"},
                              streaming=False)
    assert opts.topic == "persistent://public/default/t"
    assert opts.producer_kwargs() == {"batching_max_messages": 10}


def test_reader_constructors_do_not_connect() -> None:
    # Port 9 (discard) on a reserved address: any connection attempt would hang or fail.
    # (The data source's schema() does ask the admin API: the topic's schema decides the columns.)
    unreachable = {"service.url": "pulsar://192.0.2.1:9", "admin.url": "http://192.0.2.1:9", "topic": "t"}
    assert MagnetarBatchReader(parse_source_options(unreachable, streaming=False)) is not None
    assert MagnetarStreamReader(parse_source_options(unreachable, streaming=True)) is not None

"""Pure pieces of the admin API and CLIs: stats shapes, latency buckets, units."""

from __future__ import annotations

import math

import pytest
import typer

from magnetar.admin.messages import pulsar_date
from magnetar.admin.stats import aggregate_topic_stats, deleted_ranges_text
from magnetar.cli.output import parse_duration_ms, parse_size_bytes
from magnetar.cli.perf import LatencyHistogram
from magnetar.core.positions import Position
from magnetar.core.stats import LATENCY_BUCKET_NAMES, LatencyBuckets, LatencyQuantiles


def test_deleted_ranges_print_as_pulsar_range_sets() -> None:
    assert deleted_ranges_text([]) == "[]"
    ranges = [(Position(3, 5), Position(3, 7)), (Position(3, 9), Position(3, 9))]
    assert deleted_ranges_text(ranges) == "[(3:4..3:7], (3:8..3:9]]"


def _part(msgs: int, producer: str, consumer: str, backlog: int) -> dict[str, object]:
    return {
        "msgRateIn": 1.0, "msgThroughputIn": 10.0, "msgInCounter": msgs, "storageSize": 100,
        "earliestMsgPublishTimeInBacklogs": 0, "deduplicationStatus": "Disabled",
        "backlogQuotaLimitSize": 1000, "backlogQuotaLimitTime": -1, "oldestBacklogMessageAgeSeconds": backlog * 10,
        "oldestBacklogMessageSubscriptionName": f"s{backlog}", "topicCreationTimeStamp": 100 + msgs,
        "lastPublishTimeStamp": 1000 + msgs,
        "publishers": [{"producerName": producer, "msgRateIn": 1.0, "msgThroughputIn": 10.0}],
        "subscriptions": {"s": {"msgBacklog": backlog, "msgOutCounter": msgs, "type": "Shared",
                                "consumers": [{"consumerName": consumer, "msgOutCounter": msgs}]}},
    }


def test_partitions_aggregate_by_name() -> None:
    total = aggregate_topic_stats([_part(3, "p", "c", 1), _part(4, "p", "c", 2), _part(5, "q", "d", 0)])
    assert total["msgInCounter"] == 12 and total["storageSize"] == 300
    assert total["averageMsgSize"] == pytest.approx(10.0)
    assert [(p["producerName"], p["msgRateIn"]) for p in total["publishers"]] == [("p", 2.0), ("q", 1.0)]
    sub = total["subscriptions"]["s"]
    assert sub["msgBacklog"] == 3 and sub["msgOutCounter"] == 12
    assert [(c["consumerName"], c["msgOutCounter"]) for c in sub["consumers"]] == [("c", 7), ("d", 5)]
    assert (total["oldestBacklogMessageAgeSeconds"], total["oldestBacklogMessageSubscriptionName"]) == (20, "s2")
    assert total["topicCreationTimeStamp"] == 103 and total["lastPublishTimeStamp"] == 1005
    assert (total["backlogQuotaLimitSize"], total["backlogQuotaLimitTime"]) == (1000, -1)


def test_latency_buckets_follow_pulsar_bounds() -> None:
    buckets = LatencyBuckets()
    for ms in (0.1, 0.5, 0.7, 3, 10, 15, 2000):
        buckets.observe(ms)
    named = dict(zip(LATENCY_BUCKET_NAMES, buckets.counts, strict=True))
    assert named["0_5"] == 2 and named["1"] == 1 and named["5"] == 1 and named["10"] == 1
    assert named["20"] == 1 and named["overflow"] == 1 and buckets.count == 7


def test_quantiles_over_recent_samples() -> None:
    window = LatencyQuantiles(samples_max=100)
    assert all(math.isnan(v) for _, v in window.quantiles())
    for i in range(1, 201):
        window.observe(i / 1000)
    values = dict(window.quantiles())
    assert values[0.0] == 0.101 and values[1.0] == 0.2 and window.count == 200


def test_perf_histogram_percentiles_within_one_percent() -> None:
    histogram = LatencyHistogram()
    for i in range(1, 1001):
        histogram.record(float(i))
    assert histogram.percentile(50) == pytest.approx(500, rel=0.02)
    assert histogram.percentile(99) == pytest.approx(990, rel=0.02)
    assert histogram.summary()["max"] == 1000.0


def test_units() -> None:
    assert parse_duration_ms("250ms") == 250 and parse_duration_ms("2m") == 120_000 and parse_duration_ms("3") == 3000
    assert parse_size_bytes("10M") == 10 * 1024 * 1024 and parse_size_bytes("-1") == -1
    with pytest.raises(typer.BadParameter):
        parse_duration_ms("soon")
    assert pulsar_date(1_700_000_000_123) == "2023-11-14T22:13:20.123Z"
    # Java's ISO_OFFSET_DATE_TIME, which the Java admin client's peekMessages parses
    assert pulsar_date(1_700_000_000_120) == "2023-11-14T22:13:20.12Z"
    assert pulsar_date(1_700_000_000_000) == "2023-11-14T22:13:20Z"

"""A scrape's text made by a child process is the text the event loop would make."""

from __future__ import annotations

import asyncio
import io
import sys

import pytest

from magnetar.admin.metrics import MetricsSnapshot, _rows_text
from magnetar.admin.metrics_text import (
    CONSUMER_COLUMNS,
    LATENCY_SERIES,
    SUBSCRIPTION_COLUMNS,
    TOPIC_COLUMNS,
    ScrapeRows,
    rows_text,
)
from magnetar.admin.metrics_worker import ROWS_PER_FRAME, frames, read_rows, text_elsewhere


def sample_rows(topics: int, rows: type[ScrapeRows] = ScrapeRows) -> ScrapeRows:
    snap = rows("standalone", True, True)
    for i in range(topics):
        key = ("standalone", "public/default", f"persistent://public/default/t-{i}")
        snap.topic_counts["public/default"] += 1
        snap.topic_rows[key] = tuple(float(i + column) for column in range(len(TOPIC_COLUMNS)))
        snap.subscription_rows[(*key, "sub")] = (i / 3,) * len(SUBSCRIPTION_COLUMNS)
        snap.consumer_rows[(*key, "sub", "c", "0")] = (1.0,) * len(CONSUMER_COLUMNS)
        snap.evictions[(*key, "size")] += 1.0
        for base in LATENCY_SERIES:
            snap.latency[base][key] = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13.5)
    snap.subscription_rows[("standalone", "public/default", 'odd "name"\\', "s")] = (1e100,) * len(SUBSCRIPTION_COLUMNS)
    return snap


def collect(chunks: object) -> bytes:
    async def gather() -> bytes:
        return b"".join([chunk async for chunk in chunks])  # type: ignore[attr-defined]
    return asyncio.run(gather())


def test_the_rows_survive_the_stream() -> None:
    rows = sample_rows(3 * ROWS_PER_FRAME + 7)
    assert read_rows(io.BytesIO(b"".join(frames(rows)))) == rows


def test_a_stream_cut_inside_a_frame_is_an_error() -> None:
    stream = b"".join(frames(sample_rows(5)))
    with pytest.raises(EOFError, match="inside a frame"):
        read_rows(io.BytesIO(stream[:-3]))


@pytest.mark.timeout(60)
def test_the_child_writes_the_text_the_loop_would() -> None:
    rows = sample_rows(2 * ROWS_PER_FRAME + 1)
    expected = b"".join(rows_text(rows))
    assert b'odd \\"name\\"\\\\' in expected
    assert collect(text_elsewhere(rows)) == expected


@pytest.mark.timeout(60)
def test_without_a_child_the_loop_makes_the_text(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = sample_rows(10, MetricsSnapshot)
    assert isinstance(rows, MetricsSnapshot)
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    assert collect(_rows_text(rows)) == b"".join(rows_text(rows))

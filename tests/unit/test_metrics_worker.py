"""A scrape's text made by a child process, fed the rows a part at a time, is the text
the event loop would make from all of them."""

from __future__ import annotations

import asyncio
import fcntl
import io
import os
import socket
import sys
import threading
from collections.abc import AsyncIterator, Iterable
from types import SimpleNamespace

import pytest

from magnetar.admin.metrics import _rows_text, text_on_the_loop
from magnetar.admin.metrics_text import (
    CONSUMER_COLUMNS,
    LATENCY_SERIES,
    SUBSCRIPTION_COLUMNS,
    TOPIC_COLUMNS,
    ScrapeRows,
    rows_text,
)
from magnetar.admin.metrics_worker import (
    READ_BYTES,
    NoWorker,
    header_frame,
    part_frame,
    read_rows,
    text_elsewhere,
)

NAMESPACE = ("standalone", "public/default")


def topic_part(i: int, by_topic: bool = True) -> ScrapeRows:
    """One topic's rows, as the scrape makes them (keyed by namespace when not by topic)."""
    part = ScrapeRows("standalone", by_topic, True)
    key = (*NAMESPACE, f"persistent://public/default/t-{i}") if by_topic else NAMESPACE
    part.topic_counts["public/default"] += 1
    part.topic_rows[key] = tuple(float(i + column) for column in range(len(TOPIC_COLUMNS)))
    part.evictions[(*key, "size")] += 1.0
    for base in LATENCY_SERIES:
        part.latency[base][key] = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13.5)
    if by_topic:
        part.subscription_rows[(*key, "sub")] = (i / 3,) * len(SUBSCRIPTION_COLUMNS)
        part.consumer_rows[(*key, "sub", "c", "0")] = (1.0,) * len(CONSUMER_COLUMNS)
    return part


def sample_parts(topics: int, per_part: int = 7, by_topic: bool = True) -> list[ScrapeRows]:
    parts = []
    for first in range(0, topics, per_part):
        part = ScrapeRows("standalone", by_topic, True)
        for i in range(first, min(topics, first + per_part)):
            part.add(topic_part(i, by_topic))
        parts.append(part)
    if by_topic:
        parts[-1].subscription_rows[(*NAMESPACE, 'odd "name"\\', "s")] = (1e100,) * len(SUBSCRIPTION_COLUMNS)
    return parts


def whole(parts: Iterable[ScrapeRows]) -> ScrapeRows:
    parts = list(parts)
    rows = parts[0].empty()
    for part in parts:
        rows.add(part)
    return rows


async def each(parts: Iterable[ScrapeRows]) -> AsyncIterator[ScrapeRows]:
    for part in parts:
        yield part


def collect(chunks: AsyncIterator[bytes]) -> bytes:
    async def gather() -> bytes:
        return b"".join([chunk async for chunk in chunks])
    return asyncio.run(gather())


def stream(parts: list[ScrapeRows]) -> bytes:
    return header_frame(parts[0]) + b"".join(part_frame(part) for part in parts)


def test_the_parts_survive_the_stream() -> None:
    parts = sample_parts(50)
    assert read_rows(io.BytesIO(stream(parts))) == whole(parts)


def test_rows_by_namespace_are_summed_over_parts() -> None:
    rows = read_rows(io.BytesIO(stream(sample_parts(10, per_part=3, by_topic=False))))
    assert rows.topic_counts == {"public/default": 10}
    assert rows.topic_rows[NAMESPACE][0] == sum(range(10))
    assert rows.evictions[(*NAMESPACE, "size")] == 10.0
    assert rows.latency["pulsar_storage_write_latency"][NAMESPACE][0] == 10


def test_a_stream_cut_inside_a_frame_is_an_error() -> None:
    with pytest.raises(EOFError, match="inside a frame"):
        read_rows(io.BytesIO(stream(sample_parts(5))[:-3]))


@pytest.mark.timeout(60)
def test_the_child_writes_the_text_the_loop_would() -> None:
    parts = sample_parts(400)
    expected = b"".join(rows_text(whole(parts)))
    assert b'odd \\"name\\"\\\\' in expected
    assert collect(text_elsewhere(parts[0].empty(), each(parts))) == expected


@pytest.mark.timeout(60)
def test_without_a_child_nothing_is_read_and_the_loop_makes_the_text(monkeypatch: pytest.MonkeyPatch) -> None:
    parts = sample_parts(20)
    taken: list[ScrapeRows] = []

    async def watched() -> AsyncIterator[ScrapeRows]:
        for part in parts:
            taken.append(part)
            yield part

    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    with pytest.raises(NoWorker):
        collect(text_elsewhere(parts[0].empty(), watched()))
    assert taken == []
    expected = b"".join(rows_text(whole(parts)))
    assert collect(text_on_the_loop(parts[0].empty(), each(parts))) == expected


@pytest.mark.timeout(60)
def test_a_scrape_falls_back_to_the_loop_when_no_child_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    header = ScrapeRows("standalone", True, True)
    scrape = SimpleNamespace(header=header, broker=SimpleNamespace(topics={}, activity=None))
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    assert collect(_rows_text(scrape)) == b"".join(rows_text(header))  # type: ignore[arg-type]


@pytest.mark.timeout(60)
def test_a_child_that_fails_fails_the_scrape_and_is_fed_no_further(monkeypatch: pytest.MonkeyPatch) -> None:
    import magnetar.admin.metrics_worker as worker

    monkeypatch.setattr(worker, "_CHILD_START", "import sys; sys.stdin.buffer.read(10); sys.exit(3)")
    parts = sample_parts(3000, per_part=1)
    taken: list[ScrapeRows] = []

    async def watched() -> AsyncIterator[ScrapeRows]:
        for part in parts:
            taken.append(part)
            yield part
            await asyncio.sleep(0.001)  # time for the child's exit to be seen

    with pytest.raises(RuntimeError, match="exited with status 3"):
        collect(text_elsewhere(parts[0].empty(), watched()))
    assert len(taken) < len(parts)


def unchunked(body: bytes) -> list[bytes]:
    """The chunks of an HTTP/1.1 chunked body (without its last, empty chunk)."""
    chunks = []
    while body:
        head, _, rest = body.partition(b"\r\n")
        size = int(head, 16)
        assert size > 0, "an empty chunk would end the response"
        assert rest[size:size + 2] == b"\r\n"
        chunks.append(rest[:size])
        body = rest[size + 2:]
    return chunks


def read_until_closed(sock: socket.socket, into: bytearray) -> None:
    while data := sock.recv(1 << 16):
        into += data


@pytest.mark.timeout(60)
def test_given_the_scrapers_socket_the_child_writes_the_text_there_as_chunks() -> None:
    parts = sample_parts(400)
    expected = b"".join(rows_text(whole(parts)))
    assert len(expected) > 3 * READ_BYTES
    ours, scraper = socket.socketpair()
    ours.setblocking(False)  # as the web server keeps it: the child shares its flags
    received = bytearray()
    reader = threading.Thread(target=read_until_closed, args=(scraper, received))
    reader.start()
    try:
        yielded = collect(text_elsewhere(parts[0].empty(), each(parts), socket_fd=ours.fileno()))
        assert fcntl.fcntl(ours.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK
    finally:
        ours.close()
        reader.join(30)
        scraper.close()
    assert yielded == b""
    chunks = unchunked(bytes(received))
    assert b"".join(chunks) == expected
    assert all(len(chunk) >= READ_BYTES for chunk in chunks[:-1])


@pytest.mark.timeout(60)
def test_a_scraper_that_is_gone_fails_the_scrape() -> None:
    parts = sample_parts(400)
    ours, scraper = socket.socketpair()
    ours.setblocking(False)
    scraper.close()
    try:
        with pytest.raises(RuntimeError, match="exited with status 1"):
            collect(text_elsewhere(parts[0].empty(), each(parts), socket_fd=ours.fileno()))
    finally:
        ours.close()

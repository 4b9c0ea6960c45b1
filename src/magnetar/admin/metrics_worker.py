"""A scrape's text made in a child process, so formatting it does not hold the broker.

At 50,000 topics the text of one scrape is about 440 MB; made on the event loop, even
in slices, it takes the loop's interpreter for 15 to 20 seconds, and every publish
waits behind a slice or two (p99 4 to 6 ms against 0.6 without a scrape). Here the
loop only pickles the rows into the stdin of a child process (this module's
:func:`main`), which writes the text to its stdout for the loop to pass on: the
formatting runs on another core and under another interpreter lock.

The rows go as they are read, a part (a slice of topics) at a time, and are dropped on
the loop once sent: held to the end of the scrape, they were tens of thousands of
objects that every young collection during the scrape walked again (3 to 8 ms each at
50,000 topics). The child adds the parts up (rows by namespace sum over parts).

Given the scraper's socket (:mod:`magnetar.admin.scrape_socket`), the child writes the
text there itself, as HTTP/1.1 chunks, and nothing comes back through the loop.

The stream into the child is a header (cluster, labels wanted) and then a frame per
part, each a 4-byte length and a pickle; the child answers once the input ends. The
child is the broker's own program: nothing else writes to it, so its pickles are trusted.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import socket
import struct
import subprocess
import sys
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from pathlib import Path
from typing import Any, BinaryIO

from magnetar.admin.metrics_text import ScrapeRows, rows_text
from magnetar.admin.scrape_pacing import Activity, ScrapePacer
from magnetar.wire.gathering import gathered

#: bytes read from the child at a time: each piece's way to the scraper holds the loop
#: once, so fewer, larger pieces (publish p99 during scrapes at 10,000 topics, interleaved:
#: 0.92 ms with 16 KB pieces, 0.82 with 64 KB, 0.79 with 256 KB, 0.69 without a scrape)
READ_BYTES = 1 << 18
#: the child's scheduling priority: the lowest, as a scrape may wait and a publish should not
WORKER_NICENESS = 19
#: how long the child waits for the scraper to take one chunk of text from its socket
SEND_TIMEOUT_S = 60.0
_LENGTH = struct.Struct(">I")
#: the child's argument that names the socket to write the text to, as chunks
_CHUNKS_TO = "--chunks-to"
#: the child's program: this module's main, at the lowest priority from its first import on
#: (the interpreter's start and imports are 100 ms of CPU, which at the default priority took
#: a core from the broker and its clients: publishes of 4 to 14 ms as each scrape's child started)
_CHILD_START = f"import os, runpy; os.nice({WORKER_NICENESS}); runpy.run_module({__name__!r}, run_name='__main__')"


class NoWorker(Exception):
    """No child process could be started (nothing was read from the rows yet)."""


def header_frame(rows: ScrapeRows) -> bytes:
    return _frame((rows.cluster, rows.by_topic, rows.with_consumers))


def part_frame(part: ScrapeRows) -> bytes:
    """A part's rows, its empty tables left out."""
    return _frame([(name, list(table.items())) for name, table in part.tables().items() if table])


def _frame(value: object) -> bytes:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(data)) + data


def read_rows(source: BinaryIO) -> ScrapeRows:
    """The rows of the header and parts sent, added up, read to the end of the stream."""
    cluster, by_topic, with_consumers = _read_frame(source)
    rows = ScrapeRows(cluster, by_topic, with_consumers)
    while (frame := _read_frame(source)) is not None:
        for name, items in frame:
            rows.add_table(name, items)
    return rows


def _read_frame(source: BinaryIO) -> Any:
    head = source.read(_LENGTH.size)
    if not head:
        return None
    if len(head) != _LENGTH.size:
        raise EOFError("the scrape's rows ended inside a frame's length")
    size = _LENGTH.unpack(head)[0]
    data = source.read(size)
    if len(data) != size:
        raise EOFError(f"the scrape's rows ended inside a frame ({len(data)} of {size} bytes)")
    return pickle.loads(data)


async def text_elsewhere(header: ScrapeRows, parts: AsyncIterable[ScrapeRows],
                         activity: Activity | None = None, socket_fd: int | None = None) -> AsyncIterator[bytes]:
    """The text of the parts' rows (labelled as ``header`` says), made by a child process
    that is fed each part as it comes. Raises NoWorker when the child cannot be started,
    before ``parts`` is touched; the child is killed if the scrape is dropped. Each piece
    of text is passed on when the loop is idle (``activity``): a piece is copied twice
    on its way to the scraper, and pieces taken as they come landed inside publishes.
    Given ``socket_fd``, the child writes the text to that socket as HTTP/1.1 chunks
    instead, and nothing is yielded."""
    loop = asyncio.get_running_loop()
    arguments, fds = ([_CHUNKS_TO, str(socket_fd)], (socket_fd,)) if socket_fd is not None else ([], ())
    try:
        # subprocess starts the child with vfork; uvloop's own spawn forks, which copies the
        # page tables of a broker with many topics on the loop (70 ms at 1.5 GB)
        child = subprocess.Popen([sys.executable, "-c", _CHILD_START, *arguments], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, env=_child_environment(), pass_fds=fds)
    except OSError as exc:
        raise NoWorker(str(exc)) from exc
    assert child.stdin is not None and child.stdout is not None
    reader = asyncio.StreamReader(limit=READ_BYTES)
    try:
        read_transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), child.stdout)
        write_transport, pipe = await loop.connect_write_pipe(_PipeWriter, child.stdin)
    except BaseException:
        child.kill()
        await loop.run_in_executor(None, child.wait)
        raise
    try:
        write_transport.write(header_frame(header))
        async for part in parts:
            if pipe.lost:
                break  # the child is gone: its exit status below says so
            write_transport.write(part_frame(part))
            await pipe.writable()
        write_transport.close()
        pacer = ScrapePacer(activity)
        while chunk := await reader.read(READ_BYTES):
            yield chunk
            if activity is not None:
                await pacer.rest()
        if await loop.run_in_executor(None, child.wait) != 0:
            raise RuntimeError(f"the metrics worker exited with status {child.returncode}")
    finally:
        write_transport.close()
        read_transport.close()
        if child.poll() is None:
            child.kill()
            await loop.run_in_executor(None, child.wait)


class _PipeWriter(asyncio.BaseProtocol):
    """Flow control for the pipe into the child: writing waits while its buffer is full."""

    def __init__(self) -> None:
        self._ready = asyncio.Event()
        self._ready.set()
        self.lost = False

    def pause_writing(self) -> None:
        self._ready.clear()

    def resume_writing(self) -> None:
        self._ready.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._ready.set()

    async def writable(self) -> None:
        await self._ready.wait()


def _child_environment() -> dict[str, str]:
    """The broker's environment, with the directory it imports magnetar from first on the
    child's path (a broker run from a source tree need not have it installed)."""
    package_root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": package_root if not path else os.pathsep.join((package_root, path))}


def write_chunks(sock: socket.socket, pieces: Iterable[bytes]) -> None:
    """The pieces as the chunks of an HTTP/1.1 body, READ_BYTES or more each (the last
    may be less), waiting for the socket to take each (it is the web server's, which
    reads and writes it without blocking: its descriptor's flags are shared, so they are
    left as they are, and a timeout makes ``sendall`` wait with ``poll``)."""
    sock.settimeout(SEND_TIMEOUT_S)
    for chunk in gathered(pieces, READ_BYTES):
        sock.sendall(b"%x\r\n%b\r\n" % (len(chunk), chunk))


def main(arguments: list[str]) -> None:
    rows = read_rows(sys.stdin.buffer)
    if arguments[:1] == [_CHUNKS_TO]:
        with socket.socket(fileno=int(arguments[1])) as sock:
            try:
                write_chunks(sock, rows_text(rows))
            except OSError as exc:  # the scraper left or stopped reading: one line, not a trace
                sys.exit(f"metrics worker: the scraper's connection failed: {exc}")
        return
    out = sys.stdout.buffer
    for chunk in rows_text(rows):
        out.write(chunk)
    out.flush()


if __name__ == "__main__":
    main(sys.argv[1:])

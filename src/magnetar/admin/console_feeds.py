"""Server-sent events for the web console's live pages: one answer built once a second
however many consoles watch it, pushed to each as bytes encoded once.

A page of the console opens one long response (``text/event-stream``) in place of a
request a second: the broker then parses no request, routes nothing and encodes nothing
per console and per second, and writes only what changed. What a stream carries is made
by the functions the REST routes answer with, so a page shows the figures the admin API
gives. Each stream ends after ``STREAM_LIFETIME_S``; the console opens it again, which
checks the caller's credentials and permissions again as any request does.

A feed (``Feeds.open``) builds its answer when the first listener opens it (an error
then is the request's error, with its status), then every ``PUSH_INTERVAL_S`` while
anyone listens, and stops when the last listener leaves. A build that fails later (the
topic was deleted) sends an ``error`` event, ``{"status": ..., "reason": ...}``, and
ends the feed's streams.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from typing import Any

from fastapi.responses import StreamingResponse
from pydantic_core import to_json

from magnetar.admin.errors import RestError

#: the shortest time between two builds of a feed, and so between two events of a stream
PUSH_INTERVAL_S = 1.0
#: a stream ends after this long; the console opens it again (credentials checked again)
STREAM_LIFETIME_S = 30.0
#: what a stream's answer carries besides its type: no caching, no buffering by a proxy
STREAM_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}

Build = Callable[[], Awaitable[bytes]]


def encoded(answer: Any) -> bytes:
    """An answer as the data of an event: compact JSON on one line, by the encoder the REST
    answers are made with (pydantic's: a third of the json module's time on a page of 50
    topics, whose float callbacks are Python), a figure that is not a number as null."""
    return to_json(answer, inf_nan_mode="null")


def event(name: str, data: bytes) -> bytes:
    """One server-sent event; ``data`` is one line (JSON escapes its line breaks)."""
    return b"event: " + name.encode() + b"\ndata: " + data + b"\n\n"


class Listener:
    """One open stream: the frames its feeds pushed and it has not written yet; None ends it."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()

    def push(self, frame: bytes | None) -> None:
        self.queue.put_nowait(frame)


class Feed:
    def __init__(self, key: Hashable, build: Build, interval_s: float, on_idle: Callable[[Hashable], None]) -> None:
        self.key = key
        self.build = build
        self.interval_s = interval_s
        self.frame = b""
        self.listeners: set[Listener] = set()
        self._on_idle = on_idle
        self._task: asyncio.Task[None] | None = None

    def join(self, listener: Listener) -> None:
        self.listeners.add(listener)
        listener.push(self.frame)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def leave(self, listener: Listener) -> None:
        self.listeners.discard(listener)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self.listeners:
                await asyncio.sleep(self.interval_s)
                if not self.listeners:
                    break
                ended = False
                try:
                    frame = await self.build()
                except RestError as exc:
                    frame, ended = event("error", encoded({"status": exc.status, "reason": exc.reason})), True
                changed = frame != self.frame
                self.frame = frame
                now = loop.time()
                for listener in list(self.listeners):
                    if changed:
                        listener.push(frame)
                    if ended or now >= listener.deadline:
                        listener.push(None)
                        self.listeners.discard(listener)
                if ended:
                    break
        finally:
            self._task = None
            for listener in list(self.listeners):
                listener.push(None)
            self.listeners.clear()
            self._on_idle(self.key)


class Feeds:
    """The feeds open now, by key: who asks for the same key shares one build a second."""

    def __init__(self, interval_s: float = PUSH_INTERVAL_S, lifetime_s: float = STREAM_LIFETIME_S) -> None:
        self.interval_s = interval_s
        self.lifetime_s = lifetime_s
        self._feeds: dict[Hashable, Feed] = {}

    def __len__(self) -> int:
        return len(self._feeds)

    async def feed(self, key: Hashable, build: Build) -> Feed:
        """The feed of ``key``, with its answer built now if it is new (raising what the build raises)."""
        found = self._feeds.get(key)
        if found is not None:
            return found
        frame = await build()
        found = self._feeds.get(key)  # another listener may have opened it meanwhile
        if found is None:
            found = self._feeds[key] = Feed(key, build, self.interval_s, self._idle)
            found.frame = frame
        return found

    def _idle(self, key: Hashable) -> None:
        feed = self._feeds.get(key)
        if feed is not None and not feed.listeners:
            del self._feeds[key]

    def stream(self, feeds: list[Feed]) -> StreamingResponse:
        """One response carrying the events of ``feeds`` until the lifetime ends or a feed ends."""
        listener = Listener(asyncio.get_running_loop().time() + self.lifetime_s)
        for feed in feeds:
            feed.join(listener)
        return StreamingResponse(_frames(listener, feeds), media_type="text/event-stream", headers=STREAM_HEADERS)


async def _frames(listener: Listener, feeds: list[Feed]) -> AsyncIterator[bytes]:
    try:
        while True:
            frame = await listener.queue.get()
            if frame is None:
                return
            # several feeds' frames waiting go out in one write
            while not listener.queue.empty():
                more = listener.queue.get_nowait()
                if more is None:
                    yield frame
                    return
                frame += more
            if frame:
                yield frame
    finally:
        for feed in feeds:
            feed.leave(listener)
        with contextlib.suppress(Exception):
            listener.queue.put_nowait(None)

"""console_feeds: one build per interval however many streams listen, only changed answers
pushed, streams ended by their lifetime or by a failed build, feeds dropped when unheard."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from magnetar.admin.console_feeds import Feeds, encoded, event
from magnetar.admin.errors import RestError

WAIT_S = 10.0


class Counting:
    """A build whose answer is ``values`` in turn (the last one kept), counting its calls."""

    def __init__(self, *values: Any) -> None:
        self.values = list(values)
        self.calls = 0

    async def __call__(self) -> bytes:
        self.calls += 1
        value = self.values[min(self.calls, len(self.values)) - 1]
        if isinstance(value, RestError):
            raise value
        return event("figures", encoded(value))


def frames_of(feeds: Feeds, *feed: Any) -> AsyncIterator[bytes]:
    body: AsyncIterator[bytes] = feeds.stream(list(feed)).body_iterator  # type: ignore[assignment]
    return body


async def next_frame(frames: AsyncIterator[bytes]) -> bytes:
    return await asyncio.wait_for(anext(frames), WAIT_S)


def test_an_event_is_one_line_of_json() -> None:
    frame = event("topic", encoded({"name": "a\nb", "rate": 1.5}))
    assert frame == b'event: topic\ndata: {"name":"a\\nb","rate":1.5}\n\n'
    assert json.loads(frame.split(b"data: ", 1)[1]) == {"name": "a\nb", "rate": 1.5}
    assert encoded({"rate": float("nan"), "name": "é"}) == '{"rate":null,"name":"é"}'.encode()


def test_listeners_share_one_build_and_get_only_changes() -> None:
    async def run() -> None:
        feeds = Feeds(interval_s=0.01, lifetime_s=WAIT_S)
        build = Counting({"n": 1}, {"n": 1}, {"n": 1}, {"n": 2})
        first = frames_of(feeds, await feeds.feed("k", build))
        second = frames_of(feeds, await feeds.feed("k", build))
        assert build.calls == 1 and len(feeds) == 1
        assert await next_frame(first) == await next_frame(second) == event("figures", b'{"n":1}')
        # the builds that gave the same answer pushed nothing: the next frame is the change
        assert await next_frame(first) == await next_frame(second) == event("figures", b'{"n":2}')
        assert build.calls == 4
        await first.aclose()  # type: ignore[attr-defined]
        await second.aclose()  # type: ignore[attr-defined]
        await asyncio.wait_for(until(lambda: len(feeds) == 0), WAIT_S)
    asyncio.run(run())


async def until(done: Any) -> None:
    while not done():
        await asyncio.sleep(0.005)


def test_a_stream_ends_with_its_lifetime_and_the_unheard_feed_stops() -> None:
    async def run() -> None:
        feeds = Feeds(interval_s=0.01, lifetime_s=0.05)
        build = Counting({"n": 1})
        frames = frames_of(feeds, await feeds.feed("k", build))
        assert await next_frame(frames) == event("figures", b'{"n":1}')
        with pytest.raises(StopAsyncIteration):
            await next_frame(frames)
        await asyncio.wait_for(until(lambda: len(feeds) == 0), WAIT_S)
        calls = build.calls
        await asyncio.sleep(0.05)
        assert build.calls == calls  # nobody listens: nothing is built
    asyncio.run(run())


def test_a_failed_build_sends_an_error_event_and_ends_the_streams() -> None:
    async def run() -> None:
        feeds = Feeds(interval_s=0.01, lifetime_s=WAIT_S)
        gone = RestError(404, "Topic not found")
        with pytest.raises(RestError):  # the first build's failure is the request's
            await feeds.feed("k", Counting(gone))
        assert len(feeds) == 0
        build = Counting({"n": 1}, gone)
        frames = frames_of(feeds, await feeds.feed("k", build))
        assert await next_frame(frames) == event("figures", b'{"n":1}')
        assert await next_frame(frames) == event("error", b'{"status":404,"reason":"Topic not found"}')
        with pytest.raises(StopAsyncIteration):
            await next_frame(frames)
        assert len(feeds) == 0
    asyncio.run(run())


def test_one_stream_carries_the_events_of_several_feeds() -> None:
    async def run() -> None:
        feeds = Feeds(interval_s=0.01, lifetime_s=WAIT_S)
        one, two = await feeds.feed("one", Counting({"a": 1})), await feeds.feed("two", Counting({"b": 2}))
        frames = frames_of(feeds, one, two)
        received = b""
        while received.count(b"\n\n") < 2:
            received += await next_frame(frames)
        assert received == event("figures", b'{"a":1}') + event("figures", b'{"b":2}')
        await frames.aclose()  # type: ignore[attr-defined]
        await asyncio.wait_for(until(lambda: len(feeds) == 0), WAIT_S)
    asyncio.run(run())

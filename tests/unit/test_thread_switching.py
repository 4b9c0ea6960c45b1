"""The interpreter's switch interval is lowered only while long loop work runs, and comes back
however that work ends (finished, failed, or a streamed response abandoned half way)."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import AsyncIterator

import pytest

from magnetar.server.thread_switching import FAST_SWITCH_INTERVAL_S, HAND_OVER_THREAD, faster_thread_switching

pytestmark = pytest.mark.timeout(30)


def hand_over_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == HAND_OVER_THREAD]


def test_one_thread_asks_for_the_lock_inside_and_it_ends_after() -> None:
    assert hand_over_threads() == []
    with faster_thread_switching():
        with faster_thread_switching():
            assert len(hand_over_threads()) == 1
        assert len(hand_over_threads()) == 1, "the outer use still runs"
    deadline = time.monotonic() + 10
    while hand_over_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert hand_over_threads() == []


def test_lowered_inside_and_restored_after_nested_uses() -> None:
    before = sys.getswitchinterval()
    assert before != FAST_SWITCH_INTERVAL_S
    with faster_thread_switching():
        assert sys.getswitchinterval() == pytest.approx(FAST_SWITCH_INTERVAL_S)
        with faster_thread_switching():
            assert sys.getswitchinterval() == pytest.approx(FAST_SWITCH_INTERVAL_S)
        assert sys.getswitchinterval() == pytest.approx(FAST_SWITCH_INTERVAL_S), "the outer use still runs"
    assert sys.getswitchinterval() == before


def test_restored_when_the_work_fails() -> None:
    before = sys.getswitchinterval()
    with pytest.raises(RuntimeError), faster_thread_switching():
        raise RuntimeError("scrape failed")
    assert sys.getswitchinterval() == before


def test_restored_when_a_streamed_response_is_abandoned() -> None:
    before = sys.getswitchinterval()

    async def chunks() -> AsyncIterator[int]:
        with faster_thread_switching():
            for i in range(10):
                yield i

    async def read_two() -> None:
        stream = chunks()
        assert [await anext(stream), await anext(stream)] == [0, 1]
        assert sys.getswitchinterval() == pytest.approx(FAST_SWITCH_INTERVAL_S)
        await stream.aclose()  # the client went away

    asyncio.run(read_two())
    assert sys.getswitchinterval() == before

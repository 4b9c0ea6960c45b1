"""The console's topic list is listed again only when a list of topics may have changed:
cursor and ledger writes, made every second on a busy broker, leave it as it is, and the
loaded topics are walked only when one is loaded or unloaded. At 50,000 topics each
listing or walk costs the event loop tens of milliseconds, once a second per open console."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from magnetar.admin import routes_console
from magnetar.admin.app import create_app
from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.positions import Position
from magnetar.core.subscriptions.cursor_record import CursorRecord
from magnetar.core.topics.loaded_topics import LoadedTopics
from magnetar.server.broker_service import BrokerService

PREFIX = "persistent://public/default/"


def topic(name: str) -> str:
    return f"/admin/v2/persistent/public/default/{name}"


async def scenario(tmp_path: Path, calls: dict[str, int]) -> None:
    broker = BrokerService(BrokerConfig(), tmp_path)
    app = create_app(broker)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://broker") as http:
            async def names() -> list[str]:
                answer = (await http.get("/admin/v2/topics-page", params={"limit": 100})).json()
                return [row["name"].removeprefix(PREFIX) for row in answer["topics"]]

            for name in ("a", "b"):
                assert (await http.put(topic(name))).status_code == 204
            assert await names() == ["a", "b"]
            built, walked = calls["build"], calls["extra"]
            for entry in range(20):  # what cursor persistence writes, all the time
                broker.metadata.put_cursor(PREFIX + "a", "s", CursorRecord(Position(1, entry)))
                assert await names() == ["a", "b"]
            assert (calls["build"], calls["extra"]) == (built, walked)
            assert (await http.put(topic("c"))).status_code == 204
            assert await names() == ["a", "b", "c"]
            assert calls["build"] > built
            assert (await http.delete(topic("b"))).status_code == 204
            assert await names() == ["a", "c"]
    finally:
        app.state.rate_history.stop()
        broker.metadata.close()


def test_cursor_writes_leave_the_topic_list_as_it_was_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"build": 0, "extra": 0}
    directory = routes_console.TopicDirectory
    build, extra = directory._build, directory._extra

    async def counted_build(broker: Any) -> Any:
        calls["build"] += 1
        return await build(broker)

    async def counted_extra(self: Any, broker: Any) -> Any:
        calls["extra"] += 1
        return await extra(self, broker)

    monkeypatch.setattr(directory, "_build", staticmethod(counted_build))
    monkeypatch.setattr(directory, "_extra", counted_extra)
    asyncio.run(scenario(tmp_path, calls))


def test_loaded_topics_count_every_entry_and_exit() -> None:
    topics = LoadedTopics()
    marker: Any = object()
    steps = [lambda: topics.__setitem__("a", marker), lambda: topics.setdefault("b", marker),
             lambda: topics.update({"c": marker}), lambda: topics.pop("a"), lambda: topics.pop("x", None),
             lambda: topics.__delitem__("b"), lambda: topics.popitem(), lambda: topics.clear()]
    for step in steps:
        before = topics.changes
        step()
        assert topics.changes == before + 1
    before = topics.changes
    assert topics.get("a") is None and "b" not in topics and list(topics) == []
    assert topics.changes == before

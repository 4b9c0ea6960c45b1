"""The topics page of a long list sorts on the figures the broker's rate samples keep: the
same rows a sort of every row's figures gives, and the order moves with the next sample."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from magnetar.admin import routes_console
from magnetar.admin.app import create_app
from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.server.broker_service import BrokerService

#: subscriptions of each topic
SUBS = {"a": 0, "b": 2, "c": 1, "d": 3, "e": 1}


def topic(name: str) -> str:
    return f"/admin/v2/persistent/public/default/{name}"


async def scenario(tmp_path: Path) -> None:
    broker = BrokerService(BrokerConfig(), tmp_path)
    app = create_app(broker)
    history = app.state.rate_history
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://broker") as http:
            async def page(**params: Any) -> list[tuple[str, int]]:
                answer = (await http.get("/admin/v2/topics-page", params=params)).json()
                assert answer["total"] == len(SUBS)
                return [(t["name"].rsplit("/", 1)[1], t["subscriptions"]) for t in answer["topics"]]

            async def sample() -> None:
                generation = history.generation
                due = broker.timers.next_deadline_ms()
                assert due is not None
                broker.timers.on_timer(due)  # the sampler's turn come early
                async with asyncio.timeout(10):
                    while history.generation == generation:
                        await asyncio.sleep(0.01)

            for name, count in SUBS.items():
                assert (await http.put(topic(name))).status_code == 204
                for i in range(count):
                    assert (await http.put(topic(name) + f"/subscription/s{i}")).status_code == 204
            await sample()
            by_subs = await page(sort="subscriptions", order="desc", limit=3)
            assert by_subs == [("d", 3), ("b", 2), ("e", 1)]  # ties in reverse name order, as a full sort
            assert await page(sort="subscriptions", order="desc", offset=3) == [("c", 1), ("a", 0)]
            assert await page(sort="subscriptions", order="asc", limit=2) == [("a", 0), ("c", 1)]
            only_some = (await http.get("/admin/v2/topics-page", params={"sort": "subscriptions", "order": "desc",
                                                                          "search": "persistent://public/default/c"}))
            assert only_some.json()["total"] == 1
            # a new subscription shows at once in the row, and moves the row at the next sample
            for i in range(3, 5):
                assert (await http.put(topic("a") + f"/subscription/s{i}")).status_code == 204
            assert await page(sort="subscriptions", order="desc", limit=1) == [("d", 3)]
            assert (await page(sort="subscriptions", order="asc", limit=1))[0] == ("a", 2)
            await sample()
            assert await page(sort="subscriptions", order="desc", limit=3) == [("d", 3), ("b", 2), ("a", 2)]
            assert await page(limit=2) == [("a", 2), ("b", 2)]  # by name: no sample needed
    finally:
        history.stop()
        broker.metadata.close()


def test_a_long_list_sorts_on_the_kept_figures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(routes_console, "LIVE_SORT_MAX", 2)  # five topics make a long list
    asyncio.run(scenario(tmp_path))

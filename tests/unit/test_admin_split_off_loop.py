"""A standalone broker's ``PUT .../{bundle}/split`` writes the new boundaries on the metadata
writer's thread: the event loop's own connection to the store commits nothing for it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from magnetar.admin.app import create_app
from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.cluster.bundles_data import bundles_of
from magnetar.server.broker_service import BrokerService


def test_a_standalone_split_is_written_off_the_event_loop(tmp_path: Path) -> None:
    broker = BrokerService(BrokerConfig(), tmp_path)
    try:
        app = create_app(broker)
        before = bundles_of("public/default", broker.metadata.get_namespace_policies("public/default"))
        first = before.bundles[0].range_name
        loop_commits = broker.metadata.changes

        async def split(range_name: str) -> httpx.Response:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://broker") as http:
                return await http.put(f"/admin/v2/namespaces/public/default/{range_name}/split")
        assert asyncio.run(split(first)).status_code == 204
        after = bundles_of("public/default", broker.metadata.get_namespace_policies("public/default"))
        assert len(after) == len(before) + 1 and before.bundles[0] not in after.bundles
        assert broker.metadata.changes == loop_commits
        gone = asyncio.run(split(first))  # the old range is no bundle any more
        assert gone.status_code == 412 and "is not a bundle of" in gone.json()["reason"]
    finally:
        broker.writer.close()
        broker.metadata.close()

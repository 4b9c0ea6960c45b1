"""Admin answers wait for a metadata sync when the request wrote something."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from magnetar.admin.durable_answers import DurableAnswers
from magnetar.server.metadata_writer import MetadataWriter


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[MetadataWriter]:
    opened = MetadataWriter(tmp_path / "metadata.db")
    yield opened
    opened.close()


def serve(writer: MetadataWriter, barriers: list[concurrent.futures.Future[None]]) -> httpx.AsyncClient:
    changes = [0]

    async def write(request: Request) -> PlainTextResponse:
        changes[0] += 1
        return PlainTextResponse("written")

    async def touch_nothing(request: Request) -> PlainTextResponse:
        return PlainTextResponse("nothing")

    app = Starlette(routes=[Route("/write", write, methods=["PUT", "GET"]),
                            Route("/nothing", touch_nothing, methods=["POST"])])
    real_barrier = writer.barrier

    def counted() -> concurrent.futures.Future[None]:
        barriers.append(real_barrier())
        return barriers[-1]
    writer.barrier = counted  # type: ignore[method-assign]
    wrapped = DurableAnswers(app, changes=lambda: changes[0], durable=writer.barrier)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=wrapped), base_url="http://admin")


@pytest.mark.timeout(30)
def test_a_write_is_answered_after_a_sync_and_reads_or_no_op_requests_at_once(writer: MetadataWriter) -> None:
    barriers: list[concurrent.futures.Future[None]] = []

    async def scenario() -> None:
        async with serve(writer, barriers) as client:
            answered = await client.put("/write")
            assert answered.text == "written"
            assert len(barriers) == 1 and barriers[0].done()
            assert (await client.get("/write")).status_code == 200  # a read is never held
            assert (await client.post("/nothing")).text == "nothing"
            assert len(barriers) == 1
    asyncio.run(scenario())

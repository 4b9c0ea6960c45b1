"""The leader's PUT to another broker's admin API follows a 307 to a third broker with the
same credentials (httpx alone would drop them on a redirect to another origin). Two real
HTTP servers on loopback answer."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.server.load_manager import MAX_REDIRECTS, put_at_broker

Answer = tuple[int, dict[str, str]]


async def serve(answer: Answer, seen: list[dict[str, str]]) -> asyncio.Server:
    """A server answering every request with ``answer`` (status, headers), noting its headers."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
        seen.append({k.lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)})
        status, headers = answer
        lines = [f"HTTP/1.1 {status} X", "content-length: 0", "connection: close",
                 *(f"{k}: {v}" for k, v in headers.items())]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await writer.drain()
        writer.close()
    return await asyncio.start_server(handle, "127.0.0.1", 0)


def url(server: asyncio.Server, path: str) -> str:
    return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}{path}"


def test_a_redirect_is_followed_with_the_credentials() -> None:
    async def run() -> list[dict[str, str]]:
        seen: list[dict[str, str]] = []
        owner = await serve((204, {}), seen)
        asked = await serve((307, {"location": url(owner, "/admin/v2/namespaces/t/ns/0x0_0x1/split")}), seen)
        async with owner, asked:
            await put_at_broker(url(asked, "/admin/v2/namespaces/t/ns/0x0_0x1/split"), {"Authorization": "Bearer b"})
        return seen
    seen = asyncio.run(run())
    assert [h.get("authorization") for h in seen] == ["Bearer b", "Bearer b"]


def test_an_error_or_endless_redirects_raise() -> None:
    async def run(answer: Answer) -> int:
        seen: list[dict[str, str]] = []
        server = await serve(answer, seen)
        if answer[0] == 307:
            answer[1]["location"] = url(server, "/again")
        async with server:
            with pytest.raises(RuntimeError, match=f"answered {answer[0]}"):
                await put_at_broker(url(server, "/x"), {})
        return len(seen)
    assert asyncio.run(run((401, {}))) == 1
    assert asyncio.run(run((307, {}))) == MAX_REDIRECTS + 1

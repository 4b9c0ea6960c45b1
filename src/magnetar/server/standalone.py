"""Run a standalone broker: binary protocol, HTTP admin and metrics in one event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from pathlib import Path

from magnetar.config import BrokerConfig
from magnetar.server.broker import BrokerOperations
from magnetar.server.connection import ServerConnection

log = logging.getLogger("magnetar.standalone")


class Standalone:
    def __init__(self, config: BrokerConfig, data_dir: Path) -> None:
        self.config = config
        self.broker = BrokerOperations(config, data_dir)
        self.stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self.broker.start(loop)
        server = await loop.create_server(
            lambda: ServerConnection(self.broker), self.config.bindAddress, self.config.brokerServicePort,
            reuse_address=True, backlog=1024)
        http = await self._start_http()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        log.info("Magnetar standalone: pulsar://%s:%d  http://%s:%d  data in %s",
                 self.config.bindAddress, self.config.brokerServicePort, self.config.bindAddress,
                 self.config.webServicePort, self.broker.data_dir)
        print(f"magnetar standalone ready: {self.broker.broker_url} {self.broker.web_url}", flush=True)
        await self.stopping.wait()
        await self._shutdown(server, http)

    async def _start_http(self):  # type: ignore[no-untyped-def]
        import uvicorn

        from magnetar.admin.app import create_app
        app = create_app(self.broker)
        config = uvicorn.Config(app, host=self.config.bindAddress, port=self.config.webServicePort,
                                log_level="warning", lifespan="off", access_log=False)
        server = uvicorn.Server(config)
        server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("HTTP server failed to start")
            await asyncio.sleep(0.01)
        return server, task

    async def _shutdown(self, server: asyncio.AbstractServer, http) -> None:  # type: ignore[no-untyped-def]
        log.info("shutting down")
        timeout = self.config.brokerShutdownTimeoutMs / 1000 or None
        server.close()
        for task in self._tasks:
            task.cancel()
        http_server, http_task = http
        http_server.should_exit = True
        try:
            await asyncio.wait_for(self._close_all(server, http_task), timeout)
        except TimeoutError:
            log.warning("shutdown timed out after %.1fs", timeout)

    async def _close_all(self, server: asyncio.AbstractServer, http_task) -> None:  # type: ignore[no-untyped-def]
        await self.broker.close()
        for conn in list(self.broker.connections):
            conn.close()
        with contextlib.suppress(Exception):
            await http_task


def run_standalone(config: BrokerConfig, data_dir: Path) -> None:
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    asyncio.run(Standalone(config, data_dir).run())

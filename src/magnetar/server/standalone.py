"""Run a standalone broker: binary protocol, HTTP admin and metrics in one event loop."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import signal
import socket
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.broker.broker_timers import PeriodicTask
from magnetar.security.tls import CertificateRefresh, server_context
from magnetar.server.broker_service import BrokerService
from magnetar.server.clock import now_ms
from magnetar.server.connection import ServerConnection
from magnetar.server.http_connections import HttpConnections, remembering

log = logging.getLogger("magnetar.standalone")


class Standalone:
    #: the command this broker runs as, in its log and its ready line
    kind = "standalone"

    def __init__(self, config: BrokerConfig, data_dir: Path) -> None:
        self.config = config
        self.broker = BrokerService(config, data_dir)
        self.stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._app: Any = None
        self._http_connections = HttpConnections()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        tls = server_context(self.config) if self._tls_wanted() else None
        self.broker.start(loop)
        if tls is not None and self.config.tlsCertRefreshCheckDurationSec > 0:
            self._refresh_certificates(CertificateRefresh(tls, self.config))
        servers = await self._start_binary(loop, tls)
        http = [await self._start_http(port, tls if secure else None) for port, secure in self._web_ports()]
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        await self._joined()
        log.info("Magnetar %s: %s  %s  data in %s", self.kind, " ".join(self._broker_urls()),
                 " ".join(self._web_urls()), self.broker.data_dir)
        exposed = exposure_warning(self.config)
        if exposed is not None:
            log.warning("%s", exposed)
        urls = self.broker.addresses
        self.broker.loop_lag.begin()
        print(f"magnetar {self.kind} ready: {urls.broker_url} {urls.web_url}", flush=True)
        await self.stopping.wait()
        await self._leaving()
        await self._shutdown(servers, http)

    async def _joined(self) -> None:
        """Once every listener is up, before the broker says it is ready (a cluster's broker
        registers here)."""

    async def _leaving(self) -> None:
        """On SIGTERM or SIGINT, before the listeners close (a cluster's broker hands its
        bundles over here)."""

    def _refresh_certificates(self, refresh: CertificateRefresh) -> None:
        """Check the certificate files now, then every ``tlsCertRefreshCheckDurationSec``
        on the broker's one timer."""
        def check(now: int) -> None:
            outcome = refresh.check()
            if outcome is not None:
                log.warning("%s", outcome)
        check(now_ms())
        period_ms = max(1, round(self.config.tlsCertRefreshCheckDurationSec * 1000))
        PeriodicTask(self.broker.core.timers, period_ms, check).start(now_ms())

    def _tls_wanted(self) -> bool:
        return self.config.brokerServicePortTls is not None or self.config.webServicePortTls is not None

    def _broker_urls(self) -> list[str]:
        urls = [f"pulsar://{self.config.bindAddress}:{self.config.brokerServicePort}"]
        if self.config.brokerServicePort is None:
            urls = []
        if self.config.brokerServicePortTls is not None:
            urls.append(f"pulsar+ssl://{self.config.bindAddress}:{self.config.brokerServicePortTls}")
        return urls

    def _web_urls(self) -> list[str]:
        return [f"{'https' if secure else 'http'}://{self.config.bindAddress}:{port}"
                for port, secure in self._web_ports()]

    def _web_ports(self) -> list[tuple[int, bool]]:
        ports = [(self.config.webServicePort, False), (self.config.webServicePortTls, True)]
        return [(port, secure) for port, secure in ports if port is not None]

    async def _start_binary(self, loop: asyncio.AbstractEventLoop,
                            tls: ssl.SSLContext | None) -> list[asyncio.AbstractServer]:
        """The plain port and the TLS port, whichever are configured."""
        servers: list[asyncio.AbstractServer] = []
        for port, context in ((self.config.brokerServicePort, None), (self.config.brokerServicePortTls, tls)):
            if port is None:
                continue
            servers.append(await loop.create_server(
                lambda: ServerConnection(self.broker), self.config.bindAddress, port,
                reuse_address=True, backlog=1024, ssl=context))
        return servers

    async def _start_http(self, port: int, tls: ssl.SSLContext | None):  # type: ignore[no-untyped-def]
        import uvicorn

        from magnetar.admin import warm_up
        from magnetar.admin.app import create_app
        if self._app is None:
            self._app = create_app(self.broker, self._http_connections)
            warm_up.start(self._app)
        # h11 named, not found by "auto": a scrape's child writes chunks between the head and
        # the end this server writes (admin/scrape_socket.py), so its framing is fixed here
        config = uvicorn.Config(self._app, host=self.config.bindAddress, port=port, http="h11",
                                log_level="warning", lifespan="off", access_log=False)
        config.load()
        if tls is not None:
            config.ssl = tls  # the context the binary TLS port uses, built from the same keys
        config.http_protocol_class = remembering(config.http_protocol_class, self._http_connections)
        server = uvicorn.Server(config)
        server.install_signal_handlers = lambda: None  # type: ignore[attr-defined]
        started = asyncio.Event()
        startup = server.startup

        async def startup_then_tell(sockets: list[socket.socket] | None = None) -> None:
            try:
                await startup(sockets=sockets)
            finally:
                started.set()
        server.startup = startup_then_tell  # type: ignore[method-assign]
        task = asyncio.create_task(server.serve())
        await started.wait()
        if not server.started:
            await task  # raises what stopped it
            raise RuntimeError("HTTP server failed to start")
        return server, task

    async def _shutdown(self, servers: list[asyncio.AbstractServer], http) -> None:  # type: ignore[no-untyped-def]
        log.info("shutting down")
        timeout = self.config.brokerShutdownTimeoutMs / 1000 or None
        for server in servers:
            server.close()
        for task in self._tasks:
            task.cancel()
        for http_server, _ in http:
            http_server.should_exit = True
        try:
            await asyncio.wait_for(self._close_all([task for _, task in http]), timeout)
        except TimeoutError:
            log.warning("shutdown timed out after %.1fs", timeout)

    async def _close_all(self, http_tasks) -> None:  # type: ignore[no-untyped-def]
        await self.broker.close()
        for conn in list(self.broker.connections):
            conn.close()
        for task in http_tasks:
            with contextlib.suppress(Exception):
                await task


def exposure_warning(config: BrokerConfig) -> str | None:
    """One warning for a broker that anyone on the network may use: listening beyond
    loopback with authentication off (Pulsar standalone's default, kept as it is)."""
    if config.authenticationEnabled:
        return None
    address = config.bindAddress
    try:
        loopback = ipaddress.ip_address(address).is_loopback
    except ValueError:
        loopback = address == "localhost"
    if loopback:
        return None
    return (f"listening on {address} without authentication: anyone who reaches these ports can publish, "
            "consume and administer; set authenticationEnabled (README, Security) or bindAddress=127.0.0.1")


def run_standalone(config: BrokerConfig, data_dir: Path) -> None:
    run(lambda: Standalone(config, data_dir))


def run(broker: Callable[[], Standalone]) -> None:
    """Run the broker ``broker`` makes on an event loop (uvloop's where installed)."""
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    asyncio.run(broker().run())

"""A broker's part in a cluster: its registration, the bundles it owns, and the answers to
LOOKUP and to topic commands that depend on who owns a topic.

The decisions are core's (:mod:`magnetar.core.cluster.topic_lookup`); this module does
their I/O. Every metadata store call runs on the cluster's own thread pool, never on the
event loop; what the loop reads in the hot path (is this bundle ours?) is the
:attr:`ClusterMembership.owned` map it keeps itself.

Registration is ``/loadbalance/brokers/<advertisedAddress>:<webServicePort>`` (Pulsar's
broker id), holding Pulsar's ``LocalBrokerData`` URL fields and ``numBundles``, which the
placement reads. A bundle is owned through its ephemeral node
``/namespace/<tenant>/<ns>/<range>`` holding ``NamespaceEphemeralData``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from magnetar.core.broker.broker_facade import LoadBalancing
from magnetar.core.broker.listeners import BrokerAddresses
from magnetar.core.cluster.broker_placement import select_broker
from magnetar.core.cluster.bundle_ownership import BundleState
from magnetar.core.cluster.bundles_data import bundles_of
from magnetar.core.cluster.metadata_store import SessionEvent
from magnetar.core.cluster.namespace_bundles import InvalidBundle, NamespaceBundle, NamespaceBundles
from magnetar.core.cluster.namespace_ephemeral_data import InvalidOwnerData, NamespaceEphemeralData
from magnetar.core.cluster.session_lease import SessionLease
from magnetar.core.cluster.topic_lookup import (
    Acquire,
    AdminRedirect,
    BundleView,
    Connect,
    NotReady,
    Placed,
    Redirect,
    RegisteredBroker,
    check_serving,
    decide_admin,
    decide_lookup,
)
from magnetar.core.errors import BrokerError, ServiceNotReady
from magnetar.core.metadata.interfaces import CoordinationStore, LedgerIdStore, NamespaceStore
from magnetar.core.metadata.records import AlreadyExists, MetadataError, SessionState
from magnetar.core.names import TopicName
from magnetar.core.security.access_rules import AccessRules
from magnetar.core.security.authorization import Operation
from magnetar.core.topics.loaded_topics import LoadedTopics
from magnetar.core.topics.topic import Topic
from magnetar.server.clock import monotonic_ms
from magnetar.server.connection import ServerConnection, finish_command
from magnetar.server.store_calls import StoreCalls
from magnetar.wire import commands
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import Frame

log = logging.getLogger("magnetar.cluster")
R = TypeVar("R")
T = pb.BaseCommand

#: lookups that find the bundle taken meanwhile look again at most this many times
LOOKUP_ATTEMPTS = 3
#: how long a client sent here is kept waiting for the owner's hand-over mark to show
HANDOVER_MARK_WAIT_MS = 1000
#: how long a client sent here by a broker handing its bundle over may wait for the
#: bundle to be released, and how often the ownership node is read meanwhile
HANDOVER_WAIT_MS = 5000
HANDOVER_POLL_S = 0.02
#: a LOOKUP, PRODUCER or SUBSCRIBE that waited this long on ownership is logged
SLOW_OWNERSHIP_MS = 1000


class Unloads(Protocol):
    def unload_topic(self, name: TopicName, drain_ms: int = 0) -> Coroutine[Any, Any, bool]: ...


class MembershipStore(CoordinationStore, LedgerIdStore, NamespaceStore, Protocol):
    """What membership uses of the metadata store: coordination, ledger id reservations, and
    namespaces' bundles."""


class FreeBundlePlacement(Protocol):
    """Who places a bundle nobody owns (the load manager's leader), for a lookup or an admin request."""

    async def place(self, bundle: NamespaceBundle, authoritative: bool) -> Placed | NotReady: ...


class LedgerIdBlocks(Protocol):
    @property
    def block(self) -> int: ...

    def restart_from(self, block: tuple[int, int]) -> None: ...


class ClusterShell(Protocol):
    """What membership uses of the broker service."""

    addresses: BrokerAddresses
    access: AccessRules
    topics: LoadedTopics

    successors: dict[str, tuple[str | None, str | None]]

    @property
    def release(self) -> Unloads: ...

    async def load_topic(self, name: TopicName, create: bool) -> Topic: ...

    @property
    def ledger_ids(self) -> LedgerIdBlocks: ...


@dataclass(frozen=True, slots=True)
class Successor:
    """The broker a bundle is handed to, and its service URLs."""

    broker_id: str
    service_url: str | None
    service_url_tls: str | None


def broker_id_of(advertised_address: str, web_port: int | None) -> str:
    """Pulsar's broker id: the advertised host and the web service port."""
    return f"{advertised_address}:{web_port if web_port is not None else 0}"


class ClusterMembership:
    def __init__(self, shell: ClusterShell, store: MembershipStore, broker_id: str,
                 session_timeout_ms: int, drain_ms: int = 0) -> None:
        self.shell = shell
        self.store = store
        self.broker_id = broker_id
        urls = shell.addresses
        self.me = NamespaceEphemeralData(broker_id, urls.broker_url, urls.broker_url_tls, urls.web_url,
                                         urls.web_url_tls)
        #: bundles this broker owns: (namespace, range) -> the ownership node's version
        self.owned: dict[tuple[str, str], int] = {}
        #: every store call of the membership and the load manager runs on this pool
        self.calls = StoreCalls()
        self._pool = self.calls.pool
        #: when the store's answer confirmed each acquisition (monotonic ms): a previous
        #: writer of the bundle's topics is waited out from then (docs/cluster.md, rule T)
        self.acquired_at: dict[tuple[str, str], int] = {}
        #: since when the current store session has lived (monotonic ms, no earlier than it began)
        self.session_since_ms: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: whether appends may be acknowledged: renewed by heartbeats answered in the session
        self.lease = SessionLease(session_timeout_ms)
        self._heartbeats: asyncio.Task[None] | None = None
        #: how long a planned move waits for consumers to acknowledge what they hold
        self.drain_ms = drain_ms
        #: stopping: no bundle is acquired here any more, lookups go to the other brokers
        self.leaving = False
        #: each namespace's bundles as last read from its policies (default bundles until read)
        self.bundles: dict[str, NamespaceBundles] = {}
        #: the load manager's placement of free bundles; None: the fewest bundles, decided here
        self.placement: FreeBundlePlacement | None = None
        #: this broker's latest load report (Pulsar's LocalBrokerData fields), kept in its registration
        self.load_fields: dict[str, Any] = {}
        #: the broker's load manager, for the admin API
        self.load_balancing: LoadBalancing | None = None

    # -- start and stop ----------------------------------------------------------------
    async def join(self, loop: asyncio.AbstractEventLoop) -> None:
        """Register this broker; from here on session changes reach :meth:`_session_changed`."""
        self._loop = loop
        def changed(state: SessionState) -> None:
            loop.call_soon_threadsafe(self._session_changed, state)
        self.store.add_session_listener(changed)
        await self._heartbeat()
        self._heartbeats = asyncio.ensure_future(self._keep_heartbeating())
        await self.calls.run(self.store.register_broker, self.broker_id, self.registration())
        log.info("registered as %s in the cluster", self.broker_id)

    def may_acknowledge(self) -> bool:
        """Whether an append made durable now may be acknowledged (the session's lease holds)."""
        return self.lease.may_acknowledge(int(monotonic_ms()))

    def takeover_start(self, name: TopicName) -> tuple[int, int, int, int | None]:
        """The session a topic taken over now is written under, when its bundle's ownership
        was confirmed, how long a previous writer is waited out from then, and since when
        the session has lived."""
        key = self._key(self.bundle_of(name))
        session_id = self.lease.session_id
        if key not in self.owned or session_id is None:
            raise ServiceNotReady(f"Topic {name} is not served by this broker now; look up again")
        return session_id, self.acquired_at.get(key, int(monotonic_ms())), self.lease.takeover_wait_ms(), \
            self.session_since_ms

    def still_serves(self, name: TopicName, session_id: int) -> bool:
        return self._key(self.bundle_of(name)) in self.owned and self.lease.session_id == session_id

    async def _heartbeat(self) -> None:
        sent = int(monotonic_ms())
        try:
            session_id = await self.calls.run(self.store.ping)
        except MetadataError as exc:
            log.warning("metadata store heartbeat failed: %s", exc)
            return
        if session_id is None:
            return
        if session_id != self.lease.session_id:
            self.lease.on_session_event(SessionEvent.SESSION_REESTABLISHED, session_id)
            # the session began before this answer: a later moment, on the safe side
            self.session_since_ms = int(monotonic_ms())
        self.lease.on_heartbeat_answered(session_id, sent)

    async def _keep_heartbeating(self) -> None:
        interval_s = self.lease.heartbeat_interval_ms() / 1000
        while True:
            await asyncio.sleep(interval_s)
            await self._heartbeat()

    async def leave(self) -> None:
        """Hand every owned bundle over (Pulsar's graceful unload) and unregister: first
        out of the placement, so that nothing is acquired here while the bundles go."""
        self.leaving = True
        try:
            await self.calls.run(self.store.unregister_broker, self.broker_id)
        except MetadataError as exc:
            log.warning("could not unregister %s: %s", self.broker_id, exc)
        owned = dict(self.owned)
        self.owned.clear()
        successor = await self._successor()
        owned = {key: await self._mark_handed_over(key, version, successor) for key, version in owned.items()}
        await self._hand_over([topic.name for topic in self.shell.topics.values()], successor)
        for (namespace, bundle_range), version in owned.items():
            try:
                await self.calls.run(self.store.release_bundle, namespace, bundle_range, version)
            except MetadataError as exc:
                log.warning("could not release %s/%s: %s", namespace, bundle_range, exc)
        log.info("released %d bundles and left the cluster", len(owned))
        if self._heartbeats is not None:
            self._heartbeats.cancel()
        self._pool.shutdown(wait=False)

    def _session_changed(self, state: SessionState) -> None:
        if state is SessionState.LOST and self.lease.session_id is not None:
            self.lease.on_session_event(SessionEvent.SESSION_LOST, self.lease.session_id)
        if state is SessionState.LOST and self.owned:
            log.warning("metadata store session lost: %d bundles are no longer served here", len(self.owned))
            self.owned.clear()
            asyncio.ensure_future(self._unload_all())
        if state is SessionState.CONNECTED and self._loop is not None:
            asyncio.ensure_future(self._register_again())

    async def _register_again(self) -> None:
        if self.leaving:
            return
        try:
            if await self.calls.run(self.store.get_broker, self.broker_id) is None:
                await self.calls.run(self.store.register_broker, self.broker_id, self.registration())
                log.info("registered again as %s after a new session", self.broker_id)
        except (MetadataError, AlreadyExists) as exc:
            log.warning("could not register again: %s", exc)

    async def _unload_all(self, drain_ms: int = 0) -> None:
        """Close every client of every loaded topic and release the topics: their clients
        look up again and reach whoever owns the bundle next."""
        await self._unload([topic.name for topic in self.shell.topics.values()], drain_ms)

    # -- handing bundles over (PIP-307's transfer) ---------------------------------------
    async def _successor(self, destination: str | None = None) -> Successor | None:
        """The broker a bundle leaving this one goes to: ``destination`` (the leader's
        transfer) if it is registered, else the one the placement would pick. Its service
        URLs are told to the clients as they are closed, so they reconnect there at once."""
        brokers = await self.calls.run(self._read_brokers)
        brokers.pop(self.broker_id, None)
        chosen = destination if destination in brokers else \
            select_broker({broker_id: b.owned_bundles for broker_id, b in brokers.items()})
        if destination is not None and chosen != destination:
            log.warning("the destination %s is not a registered broker; handing over to %s", destination, chosen)
        if chosen is None:
            return None
        urls = brokers[chosen].urls
        return Successor(chosen, urls.native_url, urls.native_url_tls)

    async def _mark_handed_over(self, key: tuple[str, str], version: int, successor: Successor | None) -> int:
        """Mark the ownership node ``disabled`` (Pulsar's flag for a bundle being unloaded),
        naming the successor: that broker, when a client reconnects to it meanwhile, waits
        for the node to go and takes the bundle, instead of sending the client back to
        lookup. The node's new version (the old on failure)."""
        data = {**owner_record(self.me), "disabled": True}
        if successor is not None:
            data["successor"] = successor.broker_id
        try:
            return await self.calls.run(self.store.update_bundle_owner, key[0], key[1], data, version)
        except MetadataError as exc:
            log.warning("could not mark %s/%s as handed over: %s", key[0], key[1], exc)
            return version

    async def _hand_over(self, names: list[TopicName], successor: Successor | None) -> None:
        """Unload topics whose clients are told to reconnect to ``successor``."""
        if successor is not None:
            urls = (successor.service_url, successor.service_url_tls)
            self.shell.successors.update((str(name), urls) for name in names)
        try:
            await self._unload(names, self.drain_ms)
        finally:
            for name in names:
                self.shell.successors.pop(str(name), None)

    async def _taken_over(self, name: TopicName) -> bool:
        """A producer or consumer came to this broker for a bundle it does not own: sent
        here by the broker handing the bundle over, which usually releases it before the
        client arrives. A free bundle is taken (the ownership node's create settles any
        race); while the owner's node is disabled and names this broker its successor, the
        wait is for its release. Whether this broker owns the bundle now."""
        bundle = await self.fresh_bundle_of(name)
        started = monotonic_ms()
        while not self.leaving and not self.serves(name):
            node = await self.calls.run(self.store.get_bundle_owner, bundle.namespace, bundle.range_name)
            # a free bundle is taken here, not placed: the broker that let it go sent the
            # client here. A failed take: a concurrent producer or consumer of the client's
            # is taking it here (owned once that completes), another broker took it, or it
            # was split; the wait below settles which
            if node is None and await self.acquire(bundle):
                return True
            handed_here = node is not None and bool(node.data.get("disabled")) \
                and node.data.get("successor") == self.broker_id
            # the mark may not have reached this broker's view yet: the client can come
            # straight from the close, faster than the store's watch
            if monotonic_ms() - started > (HANDOVER_WAIT_MS if handed_here else HANDOVER_MARK_WAIT_MS):
                return False
            await asyncio.sleep(HANDOVER_POLL_S)
        return self.serves(name)

    async def _unload(self, names: list[TopicName], drain_ms: int) -> None:
        """Unload topics side by side, so that their drains overlap."""
        async def one(name: TopicName) -> None:
            try:
                await self.shell.release.unload_topic(name, drain_ms)
            except Exception:  # one topic's failure must not keep the others served
                log.exception("could not unload %s", name)
        await asyncio.gather(*(one(name) for name in names))

    def registration(self) -> dict[str, Any]:
        """This broker's registration: its URLs, load report fields and ``numBundles``."""
        me = self.me
        return {**self.load_fields, "brokerId": me.broker_id, "pulsarServiceUrl": me.native_url,
                "pulsarServiceUrlTls": me.native_url_tls, "webServiceUrl": me.http_url,
                "webServiceUrlTls": me.http_url_tls, "numBundles": len(self.owned)}

    # -- binary protocol ---------------------------------------------------------------
    def handlers(self, core: dict[int, Callable[[Any, Frame], None]]) -> dict[int, Callable[[Any, Frame], None]]:
        """The connection's handlers for the commands that depend on ownership."""
        def serving(handler: Callable[[Any, Frame], None], topic_of: Callable[[Frame], str]) \
                -> Callable[[Any, Frame], None]:
            def checked(conn: Any, frame: Frame) -> None:
                name = TopicName.parse(topic_of(frame))
                if self.serves(name):
                    handler(conn, frame)
                    return
                started = monotonic_ms()
                def answered(done: asyncio.Future[bool]) -> None:
                    _log_if_slow(started, frame, name, done)
                    def finish() -> None:
                        done.result()
                        # owned now, by this wait or a concurrent one (the producer and the
                        # consumer of one client come together): served; else refused
                        self.check_serving(name)
                        handler(conn, frame)
                    finish_command(conn, frame, finish)
                asyncio.ensure_future(self._taken_over(name)).add_done_callback(answered)
            return checked
        return {
            T.LOOKUP: lambda conn, frame: self._start_lookup(conn, frame, core[T.LOOKUP]),
            T.PRODUCER: serving(core[T.PRODUCER], lambda frame: frame.command.producer.topic),
            T.SUBSCRIBE: serving(core[T.SUBSCRIBE], lambda frame: frame.command.subscribe.topic),
        }

    def serves(self, name: TopicName) -> bool:
        return self._key(self.bundle_of(name)) in self.owned

    def check_serving(self, name: TopicName) -> None:
        """``ServiceNotReady`` unless this broker owns the topic's bundle."""
        state = BundleState.OWNED if self.serves(name) else BundleState.UNOWNED
        refused = check_serving(self.broker_id, state, True)
        if refused is not None:
            raise ServiceNotReady(refused.message)

    def _start_lookup(self, conn: ServerConnection, frame: Frame, connect: Callable[[Any, Frame], None]) -> None:
        req = frame.command.lookupTopic
        name = TopicName.parse(req.topic)
        if not self.shell.access.topic_allowed(conn.role, Operation.LOOKUP, name):
            connect(conn, frame)  # core's own check answers with Pulsar's message
            return
        listener = req.advertised_listener_name if req.HasField("advertised_listener_name") else None

        started = monotonic_ms()
        def answered(done: asyncio.Future[Connect | Redirect | NotReady]) -> None:
            _log_if_slow(started, frame, name, done)
            finish_command(conn, frame, lambda: self._answer(conn, frame, done.result(), connect))
        lookup = asyncio.ensure_future(self.lookup(name, listener, req.authoritative))
        lookup.add_done_callback(answered)

    @staticmethod
    def _answer(conn: ServerConnection, frame: Frame, answer: Connect | Redirect | NotReady,
                connect: Callable[[Any, Frame], None]) -> None:
        request_id = frame.command.lookupTopic.request_id
        if isinstance(answer, Connect):
            connect(conn, frame)
        elif isinstance(answer, Redirect):
            conn.write_command(commands.lookup_redirect(request_id, answer.service_url or "",
                                                        answer.service_url_tls, answer.authoritative))
        else:
            raise ServiceNotReady(answer.message)

    async def lookup(self, name: TopicName, listener: str | None = None,
                     authoritative: bool = False) -> Connect | Redirect | NotReady:
        """Who serves ``name``: this broker (acquiring its bundle if it is free and comes
        here), or another one."""
        bundle = await self.fresh_bundle_of(name)
        for _ in range(LOOKUP_ATTEMPTS):
            view, brokers = await self._view(bundle)
            authoritative = authoritative and not self.leaving
            placed = await self._placed(view, bundle, authoritative)
            if isinstance(placed, NotReady):
                return placed
            answer = decide_lookup(self.broker_id, view, brokers, listener, authoritative, placed)
            if not isinstance(answer, Acquire):
                return answer
            if await self.acquire(bundle):
                return Connect()
        return NotReady(f"bundle {bundle} changed hands while looked up; look up again")

    async def admin_answer(self, name: TopicName, path: str) -> Connect | AdminRedirect | NotReady:
        """An admin request on ``name``: serve it here (acquiring first, and loading the topic
        if it exists: the admin routes read loaded topics), or 307 to the owner."""
        answer = await self._admin_answer(name, path)
        if isinstance(answer, Connect) and name.persistent:
            try:
                await self.shell.load_topic(name, False)
            except BrokerError as exc:  # not a topic (yet), or not ready: the route answers
                log.debug("admin request on %s: not loaded first: %s", name, exc)
        return answer

    async def _admin_answer(self, name: TopicName, path: str) -> Connect | AdminRedirect | NotReady:
        bundle = await self.fresh_bundle_of(name)
        for _ in range(LOOKUP_ATTEMPTS):
            view, brokers = await self._view(bundle)
            placed = await self._placed(view, bundle, "authoritative=true" in path.partition("?")[2])
            if isinstance(placed, NotReady):
                return placed
            answer = decide_admin(self.broker_id, view, brokers, path, placed=placed)
            if not isinstance(answer, Acquire):
                return answer
            if await self.acquire(bundle):
                return Connect()
        return NotReady(f"bundle {bundle} changed hands while looked up; try again")

    async def broker_ids(self) -> list[str]:
        """The registered brokers' ids, sorted."""
        return sorted(await self.calls.run(self.store.list_brokers))

    def owned_bundles(self) -> list[str]:
        return sorted(f"{namespace}/{bundle_range}" for namespace, bundle_range in self.owned)

    async def web_url_of(self, broker_id: str) -> str | None:
        data = await self.calls.run(self.store.get_broker, broker_id)
        return None if data is None else data.get("webServiceUrl")

    async def unload_bundle(self, bundle: NamespaceBundle, path: str,
                            destination: str | None = None) -> AdminRedirect | None:
        version = self.owned.pop(self._key(bundle), None)
        if version is None:
            view, _ = await self._view(bundle)
            if view.owner is None or view.owner.broker_id == self.broker_id:
                return None  # nobody's, or a node of an earlier session of this broker's, which goes with it
            base = view.owner.web_url(False)
            return None if base is None else AdminRedirect(base.rstrip("/") + path)
        successor = await self._successor(destination)
        version = await self._mark_handed_over(self._key(bundle), version, successor)
        await self._hand_over([topic.name for topic in self.shell.topics.values()
                               if topic.name.namespace_name == bundle.namespace and bundle.includes(str(topic.name))],
                              successor)
        await self.calls.run(self.store.release_bundle, bundle.namespace, bundle.range_name, version)
        log.info("unloaded bundle %s, handed over to %s", bundle, successor.broker_id if successor else "nobody")
        await self.update_registration()
        return None

    def bundle_of(self, name: TopicName) -> NamespaceBundle:
        """The topic's bundle among its namespace's bundles as last read (no store call)."""
        namespace = name.namespace_name
        bundles = self.bundles.get(namespace)
        return (bundles or NamespaceBundles(namespace)).find_bundle(str(name))

    async def fresh_bundle_of(self, name: TopicName) -> NamespaceBundle:
        """The topic's bundle after reading its namespace's bundles from the store."""
        try:
            await self.read_bundles(name.namespace_name)
        except (MetadataError, InvalidBundle) as exc:
            log.warning("bundles of %s: %s", name.namespace_name, exc)
        return self.bundle_of(name)

    async def read_bundles(self, namespace: str) -> NamespaceBundles:
        """The namespace's bundles read from its policies (and kept in :attr:`bundles`)."""
        policies = await self.calls.run(self.store.get_namespace_policies, namespace)
        bundles = self.bundles[namespace] = bundles_of(namespace, policies)
        return bundles

    async def _placed(self, view: BundleView, bundle: NamespaceBundle, authoritative: bool) -> Placed | NotReady | None:
        if self.placement is None or view.state is not BundleState.UNOWNED or view.owner is not None:
            return None
        return await self.placement.place(bundle, authoritative)

    async def owner_of_bundle(self, bundle: NamespaceBundle) -> NamespaceEphemeralData | None:
        """The bundle's owner as its ownership node names it (this broker for one it owns)."""
        view, _ = await self._view(bundle)
        return view.owner

    # -- I/O -------------------------------------------------------------------------
    async def _view(self, bundle: NamespaceBundle) -> tuple[BundleView, dict[str, RegisteredBroker]]:
        if self._key(bundle) in self.owned:
            return BundleView(BundleState.OWNED, self.me), {}
        return await self.calls.run(self._read_view, bundle)

    def _read_view(self, bundle: NamespaceBundle) -> tuple[BundleView, dict[str, RegisteredBroker]]:
        """On the pool: the bundle's ownership node and the registered brokers (without
        this one once it is leaving)."""
        node = self.store.get_bundle_owner(bundle.namespace, bundle.range_name)
        owner = None
        if node is not None:
            try:
                owner = owner_of(node.data)
            except InvalidOwnerData as exc:
                log.warning("bundle %s: %s", bundle, exc)
        return BundleView(BundleState.UNOWNED, owner), self._read_brokers()

    def _read_brokers(self) -> dict[str, RegisteredBroker]:
        found: dict[str, RegisteredBroker] = {}
        for broker_id in self.store.list_brokers():
            data = self.store.get_broker(broker_id)
            if data is None:
                continue
            urls = NamespaceEphemeralData(broker_id, data.get("pulsarServiceUrl"), data.get("pulsarServiceUrlTls"),
                                          data.get("webServiceUrl"), data.get("webServiceUrlTls"))
            found[broker_id] = RegisteredBroker(urls, int(data.get("numBundles") or 0))
        if self.leaving:
            found.pop(self.broker_id, None)
        return found

    async def acquire(self, bundle: NamespaceBundle, *, still_a_bundle: bool = True) -> bool:
        """Create the bundle's ownership node; False when another broker was first (or,
        ``still_a_bundle``, when the range is no longer one of the namespace's bundles)."""
        data = owner_record(self.me)
        try:
            version = await self.calls.run(self.store.acquire_bundle, bundle.namespace, bundle.range_name, data)
        except AlreadyExists:
            return False
        acquired_at = int(monotonic_ms())
        if still_a_bundle and bundle not in (await self.read_bundles(bundle.namespace)).bundles:
            # split meanwhile: its halves' nodes were made before the split was written, so
            # a read after this create sees the new bundles
            await self.calls.run(self.store.release_bundle, bundle.namespace, bundle.range_name, version)
            log.info("did not take %s: the bundle was split", bundle)
            return False
        # ids reserved from now on are above every id the previous owner was handed
        ids = self.shell.ledger_ids
        ids.restart_from(await self.calls.run(self.store.reserve_ledger_ids, ids.block))
        self.owned[self._key(bundle)] = version
        self.acquired_at[self._key(bundle)] = acquired_at
        log.info("acquired bundle %s", bundle)
        await self.update_registration()
        return True

    async def update_registration(self) -> None:
        """The registration's ``numBundles`` after a change of what this broker owns."""
        try:
            await self.calls.run(self.store.update_broker, self.broker_id, self.registration())
        except MetadataError as exc:
            log.warning("could not update the registration of %s: %s", self.broker_id, exc)

    @staticmethod
    def _key(bundle: NamespaceBundle) -> tuple[str, str]:
        return bundle.namespace, bundle.range_name


def _log_if_slow(started: float, frame: Frame, name: TopicName, done: asyncio.Future[Any]) -> None:
    """A command that waited on ownership longer than a client should: said once, with
    how it ended, since the client may give up on it meanwhile."""
    waited = monotonic_ms() - started
    if waited >= SLOW_OWNERSHIP_MS:
        outcome = repr(done.exception()) if done.exception() is not None else repr(done.result())
        log.warning("%s for %s waited %d ms on its bundle's ownership: %s",
                    T.Type.Name(frame.command.type), name, waited, outcome)


def owner_record(owner: NamespaceEphemeralData) -> dict[str, Any]:
    """The ownership node's JSON value as a dict (the store serialises it)."""
    value: dict[str, Any] = json.loads(owner.to_json())
    return value


def owner_of(data: dict[str, Any]) -> NamespaceEphemeralData:
    return NamespaceEphemeralData.from_json(json.dumps(data).encode())

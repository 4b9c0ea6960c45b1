"""A cluster in the simulation: brokers (the real core decisions, ``cluster_broker``), the
metadata store with sessions (``cluster_store``), the shared files (``cluster_files``) and
producers that append through whichever broker their lookup led them to.

Every step is one action, named so a schedule reads as a story: ``deliver b0`` (the store
runs b0's oldest call), ``process b1`` (b1 handles its oldest answer), ``file b0`` (an
fsync or a ledger-end read finishes), ``publish p0``, ``tick 40`` (40 ms pass), and the
faults: ``pause``/``resume`` (SIGSTOP), ``cut``/``heal`` (the network to the store),
``kill``/``restart``, ``store-down``/``store-up`` (a ZooKeeper restart; ``store-up
sessions-lost``: it came back without its sessions), ``drop-owner`` (an ownership node
removed by someone else), ``unload``.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from magnetar.core.cluster.managed_ledger_info import LedgerWriter, ManagedLedgerInfo
from magnetar.core.cluster.metadata_store import NOT_EXISTS, MetadataStoreError, SessionExpired
from magnetar.core.cluster.namespace_bundles import NamespaceBundles
from magnetar.core.cluster.topic_lookup import Acquire, Connect, Redirect, decide_lookup
from magnetar.testing.sim.cluster_broker import (
    FsyncDone,
    LedgerEndRead,
    Options,
    SimBroker,
    StoreAnswer,
    StoreCall,
)
from magnetar.testing.sim.cluster_checkers import ClusterChecker, ClusterViolation, Receipt
from magnetar.testing.sim.cluster_files import SimSharedFiles
from magnetar.testing.sim.cluster_store import SimMetadataStore, SimStoreClient

NAMESPACE = "public/default"
REDIRECTS_MAX = 3


@dataclass
class SimProducer:
    name: str
    topic: str
    broker: str | None = None
    to_send: deque[str] = field(default_factory=deque)
    inflight: set[str] = field(default_factory=set)
    acked: set[str] = field(default_factory=set)
    sent: int = 0

    def next_message(self) -> str:
        if self.to_send:
            return self.to_send.popleft()
        self.sent += 1
        return f"{self.name}-{self.sent}"


@dataclass(frozen=True)
class WorldSetup:
    brokers: int
    producers: int
    topics: tuple[str, ...]
    options: Options
    clock_rates: tuple[float, ...]
    #: how likely a running broker that reaches the store gets its queued work done each
    #: time its timers fire (0: only explicit steps move anything)
    progress_while_ticking: float = 0.0


class ClusterWorld:
    def __init__(self, setup: WorldSetup, seed: int) -> None:
        self.setup = setup
        self.rng = random.Random(f"cluster-world-{seed}")
        self.now_ms = 0
        self.store = SimMetadataStore(setup.options.session_timeout_ms)
        self.files = SimSharedFiles(self.rng)
        self.checker = ClusterChecker(self.store, self.files)
        self.bundles = NamespaceBundles(NAMESPACE)
        self.brokers: dict[str, SimBroker] = {}
        self.killed: set[str] = set()
        self.producers = {f"p{i}": SimProducer(f"p{i}", setup.topics[i % len(setup.topics)])
                          for i in range(setup.producers)}
        self.figures: dict[str, int] = {}
        for i in range(setup.brokers):
            self._start(f"b{i}")

    def count(self, figure: str, n: int = 1) -> None:
        self.figures[figure] = self.figures.get(figure, 0) + n

    def _start(self, name: str) -> None:
        index = int(name[1:])
        broker = SimBroker(name, self.store.client(name), self.bundles, list(self.setup.topics), self.setup.options,
                           self, clock_offset_ms=1000 * index + self.rng.randint(0, 999),
                           clock_rate=self.setup.clock_rates[index])
        broker.world_now_ms = self.now_ms
        self.brokers[name] = broker
        self.killed.discard(name)
        self._connect(broker.client)

    def _connect(self, client: SimStoreClient) -> None:
        try:
            client.connect()
        except MetadataStoreError:
            pass

    # -- hooks the brokers call -------------------------------------------------------------

    def receipt(self, broker: SimBroker, producer: str, topic: str, writer: LedgerWriter, ledger_id: int,
             index: int, message: str) -> None:
        self.checker.on_ack(Receipt(topic, ledger_id, index, message, str(writer), broker.name))
        p = self.producers[producer]
        p.inflight.discard(message)
        p.acked.add(message)
        self.count("receipts")

    def send_error(self, producer: str, message: str) -> None:
        p = self.producers[producer]
        if message in p.inflight:
            p.inflight.discard(message)
            p.to_send.append(message)
        p.broker = None
        self.count("send_errors")

    def open_ledger_file(self, topic: str, ledger_id: int, writer: LedgerWriter) -> None:
        self.checker.on_file_created(topic, ledger_id, writer)
        try:
            self.files.create((topic, ledger_id), str(writer))
        except FileExistsError as exc:
            raise ClusterViolation(str(exc)) from exc

    def append_entry(self, topic: str, ledger_id: int, message: str) -> int:
        return self.files.append((topic, ledger_id), message)

    # -- the actions ------------------------------------------------------------------------

    def live(self) -> list[SimBroker]:
        return [b for name, b in sorted(self.brokers.items()) if name not in self.killed]

    def running(self) -> list[SimBroker]:
        return [b for b in self.live() if not b.paused]

    def reachable(self, broker: SimBroker) -> bool:
        return broker.client.linked and self.store.available

    def enabled(self) -> list[tuple[str, str]]:
        """Every action that can happen now (faults included)."""
        actions: list[tuple[str, str]] = [("tick", ""), ("store-down" if self.store.available else "store-up", "")]
        for b in self.live():
            if b.outbound:
                actions.append(("deliver", b.name))
            if b.file_ops:
                actions.append(("file", b.name))
            if not b.paused and b.inbound:
                actions.append(("process", b.name))
            if b.client.current_session_id() is None and not b.paused and self.reachable(b):
                actions.append(("reconnect", b.name))
            actions.append(("resume" if b.paused else "pause", b.name))
            actions.append(("heal" if not b.client.linked else "cut", b.name))
            actions.append(("kill", b.name))
            if b.ownership.owned() and not b.paused:
                actions.append(("unload", b.name))
        actions.extend(("restart", name) for name in sorted(self.killed))
        if not self.store.available:
            actions.append(("store-up", "sessions-lost"))
        actions.extend(("drop-owner", path) for path in sorted(self.store.nodes) if path.startswith("/namespace/"))
        actions.extend(("publish", p) for p in sorted(self.producers))
        actions.extend(("timeout", p.name) for p in self.producers.values() if p.broker or p.inflight)
        return actions

    def apply(self, action: str, arg: str) -> None:
        getattr(self, "_do_" + action.replace("-", "_"))(arg)

    def _do_tick(self, arg: str) -> None:
        self.advance(int(arg) if arg else 1)

    def advance(self, ms: int) -> None:
        """Time passes; running brokers' timers fire as their deadlines come."""
        end = self.now_ms + ms
        while self.now_ms < end:
            step = end - self.now_ms
            for b in self.running():
                deadline = b.next_deadline_ms()
                if deadline is not None:
                    step = min(step, max(1, int((deadline - b.now_ms()) / b.clock_rate) + 1))
            self.now_ms += step
            self.store.advance(self.now_ms)
            for b in self.live():
                b.world_now_ms = self.now_ms
            for b in self.running():
                b.on_timer()
                if self.reachable(b) and self.rng.random() < self.setup.progress_while_ticking:
                    self.progress(b)

    def progress(self, broker: SimBroker) -> None:
        """A healthy broker gets on with its work while time passes: its calls reach the
        store, its files sync, it handles what came back."""
        while broker.outbound:
            self._do_deliver(broker.name)
        while broker.file_ops:
            self._do_file(broker.name)
        while broker.inbound:
            broker.process_one()

    def _do_deliver(self, name: str) -> None:
        broker = self.brokers[name]
        call = broker.outbound.popleft()
        self.store.advance(self.now_ms)
        result = self._execute(broker.client, call)
        broker.inbound.append(StoreAnswer(call, result))

    def _execute(self, client: SimStoreClient, call: StoreCall) -> object:
        try:
            if call.session_id is None or call.session_id != client.current_session_id():
                # a call sent in a session that is gone fails; no later session runs it
                raise SessionExpired(f"{client.name}'s session {call.session_id} is gone")
            if call.kind == "heartbeat":
                return client.heartbeat()
            if call.kind in ("register", "create-owner"):
                return client.create_ephemeral(call.path, call.value)
            if call.kind == "delete-owner":
                client.delete(call.path, None)
                return None
            if call.kind in ("read-ledgers", "read-session"):
                return client.get(call.path)
            expected = NOT_EXISTS if call.expected_version == NOT_EXISTS else call.expected_version
            stat = client.put(call.path, call.value, expected)
        except MetadataStoreError as exc:
            return exc
        assert call.topic is not None
        info = ManagedLedgerInfo.from_json(call.value)
        self.checker.on_ledger_list(call.topic, info)
        self.count("ledger_list_writes")
        if call.kind == "fence" and self._fences_a_live_writer(call.topic, info):
            self.count("fenced_live_writers")
        return stat

    def _fences_a_live_writer(self, topic: str, info: ManagedLedgerInfo) -> bool:
        """The fence closed a ledger whose writer still runs and thinks it writes it (the
        case the lease is for)."""
        closed = [x for x in info.ledgers if not x.open]
        if not closed or closed[-1].writer is None:
            return False
        previous = self.brokers.get(closed[-1].writer.broker_id)
        writer = previous.writers.get(topic) if previous and previous.name not in self.killed else None
        return writer is not None and writer.ledger_id == closed[-1].ledger_id

    def _do_file(self, name: str) -> None:
        broker = self.brokers[name]
        op = broker.file_ops.popleft()
        key = (op.topic, op.ledger_id)
        if op.kind == "fsync":
            broker.inbound.append(FsyncDone(op.topic, op.ledger_id, self.files.fsync(key)))
        else:
            broker.inbound.append(LedgerEndRead(op.topic, self.files.open_and_sync(key), op.asker))
            self.count("ledger_ends_read")

    def _do_process(self, name: str) -> None:
        self.brokers[name].process_one()

    def _do_reconnect(self, name: str) -> None:
        self._connect(self.brokers[name].client)
        self.count("sessions_reestablished")

    def _do_pause(self, name: str) -> None:
        self.brokers[name].paused = True
        self.count("pauses")

    def _do_resume(self, name: str) -> None:
        self.brokers[name].paused = False

    def _do_cut(self, name: str) -> None:
        self.brokers[name].client.linked = False
        self.count("cuts")

    def _do_heal(self, name: str) -> None:
        client = self.brokers[name].client
        client.linked = True
        client.flush()

    def _do_kill(self, name: str) -> None:
        broker = self.brokers[name]
        for topic, writer in broker.writers.items():
            self.files.crash_writer((topic, writer.ledger_id))
        for p in self.producers.values():
            if p.broker == name:
                p.to_send.extend(sorted(p.inflight))
                p.inflight.clear()
                p.broker = None
        broker.client.linked = False
        self.killed.add(name)
        self.count("kills")

    def _do_restart(self, name: str) -> None:
        self._start(name)

    def _do_store_down(self, arg: str) -> None:
        self.store.restart()
        self.count("store_restarts")

    def _do_store_up(self, arg: str) -> None:
        self.store.come_back(sessions_lost=arg == "sessions-lost")
        if arg:
            self.count("store_sessions_lost")

    def _do_drop_owner(self, path: str) -> None:
        """Someone else removes an ownership node while its owner's session lives (an
        operator by hand; a store restored without it)."""
        self.store.remove(path)
        self.count("owner_nodes_dropped")

    def _do_unload(self, name: str) -> None:
        broker = self.brokers[name]
        owned = broker.ownership.owned()
        broker.release(owned[self.rng.randrange(len(owned))])
        self.count("unloads")

    def _do_acquire(self, arg: str) -> None:
        """``acquire b1 <topic>``: an authoritative lookup of the topic reaches b1 (a client
        redirected there), which takes the bundle if nobody holds it."""
        name, topic = arg.split(" ", 1)
        self.follow(topic, self.brokers[name], acquire=True, authoritative=True)

    def _do_timeout(self, name: str) -> None:
        """The producer gives up on its connection (its operation timeout): it looks up again
        and sends its unanswered messages again."""
        p = self.producers[name]
        p.to_send.extend(sorted(p.inflight))
        p.inflight.clear()
        p.broker = None

    def _do_publish(self, name: str) -> None:
        p = self.producers[name]
        if p.broker is None:
            self.lookup(p)
            return
        broker = self.brokers[p.broker]
        if p.broker in self.killed or broker.paused:
            return  # the send waits on a connection that does not answer
        if broker.check_send(p.topic) is not None:
            p.broker = None
            self.count("not_ready")
            return
        message = p.next_message()
        p.inflight.add(message)
        broker.send(p.topic, p.name, message)
        self.count("appends")

    # -- lookups ----------------------------------------------------------------------------

    def answering(self) -> list[SimBroker]:
        """Brokers that can answer a lookup now (running, reaching the store)."""
        return [b for b in self.running() if self.reachable(b)]

    def lookup(self, p: SimProducer) -> None:
        candidates = self.answering()
        if not candidates:
            return
        self.count("lookups")
        target = self.follow(p.topic, candidates[self.rng.randrange(len(candidates))], acquire=True)
        if target is not None:
            p.broker = target

    def follow(self, topic: str, broker: SimBroker, acquire: bool, authoritative: bool = False) -> str | None:
        """The broker a lookup through ``broker`` ends at (following redirects), or ``None``."""
        for _ in range(REDIRECTS_MAX):
            bundle = self.bundles.find_bundle(topic)
            answer = decide_lookup(broker.name, broker.view(bundle), broker.registered(), None, authoritative)
            if isinstance(answer, Connect):
                return broker.name
            if isinstance(answer, Acquire) and acquire:
                broker.acquire(bundle)
            if not isinstance(answer, Redirect):
                return None
            nxt = self.brokers.get(answer.broker_id)
            if nxt is None or nxt not in self.answering():
                return None
            broker, authoritative = nxt, True
        return None

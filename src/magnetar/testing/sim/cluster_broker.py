"""One simulated broker of a cluster: the real core decisions (``magnetar.core.cluster``)
with a shell twin that turns their effects into store calls and file operations, and hands
the answers back in the order they arrive.

The broker talks to the store and the files only through queues the world drains: store
calls go out on ``outbound``, file operations on ``file_ops``; answers, notifications and
fsync completions come back on ``inbound``, which the broker works through only while it is
not paused. Its clock is its own monotonic clock (an offset and a rate off the world's).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Protocol

from magnetar.core.cluster.bundle_ownership import (
    BundleOwnership,
    BundleState,
    OwnershipAction,
    OwnershipEffect,
    OwnershipEvent,
)
from magnetar.core.cluster.managed_ledger_info import LedgerWriter, ManagedLedgerInfo
from magnetar.core.cluster.metadata_paths import broker_registration_path, bundle_ownership_path, managed_ledger_path
from magnetar.core.cluster.metadata_store import (
    NOT_EXISTS,
    AlreadyExists,
    GetResult,
    MetadataStoreError,
    NotFound,
    NotificationType,
    SessionNotification,
    Stat,
)
from magnetar.core.cluster.namespace_bundles import NamespaceBundle, NamespaceBundles
from magnetar.core.cluster.namespace_ephemeral_data import NamespaceEphemeralData
from magnetar.core.cluster.session_lease import SessionLease
from magnetar.core.cluster.topic_lookup import BundleView, RegisteredBroker, check_serving
from magnetar.core.cluster.topic_takeover import (
    CheckPreviousSession,
    ReadLedgerEnd,
    ReadLedgerList,
    StartServing,
    TakeoverEffect,
    TopicTakeover,
    WriteLedgerList,
)
from magnetar.core.names import TopicName
from magnetar.testing.sim.cluster_store import SimStoreClient, StoreMessage


@lru_cache(maxsize=1024)
def _owner_data(value: bytes) -> NamespaceEphemeralData:
    """Node values parsed once: the simulation reads the same few nodes very often."""
    return NamespaceEphemeralData.from_json(value)


@dataclass
class StoreCall:
    kind: str
    path: str
    #: the broker's session when it sent the call, and its clock then
    session_id: int | None
    sent_ms: int
    value: bytes = b""
    expected_version: int | None = None
    bundle: NamespaceBundle | None = None
    topic: str | None = None
    info: ManagedLedgerInfo | None = None
    #: the takeover or the writer that asked: an answer goes only to the one that asked
    asker: object = None
    #: the previous writer whose session is asked after
    previous: LedgerWriter | None = None


@dataclass
class FileOp:
    kind: str  # "fsync" | "read-end"
    topic: str
    ledger_id: int
    asker: object = None


@dataclass(frozen=True, slots=True)
class StoreAnswer:
    call: StoreCall
    #: what the call returned, or the MetadataStoreError it raised
    result: object


@dataclass(frozen=True, slots=True)
class StoreNote:
    """A session event or a change notification, in the order the store sent it."""

    message: StoreMessage


@dataclass(frozen=True, slots=True)
class FsyncDone:
    topic: str
    ledger_id: int
    durable: int


@dataclass(frozen=True, slots=True)
class LedgerEndRead:
    topic: str
    entries: int
    asker: object


Inbound = StoreAnswer | StoreNote | FsyncDone | LedgerEndRead


@dataclass
class Writer:
    """A topic served here: the open ledger and the appends waiting for their fsync."""

    ledger_id: int
    writer: LedgerWriter
    info: ManagedLedgerInfo
    version: int
    #: entry index -> (producer, message) for appends written, not yet answered
    pending: dict[int, tuple[str, str]] = field(default_factory=dict)
    appended: int = 0
    #: "" serving; "rollover" or "release" once it stopped taking appends to close
    closing: str = ""
    close_sent: bool = False


@dataclass
class Options:
    session_timeout_ms: int
    margin_ms: int
    entries_per_ledger: int
    #: planted bugs, to show the checkers can fail
    skip_session_check: bool = False
    skip_takeover_wait: bool = False
    #: takes its own session for older than any wait (a store that dropped every session
    #: at once then passes for one that expired the previous writer's)
    skip_own_session_age: bool = False


class Hooks(Protocol):
    """What a broker tells the world it runs in (``ClusterWorld``)."""

    def receipt(self, broker: SimBroker, producer: str, topic: str, writer: LedgerWriter, ledger_id: int,
                index: int, message: str) -> None:
        """The broker acknowledged an append to its producer."""

    def send_error(self, producer: str, message: str) -> None:
        """The broker answered an append with a retriable error."""

    def open_ledger_file(self, topic: str, ledger_id: int, writer: LedgerWriter) -> None:
        """Create the ledger's file for its writer."""

    def append_entry(self, topic: str, ledger_id: int, message: str) -> int:
        """Write one entry to the ledger's file; its index."""
        ...


class SimBroker:
    def __init__(self, name: str, client: SimStoreClient, bundles: NamespaceBundles, topics: list[str],
                 options: Options, hooks: Hooks, clock_offset_ms: int, clock_rate: float) -> None:
        self.name = name
        self.client = client
        self.bundles = bundles
        self.topics = topics
        self.options = options
        self.hooks = hooks
        self.clock_offset_ms = clock_offset_ms
        self.clock_rate = clock_rate
        self.lease = SessionLease(options.session_timeout_ms, options.margin_ms)
        #: the session whose beginning was heard, and when (this broker's clock)
        self.session_of_since: int | None = None
        self.session_since_ms = 0
        self.ownership = BundleOwnership(name)
        self.paused = False
        self.outbound: deque[StoreCall] = deque()
        self.file_ops: deque[FileOp] = deque()
        self.inbound: deque[Inbound] = deque()
        self.takeovers: dict[str, TopicTakeover] = {}
        self.writers: dict[str, Writer] = {}
        self.next_heartbeat_ms = 0
        self.world_now_ms = 0
        self._bundle_of_path = {bundle_ownership_path(b): b for b in bundles.bundles}
        client.register_listener(self._on_store_message)

    # -- time -------------------------------------------------------------------------------

    def now_ms(self) -> int:
        return self.clock_offset_ms + int(self.world_now_ms * self.clock_rate)

    def url(self) -> NamespaceEphemeralData:
        return NamespaceEphemeralData(self.name, f"pulsar://{self.name}:6650", None, f"http://{self.name}:8080")

    def on_timer(self) -> None:
        now = self.now_ms()
        if now >= self.next_heartbeat_ms and self.lease.session_id is not None:
            self.next_heartbeat_ms = now + self.lease.heartbeat_interval_ms()
            self._call("heartbeat", "")
        for topic, takeover in list(self.takeovers.items()):
            self._run(topic, takeover.on_timer(now))

    def next_deadline_ms(self) -> int | None:
        deadlines = [t.next_deadline_ms() for t in self.takeovers.values()]
        if self.lease.session_id is not None:
            deadlines.append(self.next_heartbeat_ms)
        known = [d for d in deadlines if d is not None]
        return min(known) if known else None

    def _call(self, kind: str, path: str, **fields: object) -> None:
        self.outbound.append(StoreCall(kind, path, self.ownership.session_id, self.now_ms(), **fields))  # type: ignore[arg-type]

    # -- what arrives -----------------------------------------------------------------------

    def _on_store_message(self, message: StoreMessage) -> None:
        self.inbound.append(StoreNote(message))

    def process_one(self) -> None:
        item = self.inbound.popleft()
        if isinstance(item, StoreNote):
            self._on_notification(item.message)
        elif isinstance(item, StoreAnswer):
            getattr(self, "_answer_" + item.call.kind.replace("-", "_"))(item.call, item.result)
        elif isinstance(item, FsyncDone):
            self._on_fsync(item.topic, item.ledger_id, item.durable)
        else:
            takeover = self.takeovers.get(item.topic)
            if takeover is not None and takeover is item.asker:
                self._run(item.topic, takeover.on_ledger_end(item.entries))

    def _on_notification(self, message: StoreMessage) -> None:
        now = self.now_ms()
        if isinstance(message, SessionNotification):
            self.lease.on_session_event(message.event, message.session_id)
            self._apply(self.ownership.on_session_event(message.event, message.session_id, now))
            if self.lease.session_id is not None and message.session_id == self.lease.session_id:
                if message.session_id != self.session_of_since:
                    # heard after the session began: a later moment, on the safe side
                    self.session_of_since, self.session_since_ms = message.session_id, now
                self._call("register", broker_registration_path(self.name), value=self.url().to_json())
                self.next_heartbeat_ms = now
            return
        if message.path == broker_registration_path(self.name) and self.lease.session_id is not None:
            # an earlier incarnation's registration expired: register this session
            self._call("register", message.path, value=self.url().to_json())
            return
        bundle = self._bundle_of_path.get(message.path)
        if bundle is not None and message.type is NotificationType.DELETED:
            self._apply(self.ownership.handle(bundle, OwnershipEvent.NODE_DELETED, now, self.ownership.session_id))

    def _answer_heartbeat(self, call: StoreCall, result: object) -> None:
        if isinstance(result, int):
            self.lease.on_heartbeat_answered(result, call.sent_ms)

    def _answer_register(self, call: StoreCall, result: object) -> None:
        """A registration without an answer is sent again while its session lasts; one that
        found an earlier session's node is sent again when that node goes."""
        failed = isinstance(result, MetadataStoreError) and not isinstance(result, AlreadyExists)
        if failed and call.session_id is not None and call.session_id == self.lease.session_id:
            self._call("register", call.path, value=call.value)

    def _answer_create_owner(self, call: StoreCall, result: object) -> None:
        bundle = call.bundle
        assert bundle is not None
        now = self.now_ms()
        if isinstance(result, Stat):
            self._apply(self.ownership.handle(bundle, OwnershipEvent.CREATED, now, result.session_id))
        elif isinstance(result, AlreadyExists) and result.existing is not None:
            owner = _owner_data(result.existing.value)
            self._apply(self.ownership.on_exists(bundle, owner.broker_id, result.existing.stat.session_id, now,
                                                 call.session_id or 0))
        else:
            self._apply(self.ownership.handle(bundle, OwnershipEvent.FAILED, now, call.session_id))

    def _answer_delete_owner(self, call: StoreCall, result: object) -> None:
        assert call.bundle is not None
        if result is None or isinstance(result, NotFound):
            self._apply(self.ownership.handle(call.bundle, OwnershipEvent.DELETED, self.now_ms(), call.session_id))
        elif self.ownership.state(call.bundle) is BundleState.RELEASING:
            self._call("delete-owner", call.path, bundle=call.bundle)

    def _answer_read_ledgers(self, call: StoreCall, result: object) -> None:
        assert call.topic is not None
        takeover = self.takeovers.get(call.topic)
        if takeover is None or takeover is not call.asker:
            return
        if isinstance(result, MetadataStoreError):
            self._call("read-ledgers", call.path, topic=call.topic, asker=takeover)
            return
        got = result if isinstance(result, GetResult) else None
        info = ManagedLedgerInfo.from_json(got.value) if got else None
        self._run(call.topic, takeover.on_ledger_list(info, got.stat.version if got else NOT_EXISTS, self.now_ms()))

    def _answer_read_session(self, call: StoreCall, result: object) -> None:
        assert call.topic is not None and call.previous is not None
        takeover = self.takeovers.get(call.topic)
        if takeover is None or takeover is not call.asker:
            return
        # alive unless the registration is gone or another session's (an error: not known)
        alive = not isinstance(result, GetResult | type(None)) or \
            (result is not None and result.stat.session_id == call.previous.session_id)
        self._run(call.topic, takeover.on_previous_session(alive, self.now_ms()))

    def _answer_fence(self, call: StoreCall, result: object) -> None:
        assert call.topic is not None and call.info is not None
        takeover = self.takeovers.get(call.topic)
        if takeover is None or takeover is not call.asker:
            return
        if isinstance(result, Stat):
            self._run(call.topic, takeover.on_written(call.info, result.version))
        else:
            self._run(call.topic, takeover.on_write_failed())

    def _answer_close_ledger(self, call: StoreCall, result: object) -> None:
        assert call.topic is not None and call.info is not None
        writer = self.writers.get(call.topic)
        if writer is None or writer is not call.asker:
            return
        if isinstance(result, Stat) and writer.closing == "rollover":
            new = call.info.open_ledger
            assert new is not None
            self.hooks.open_ledger_file(call.topic, new.ledger_id, writer.writer)
            self.writers[call.topic] = Writer(new.ledger_id, writer.writer, call.info, result.version)
            return
        # closed for an unload, or the close failed (the topic was lost): stop serving it
        del self.writers[call.topic]
        self._maybe_released(self._bundle_of(call.topic))

    # -- effects ----------------------------------------------------------------------------

    def _apply(self, effects: list[OwnershipEffect]) -> None:
        for effect in effects:
            action, bundle = effect.action, effect.bundle
            if action is OwnershipAction.CREATE_NODE:
                self._call("create-owner", bundle_ownership_path(bundle), value=self.url().to_json(), bundle=bundle)
            elif action is OwnershipAction.SERVE:
                self._serve(bundle)
            elif action is OwnershipAction.STOP_SERVING:
                self._stop(bundle)
            elif action is OwnershipAction.CLOSE_TOPICS:
                self._close_topics(bundle)
            elif action is OwnershipAction.DELETE_NODE:
                self._call("delete-owner", bundle_ownership_path(bundle), bundle=bundle)

    def _bundle_of(self, topic: str) -> NamespaceBundle:
        return self.bundles.find_bundle(topic)

    def _topics_of(self, bundle: NamespaceBundle) -> list[str]:
        return [t for t in self.topics if self._bundle_of(t) == bundle]

    def _serve(self, bundle: NamespaceBundle) -> None:
        since = self.ownership.owned_since_ms(bundle)
        session_id = self.ownership.session_id
        assert since is not None and session_id is not None
        for topic in self._topics_of(bundle):
            self._load(topic, since, session_id)

    def _load(self, topic: str, owned_since_ms: int, session_id: int) -> None:
        """Take the topic over (Pulsar loads a topic when its bundle is owned and asked for)."""
        wait_ms = 0 if self.options.skip_takeover_wait else self.lease.takeover_wait_ms()
        since = self.session_since_ms if self.session_of_since == session_id else None
        if self.options.skip_own_session_age:
            since = -(1 << 40)
        takeover = TopicTakeover(LedgerWriter(self.name, session_id), owned_since_ms, wait_ms, since)
        self.takeovers[topic] = takeover
        self._run(topic, takeover.start())

    def _stop(self, bundle: NamespaceBundle) -> None:
        for topic in self._topics_of(bundle):
            takeover = self.takeovers.pop(topic, None)
            if takeover is not None:
                takeover.abandon()
            writer = self.writers.pop(topic, None)
            for producer, message in (writer.pending.values() if writer else ()):
                self.hooks.send_error(producer, message)

    def _close_topics(self, bundle: NamespaceBundle) -> None:
        for topic in self._topics_of(bundle):
            takeover = self.takeovers.pop(topic, None)
            if takeover is not None:
                takeover.abandon()
            writer = self.writers.get(topic)
            if writer is not None:
                writer.closing = "release"
                self._maybe_close(topic, writer)
        self._maybe_released(bundle)

    def _maybe_released(self, bundle: NamespaceBundle) -> None:
        if self.ownership.state(bundle) is BundleState.RELEASING and not any(
                t in self.writers for t in self._topics_of(bundle)):
            self._apply(self.ownership.handle(bundle, OwnershipEvent.TOPICS_CLOSED, self.now_ms()))

    def _run(self, topic: str, effects: list[TakeoverEffect]) -> None:
        path = managed_ledger_path(TopicName.parse(topic))
        takeover = self.takeovers[topic]
        for effect in effects:
            if isinstance(effect, ReadLedgerList):
                self._call("read-ledgers", path, topic=topic, asker=takeover)
            elif isinstance(effect, CheckPreviousSession):
                self._call("read-session", broker_registration_path(effect.writer.broker_id), topic=topic,
                           asker=takeover, previous=effect.writer)
            elif isinstance(effect, ReadLedgerEnd):
                self.file_ops.append(FileOp("read-end", topic, effect.ledger_id, takeover))
            elif isinstance(effect, WriteLedgerList):
                self._call("fence", path, value=effect.info.to_json(), expected_version=effect.expected_version,
                           topic=topic, info=effect.info, asker=takeover)
            elif isinstance(effect, StartServing):
                del self.takeovers[topic]
                self.hooks.open_ledger_file(topic, effect.ledger_id, takeover.writer)
                self.writers[topic] = Writer(effect.ledger_id, takeover.writer, takeover.info, takeover.version)

    # -- appends ----------------------------------------------------------------------------

    def check_send(self, topic: str) -> str | None:
        """``None`` when the topic takes appends here, else the ServiceNotReady message."""
        writer = self.writers.get(topic)
        bundle = self._bundle_of(topic)
        refusal = check_serving(self.name, self.ownership.state(bundle), writer is not None and not writer.closing)
        since, session_id = self.ownership.owned_since_ms(bundle), self.ownership.session_id
        if refusal and writer is None and topic not in self.takeovers and since is not None and session_id:
            self._load(topic, since, session_id)  # a topic dropped after a failed close: load it again
        return refusal.message if refusal else None

    def send(self, topic: str, producer: str, message: str) -> None:
        writer = self.writers[topic]
        index = self.hooks.append_entry(topic, writer.ledger_id, message)
        writer.pending[index] = (producer, message)
        writer.appended = index + 1
        self.file_ops.append(FileOp("fsync", topic, writer.ledger_id))
        if writer.appended >= self.options.entries_per_ledger:
            writer.closing = "rollover"

    def _on_fsync(self, topic: str, ledger_id: int, durable: int) -> None:
        writer = self.writers.get(topic)
        if writer is None or writer.ledger_id != ledger_id:
            return
        now = self.now_ms()
        for index in sorted(i for i in writer.pending if i < durable):
            producer, message = writer.pending.pop(index)
            if self.options.skip_session_check or self.lease.may_acknowledge(now, writer.writer.session_id):
                self.hooks.receipt(self, producer, topic, writer.writer, ledger_id, index, message)
            else:
                self.hooks.send_error(producer, message)
        self._maybe_close(topic, writer)

    def _maybe_close(self, topic: str, writer: Writer) -> None:
        """A closing ledger is closed in the store once every append on it was answered."""
        if not writer.closing or writer.pending or writer.close_sent:
            return
        writer.close_sent = True
        info = writer.info.with_open_closed_at(writer.appended)
        if writer.closing == "rollover":
            info = info.with_new_ledger(writer.writer)
        self._call("close-ledger", managed_ledger_path(TopicName.parse(topic)), value=info.to_json(),
                   expected_version=writer.version, topic=topic, info=info, asker=writer)

    # -- lookups ----------------------------------------------------------------------------

    def view(self, bundle: NamespaceBundle) -> BundleView:
        """The bundle as this broker sees it: its own state and the store's node."""
        got = self.client.store.read(bundle_ownership_path(bundle))
        owner = _owner_data(got.value) if got else None
        ours = got is not None and got.stat.session_id == self.ownership.session_id
        return BundleView(self.ownership.state(bundle), owner, ours)

    def registered(self) -> dict[str, RegisteredBroker]:
        store = self.client.store
        owners = [_owner_data(store.nodes[p].value).broker_id
                  for p in self._bundle_of_path if p in store.nodes]
        registered = {}
        for path, node in store.nodes.items():
            if path.startswith("/loadbalance/brokers/"):
                data = _owner_data(node.value)
                registered[data.broker_id] = RegisteredBroker(data, owners.count(data.broker_id))
        return registered

    def acquire(self, bundle: NamespaceBundle) -> None:
        self._apply(self.ownership.handle(bundle, OwnershipEvent.ACQUIRE, self.now_ms()))

    def release(self, bundle: NamespaceBundle) -> None:
        self._apply(self.ownership.handle(bundle, OwnershipEvent.RELEASE, self.now_ms()))

"""Fault campaigns and figures for a cluster of ``magnetar broker`` processes over ZooKeeper.

Parts, chosen with ``--parts`` (default ``kill,pause``):

``kill``
    Per trial: a fresh topic, the official client's producer (deduplication on in the broker,
    a fixed producer name, no send timeout) publishing at ``--rate`` msgs/s; the topic's owner
    is killed with SIGKILL. Printed per trial: seconds from the kill until a message sent
    after it got its receipt, messages acknowledged but not read back, messages read back
    twice, and receipts whose message id differs from the id the message is read back at.
    The killed broker is started again before the next trial.
``pause``
    Per trial: the same load; the owner is stopped with SIGSTOP for twice the session timeout,
    then SIGCONT. Besides the above: receipts the paused broker gave after SIGCONT, and
    receipts beyond the end at which the successor closed (fenced) the paused broker's ledger
    according to the topic's ledger list in ZooKeeper (each would be an acknowledged entry
    that the successor does not serve).
``cpu``
    The broker's CPU seconds per 100,000 entries under the protocol-level generator of
    ``bench/wire_bench.py``: a standalone broker against one broker of a cluster (ZooKeeper).
``pair``
    Two brokers of a cluster; two topics, each with a protocol-level generator and consumer:
    entries/s with the topics on different brokers against both topics on one broker.
``spread``
    Three brokers; ``--topics`` topics of a namespace of ``--bundles`` bundles looked up
    (which places their bundles): topics per broker. Then ``--producers`` of them get a
    producer publishing steadily, the namespace is unloaded, and each producer's first
    publish issued after the unload returned is timed.

Every process's log stays under the data directory, kept when a part finds a problem (or
always with ``--data-dir``). One JSON line per part is printed last, for scripts.

    python bench/failover_campaign.py --parts kill,pause --trials 20
    python bench/failover_campaign.py --parts cpu,pair,spread
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import wire_bench  # noqa: E402

from magnetar.core.cluster.namespace_bundles import NamespaceBundles, default_boundaries  # noqa: E402
from magnetar.core.names import TopicName  # noqa: E402
from magnetar.storage.zookeeper.store import ZooKeeperMetadataStore  # noqa: E402
from magnetar.testing.broker_process import BrokerProcess  # noqa: E402
from magnetar.testing.polling import NotReached, wait_until  # noqa: E402
from magnetar.testing.raw_client import RawConnection  # noqa: E402
from magnetar.testing.raw_client import lookup as raw_lookup  # noqa: E402
from magnetar.testing.zookeeper_process import ZooKeeperProcess  # noqa: E402
from magnetar.wire import pulsar_api_pb2 as pb  # noqa: E402

T = pb.BaseCommand

PARTS = ("kill", "pause", "cpu", "pair", "spread")
CLUSTER = "campaign"
PRODUCER_NAME = "failover-campaign"
MessageKey = tuple[int, int, int]  # ledger id, entry id, batch index


def quiet_logger() -> pulsar.ConsoleLogger:
    return pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


_client_log: list[pulsar.FileLogger] = []


def client_logger(scratch: Path) -> pulsar.FileLogger:
    """The official client's log at INFO level. Its logger is the process's: the first path given is kept."""
    if not _client_log:
        _client_log.append(pulsar.FileLogger(pulsar.LoggerLevel.Info, str(scratch / "client.log")))
    return _client_log[0]


class Cluster:
    """A ZooKeeper chroot and ``count`` brokers over one data directory."""

    def __init__(self, zookeeper: ZooKeeperProcess, data_dir: Path, count: int, settings: dict[str, str]) -> None:
        self.url = zookeeper.url(f"/campaign-{uuid.uuid4().hex[:8]}")
        subprocess.run([sys.executable, "-m", "magnetar.cli", "initialize-cluster-metadata", "--cluster", CLUSTER,
                        "--metadata-store", self.url], check=True, capture_output=True, timeout=60)
        self.settings = {"metadataStoreUrl": self.url, "clusterName": CLUSTER, **settings}
        self.store = ZooKeeperMetadataStore(self.url)
        self.brokers: list[BrokerProcess] = []
        try:
            for _ in range(count):
                self.brokers.append(BrokerProcess(data_dir, self.settings, subcommand="broker").start(60))
        except BaseException:
            self.stop()
            raise

    @property
    def service_url(self) -> str:
        return "pulsar://" + ",".join(b.service_url.removeprefix("pulsar://") for b in self.brokers)

    @staticmethod
    def broker_id(broker: BrokerProcess) -> str:
        return f"127.0.0.1:{broker.web_port}"

    def by_id(self, broker_id: str) -> BrokerProcess:
        return next(b for b in self.brokers if self.broker_id(b) == broker_id)

    def owner_of(self, topic: str) -> str | None:
        name = TopicName.parse(topic)
        bundle = NamespaceBundles(name.namespace_name).find_bundle(str(name))
        node = self.store.get_bundle_owner(bundle.namespace, bundle.range_name)
        return None if node is None else str(node.data["brokerId"])

    def registered(self) -> list[str]:
        return self.store.list_brokers()

    def stop(self) -> None:
        for broker in self.brokers:
            if broker.proc is not None and broker.proc.poll() is None:
                os.kill(broker.proc.pid, signal.SIGCONT)  # a paused broker cannot die of SIGTERM
            try:
                broker.stop(20)
            except subprocess.TimeoutExpired:
                pass
        self.store.close()


@dataclass
class Publisher:
    """Sends ``str(index)`` at a fixed rate through send_async; each receipt's time and id noted."""

    producer: pulsar.Producer
    rate: float
    sent_at: list[float] = field(default_factory=list)
    receipts: dict[int, tuple[float, MessageKey]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        start = time.monotonic()
        while not self.stopping.is_set():
            index = len(self.sent_at)
            due = start + index / self.rate
            now = time.monotonic()
            if due > now:
                time.sleep(min(due - now, 0.002))
                continue
            self.sent_at.append(now)
            self.producer.send_async(str(index).encode(), self._done(index))

    def _done(self, index: int) -> Any:
        def done(result: pulsar.Result, msg_id: pulsar.MessageId) -> None:
            now = time.monotonic()
            with self.lock:
                if result == pulsar.Result.Ok:
                    self.receipts[index] = (now, key_of(msg_id))
                else:
                    self.errors.append(f"{index}: {result}")
        return done

    def answered(self) -> int:
        with self.lock:
            return len(self.receipts) + len(self.errors)

    def first_receipt_of_a_send_after(self, moment: float) -> float | None:
        with self.lock:
            times = [at for index, (at, _) in self.receipts.items() if self.sent_at[index] >= moment]
        return min(times) if times else None


def key_of(msg_id: pulsar.MessageId) -> MessageKey:
    return (msg_id.ledger_id(), msg_id.entry_id(), max(msg_id.batch_index(), 0))


def read_back(client: pulsar.Client, topic: str) -> list[tuple[int, MessageKey]]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    stored = []
    try:
        while reader.has_message_available():
            msg = reader.read_next(timeout_millis=10_000)
            stored.append((int(msg.data()), key_of(msg.message_id())))
    finally:
        reader.close()
    return stored


def fresh_topic(kind: str) -> str:
    return f"persistent://public/default/{kind}-{uuid.uuid4().hex[:10]}"


# -- parts 1 and 2: SIGKILL and SIGSTOP of a topic's owner under load ------------------------------------------


@dataclass
class Check:
    """What a read of the whole topic found against the producer's receipts."""

    lost: int = 0
    duplicates: int = 0
    moved_ids: int = 0

    @property
    def clean(self) -> bool:
        return self.lost == self.duplicates == self.moved_ids == 0


@dataclass
class Trial:
    number: int
    owner: str
    recovery_s: float | None
    acknowledged: int
    errors: int
    hang: bool
    #: the read from the topic's owner right after the trial, and after the topic was
    #: unloaded and loaded again from the ledger files (what any later owner serves)
    live: Check
    reloaded: Check
    #: receipts of a message the broker found already stored (Pulsar's id -1:-1 for a duplicate)
    dedup_receipts: int = 0
    #: seconds from the fault until the owner's ownership node was gone, and until a successor held it
    gone_s: float | None = None
    taken_s: float | None = None
    #: pause: seconds from SIGCONT until a message sent after SIGSTOP got its receipt
    after_resume_s: float | None = None
    #: pause: receipts on the paused owner's ledgers that arrived after SIGCONT (the receipt's
    #: check passed before the pause and its write came after), and those of them whose entry
    #: is not read back at the receipt's id (an acknowledged entry the successor does not serve)
    late_receipts: int = 0
    late_not_served: int = 0
    took_over_in_pause: bool | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return (self.recovery_s is not None and not self.hang and self.live.clean and self.reloaded.clean
                and self.late_not_served == 0)


def check(receipts: dict[int, tuple[float, MessageKey]], stored: list[tuple[int, MessageKey]], what: str,
          notes: list[str]) -> tuple[Check, dict[int, MessageKey]]:
    """The check, and where each message was read (its first copy)."""
    stored = [(index, key) for index, key in stored if index != PROBE]
    counts = Counter(index for index, _ in stored)
    read_at = dict(stored)
    lost = sorted(index for index in receipts if index not in read_at)
    # a duplicate's receipt (-1:-1) names no entry; the message must be stored all the same
    moved = sorted(index for index, (_, key) in receipts.items()
                   if index in read_at and read_at[index] != key and key[:2] != (-1, -1))
    twice = sorted(index for index, count in counts.items() if count > 1)
    if lost:
        notes.append(f"{what}: acknowledged but not read back {lost[:10]}")
    if moved:
        shown = [(i, receipts[i][1], read_at[i]) for i in moved[:5]]
        notes.append(f"{what}: read back at another id than its receipt's (index, receipt, read) {shown}")
    if twice:
        notes.append(f"{what}: read back more than once {twice[:10]}, at {[k for i, k in stored if i == twice[0]]}")
    first: dict[int, MessageKey] = {}
    for index, key in stored:
        first.setdefault(index, key)
    return Check(len(lost), sum(counts[i] - 1 for i in twice), len(moved)), first


def owner_by_lookup(cluster: Cluster, topic: str) -> BrokerProcess:
    live = next(b for b in cluster.brokers if b.proc is not None and b.proc.poll() is None)
    with httpx.Client(timeout=30) as http:
        url = lookup(live.web_url, topic, http)
    return next(b for b in cluster.brokers if b.service_url == url)


def unload_topic(cluster: Cluster, topic: str) -> None:
    """Unload through any running broker (redirected to the owner): the next use loads it from the files."""
    live = next(b for b in cluster.brokers if b.proc is not None and b.proc.poll() is None)
    path = topic.replace("persistent://", "/admin/v2/persistent/")
    with httpx.Client(timeout=60, follow_redirects=True) as http:
        http.put(f"{live.web_url}{path}/unload").raise_for_status()


def load_and_fault(cluster: Cluster, args: argparse.Namespace, kind: str, number: int, scratch: Path) -> Trial:
    topic = fresh_topic(kind)
    owner = owner_by_lookup(cluster, topic)
    hosts = [b for b in cluster.brokers if args.client_url == "all" or b is not owner]
    client = pulsar.Client("pulsar://" + ",".join(b.service_url.removeprefix("pulsar://") for b in hosts),
                           operation_timeout_seconds=30, logger=client_logger(scratch))
    try:
        return run_trial(cluster, client, args, kind, number, topic, owner)
    finally:
        client.close()


def run_trial(cluster: Cluster, client: pulsar.Client, args: argparse.Namespace, kind: str, number: int, topic: str,
              owner: BrokerProcess) -> Trial:
    owner_id = cluster.broker_id(owner)
    producer = client.create_producer(topic, producer_name=PRODUCER_NAME, send_timeout_millis=0,
                                      block_if_queue_full=True, max_pending_messages=100_000,
                                      batching_enabled=args.batching, batching_max_publish_delay_ms=1)
    assert cluster.owner_of(topic) == owner_id, "the owner found by lookup holds the bundle"
    assert owner.proc is not None
    load = Publisher(producer, args.rate)
    worker = threading.Thread(target=load.run, daemon=True)
    worker.start()
    time.sleep(args.warmup)
    seen: dict[str, float] = {}
    watching = threading.Event()

    def watch_owner() -> None:
        """When the topic's bundle lost its owner (session expired), and got a new one."""
        while not watching.is_set() and "taken" not in seen:
            current = cluster.owner_of(topic)
            if current != owner_id:
                seen.setdefault("gone", time.monotonic())
            if current is not None and current != owner_id:
                seen["taken"] = time.monotonic()
            time.sleep(0.05)
    watcher = threading.Thread(target=watch_owner, daemon=True)
    watcher.start()
    faulted_at = time.monotonic()
    resumed_at = None
    notes: list[str] = []
    if kind == "kill":
        owner.kill()
    else:
        os.kill(owner.proc.pid, signal.SIGSTOP)
        prober = threading.Thread(target=probe, args=(cluster, owner, topic, args, notes), daemon=True)
        try:
            if args.probe:
                prober.start()
            time.sleep(2 * args.session_timeout_ms / 1000)
        finally:
            os.kill(owner.proc.pid, signal.SIGCONT)
        resumed_at = time.monotonic()
        if args.probe:
            prober.join(60)
    try:
        recovered_at = wait_until(lambda: load.first_receipt_of_a_send_after(faulted_at), args.hang_after,
                                "a publish succeeded after the fault")
        recovery: float | None = recovered_at - faulted_at
    except NotReached as exc:
        recovery = None
        notes.append(str(exc))
    time.sleep(args.after)
    load.stopping.set()
    worker.join()
    sent = len(load.sent_at)
    hang = False
    try:
        wait_until(lambda: load.answered() >= sent, args.hang_after, "every send answered")
    except NotReached as exc:
        hang = True
        notes.append(f"{sent - load.answered()} sends unanswered: {exc}")
    watching.set()
    watcher.join()
    producer.close()
    with load.lock:
        receipts = dict(load.receipts)
        errors = list(load.errors)
    live, served = check(receipts, read_back(client, topic), "live read", notes)
    unload_topic(cluster, topic)
    reloaded, _ = check(receipts, read_back(client, topic), "read after reload", notes)
    trial = Trial(number, owner_id, recovery, len(receipts), len(errors), hang, live, reloaded,
                  dedup_receipts=sum(key[:2] == (-1, -1) for _, key in receipts.values()), notes=notes)
    if "gone" in seen:
        trial.gone_s = seen["gone"] - faulted_at
    if "taken" in seen:
        trial.taken_s = seen["taken"] - faulted_at
    if errors:
        trial.notes.append(f"errors {errors[:3]}")
    if resumed_at is not None:
        before = {key[0] for at, key in receipts.values() if at < faulted_at}
        late = sorted((index, key) for index, (at, key) in receipts.items() if key[0] in before and at > resumed_at)
        trial.late_receipts = len(late)
        trial.late_not_served = sum(served.get(index) != key for index, key in late)
        trial.took_over_in_pause = "taken" in seen and seen["taken"] < resumed_at
        if recovery is not None:
            trial.after_resume_s = recovered_at - resumed_at
        if late:
            trial.notes.append(f"receipts on the paused owner's ledgers {sorted(before)} after SIGCONT: {late[:5]}")
    trial.notes.append(f"topic {topic}, owner log {owner.log_path}")
    return trial


PROBE = -1


def probe(cluster: Cluster, paused: BrokerProcess, topic: str, args: argparse.Namespace, notes: list[str]) -> None:
    """Once the paused owner's session is over, publish one message to ``topic`` through the
    other brokers: a successor takes the topic over while the owner is still paused."""
    time.sleep(args.session_timeout_ms / 1000 + 1)
    others = [b.service_url.removeprefix("pulsar://") for b in cluster.brokers if b is not paused]
    client = pulsar.Client("pulsar://" + ",".join(others), operation_timeout_seconds=30, connection_timeout_ms=2000,
                           logger=quiet_logger())
    try:
        producer = client.create_producer(topic, producer_name=f"{PRODUCER_NAME}-probe", send_timeout_millis=30_000)
        producer.send(str(PROBE).encode())
    except pulsar.PulsarException as exc:
        notes.append(f"the probe's publish failed: {exc}")
    finally:
        client.close()


def restore(cluster: Cluster, args: argparse.Namespace) -> None:
    """Every broker running and registered again before the next trial."""
    for broker in cluster.brokers:
        if broker.proc is None or broker.proc.poll() is not None:
            broker.start(60)
    wait_until(lambda: set(cluster.registered()) >= {cluster.broker_id(b) for b in cluster.brokers},
             args.hang_after, "every broker registered")


def faults(args: argparse.Namespace, kind: str, scratch: Path) -> dict[str, Any]:
    settings = {"metadataStoreSessionTimeoutMillis": str(args.session_timeout_ms),
                "brokerDeduplicationEnabled": "true",
                "defaultRetentionTimeInMinutes": "-1", "defaultRetentionSizeInMB": "-1"}
    trials: list[Trial] = []
    with ZooKeeperProcess(scratch / "zookeeper") as zookeeper:
        zookeeper.start()
        cluster = Cluster(zookeeper, scratch / "data", args.brokers, settings)
        try:
            print(f"{kind}: {args.trials} trials, {args.brokers} brokers, {args.rate:g} msgs/s, session timeout "
                  f"{args.session_timeout_ms} ms, batching {'on' if args.batching else 'off'}, the client given "
                  f"{args.client_url} brokers{', a probe' if kind == 'pause' and args.probe else ''}; "
                  f"logs under {scratch}", flush=True)
            print(TRIAL_HEADER if kind == "kill" else PAUSE_HEADER, flush=True)
            for number in range(1, args.trials + 1):
                trial = load_and_fault(cluster, args, kind, number, scratch)
                trials.append(trial)
                print(trial_row(trial, kind), flush=True)
                if not trial.clean:
                    for note in trial.notes:
                        print(f"    {note}", flush=True)
                restore(cluster, args)
        finally:
            cluster.stop()
    return summarise(kind, trials)


TRIAL_HEADER = (f"{'trial':>5} {'owner':>16} {'recovery s':>10} {'gone s':>6} {'taken s':>7} {'acked':>7} "
                f"{'-1:-1':>5} {'errors':>6} {'hang':>4} | live: {'lost':>4} {'dups':>4} {'moved':>5} "
                f"| reloaded: {'lost':>4} {'dups':>4} {'moved':>5}")
PAUSE_HEADER = TRIAL_HEADER + f" | {'after SIGCONT s':>15} {'late':>4} {'late, not served':>16} {'taken in pause':>14}"


def trial_row(trial: Trial, kind: str) -> str:
    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    def checked(c: Check) -> str:
        return f"{c.lost:>4} {c.duplicates:>4} {c.moved_ids:>5}"
    row = (f"{trial.number:>5} {trial.owner:>16} {seconds(trial.recovery_s):>10} {seconds(trial.gone_s):>6} "
           f"{seconds(trial.taken_s):>7} {trial.acknowledged:>7} {trial.dedup_receipts:>5} {trial.errors:>6} "
           f"{'yes' if trial.hang else 'no':>4} |       {checked(trial.live)} |           {checked(trial.reloaded)}")
    if kind == "pause":
        row += (f" | {seconds(trial.after_resume_s):>15} {trial.late_receipts:>4} {trial.late_not_served:>16} "
                f"{str(trial.took_over_in_pause):>14}")
    return row


def summarise(kind: str, trials: list[Trial]) -> dict[str, Any]:
    recoveries = [t.recovery_s for t in trials if t.recovery_s is not None]
    summary: dict[str, Any] = {
        "part": kind, "trials": len(trials), "clean_trials": sum(t.clean for t in trials),
        "recovery_s": {"min": round(min(recoveries), 2), "median": round(statistics.median(recoveries), 2),
                       "max": round(max(recoveries), 2)} if recoveries else None,
        "recovered_within_7s": sum(r <= 7 for r in recoveries),
        "not_recovered": len(trials) - len(recoveries), "acknowledged": sum(t.acknowledged for t in trials),
        "lost": sum(t.live.lost for t in trials), "duplicates": sum(t.live.duplicates for t in trials),
        "moved_ids": sum(t.live.moved_ids for t in trials),
        "lost_after_reload": sum(t.reloaded.lost for t in trials),
        "duplicates_after_reload": sum(t.reloaded.duplicates for t in trials),
        "moved_ids_after_reload": sum(t.reloaded.moved_ids for t in trials),
        "dedup_receipts": sum(t.dedup_receipts for t in trials), "errors": sum(t.errors for t in trials),
        "hangs": sum(t.hang for t in trials),
    }
    if kind == "pause":
        summary["late_receipts"] = sum(t.late_receipts for t in trials)
        summary["late_receipts_not_served"] = sum(t.late_not_served for t in trials)
        after = [t.after_resume_s for t in trials if t.after_resume_s is not None]
        summary["after_sigcont_s"] = {"min": round(min(after), 2), "median": round(statistics.median(after), 2),
                                      "max": round(max(after), 2)} if after else None
        summary["taken_over_during_pause"] = sum(bool(t.took_over_in_pause) for t in trials)
    recovery = spread_of(summary["recovery_s"])
    print(f"{kind} summary: {summary['clean_trials']}/{len(trials)} clean; recovery s min/median/max {recovery} "
          f"({summary['recovered_within_7s']} within 7 s, {summary['not_recovered']} not at all); acknowledged "
          f"{summary['acknowledged']}; live read: lost {summary['lost']}, duplicates {summary['duplicates']}, at "
          f"another id {summary['moved_ids']}; after reload: lost {summary['lost_after_reload']}, duplicates "
          f"{summary['duplicates_after_reload']}, at another id {summary['moved_ids_after_reload']}; errors "
          f"{summary['errors']}, hangs {summary['hangs']}"
          + (f"; receipts from the paused owner after SIGCONT {summary['late_receipts']} (of which not served by "
             f"the successor {summary['late_receipts_not_served']}), taken over during the pause "
             f"{summary['taken_over_during_pause']}/{len(trials)}; recovery after SIGCONT s min/median/max "
             f"{spread_of(summary['after_sigcont_s'])}" if kind == "pause" else ""), flush=True)
    return summary


def spread_of(figures: dict[str, float] | None) -> str:
    return "-" if figures is None else f"{figures['min']}/{figures['median']}/{figures['max']}"


# -- part 3: CPU per entry, two brokers against one, 10,000 topics over three brokers ---------------------------


def lookup(web_url: str, topic: str, http: httpx.Client) -> str:
    """The owner's service URL for ``topic`` (the lookup places an unowned bundle)."""
    path = topic.replace("persistent://", "/lookup/v2/topic/persistent/")
    deadline = time.monotonic() + 30
    while True:
        answer = http.get(web_url + path, follow_redirects=True)
        # 503: ownership changing hands, or no load manager's leader yet; Pulsar's clients retry
        if answer.status_code != 503 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    answer.raise_for_status()
    return str(answer.json()["brokerUrl"])


def wire_args(args: argparse.Namespace, topic: str) -> argparse.Namespace:
    return argparse.Namespace(messages=args.entries, batch=1, size=100, generators=1, window=1000, rate=0,
                              timeout=900, topic=topic, no_sync=False)


def cpu_part(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    """Standalone and cluster broker in turn, ``--rounds`` times each, same generator."""
    figures: dict[str, list[float]] = {"standalone": [], "cluster": []}
    with ZooKeeperProcess(scratch / "zookeeper") as zookeeper:
        zookeeper.start()
        for round_ in range(args.rounds):
            for mode in ("standalone", "cluster"):
                data = scratch / f"cpu-{mode}-{round_}"
                topic = fresh_topic("cpu")
                if mode == "standalone":
                    broker = BrokerProcess(data, {"journalSyncData": "true"}).start(60)
                else:
                    cluster = Cluster(zookeeper, data, 1, {"journalSyncData": "true"})
                    broker = cluster.brokers[0]
                    with httpx.Client(timeout=30) as http:
                        lookup(broker.web_url, topic, http)
                try:
                    result = wire_bench.measure(wire_args(args, topic), broker)
                finally:
                    if mode == "standalone":
                        broker.stop()
                    else:
                        cluster.stop()
                per_100k = result["broker_cpu_s"] / result["entries"] * 100_000
                figures[mode].append(per_100k)
                print(f"cpu round {round_ + 1} {mode:>10}: {per_100k:.2f} broker CPU s per 100k entries, "
                      f"{result['end_to_end_entries_per_s']:,} entries/s, lost {result['lost']}, duplicates "
                      f"{result['duplicates']}, load {result['load_avg_1m']:.1f}", flush=True)
    medians = {mode: statistics.median(values) for mode, values in figures.items()}
    ratio = medians["cluster"] / medians["standalone"]
    print(f"cpu summary: median broker CPU s per 100k entries: standalone {medians['standalone']:.2f}, "
          f"cluster {medians['cluster']:.2f}, cluster/standalone {ratio:.3f} (busy machine)", flush=True)
    return {"part": "cpu", "entries": args.entries, "rounds": args.rounds,
            "standalone_cpu_s_per_100k": [round(v, 3) for v in figures["standalone"]],
            "cluster_cpu_s_per_100k": [round(v, 3) for v in figures["cluster"]], "ratio": round(ratio, 3)}


def topics_placed(cluster: Cluster, want: list[int], http: httpx.Client) -> list[str]:
    """Fresh topics, the i-th owned by broker ``want[i]`` (looked up until placements fit)."""
    urls = [b.service_url for b in cluster.brokers]
    found: list[str | None] = [None] * len(want)
    for _ in range(200):
        topic = fresh_topic("pair")
        owner = urls.index(lookup(cluster.brokers[0].web_url, topic, http))
        for i, wanted in enumerate(want):
            if found[i] is None and wanted == owner:
                found[i] = topic
                break
        if all(found):
            return [t for t in found if t is not None]
    raise AssertionError(f"no topics placed as {want} among 200")


def run_topics(cluster: Cluster, topics: list[str], entries: int) -> tuple[float, list[float]]:
    """One generator and one consumer per topic at once; entries/s over all, each broker's CPU s."""
    ctx = mp.get_context("spawn")
    ready, results = ctx.Queue(), ctx.Queue()
    with httpx.Client(timeout=30) as http:
        ports = [int(lookup(cluster.brokers[0].web_url, t, http).rsplit(":", 1)[1]) for t in topics]
    procs = []
    for i, (topic, port) in enumerate(zip(topics, ports, strict=True)):
        name = f"pair-{i}"
        procs.append(ctx.Process(target=wire_bench.consumer, args=(port, [name], entries, 1, ready, results, topic)))
        procs.append(ctx.Process(target=wire_bench.generator,
                                 args=(port, name, entries, 1, 100, 1000, 0, ready, results, topic)))
    for proc in procs:
        proc.start()
    for _ in procs:
        ready.get(timeout=300)
    pids = [b.proc.pid for b in cluster.brokers if b.proc is not None]
    cpu_before = [wire_bench.cpu_seconds(pid) for pid in pids]
    started = time.perf_counter()
    outcomes = [results.get(timeout=600) for _ in procs]
    cpu = [wire_bench.cpu_seconds(pid) - before for pid, before in zip(pids, cpu_before, strict=True)]
    for proc in procs:
        proc.join(30)
    consumers = [o for o in outcomes if o[0] == "consumer"]
    if any(o[4] or o[5] for o in consumers):
        raise AssertionError(f"lost or duplicated entries: {consumers}")
    finished = max(o[1] for o in consumers)
    return entries * len(topics) / (finished - started), cpu


def pair_part(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    rates: dict[str, list[float]] = {"two brokers": [], "one broker": []}
    with ZooKeeperProcess(scratch / "zookeeper") as zookeeper:
        zookeeper.start()
        # the topics stay where they were placed: the load manager would split their bundle
        # (over loadBalancerNamespaceBundleMaxMsgRate) or shed it, and the protocol-level
        # generator and consumer do not follow a move
        cluster = Cluster(zookeeper, scratch / "data", 2, {"journalSyncData": "true",
                                                            "loadBalancerAutoBundleSplitEnabled": "false",
                                                            "loadBalancerSheddingEnabled": "false"})
        try:
            for round_ in range(args.rounds):
                for label, want in (("two brokers", [0, 1]), ("one broker", [0, 0])):
                    with httpx.Client(timeout=30) as http:
                        topics = topics_placed(cluster, want, http)
                    rate, cpu = run_topics(cluster, topics, args.entries)
                    rates[label].append(rate)
                    print(f"pair round {round_ + 1} {label:>11}: {rate:,.0f} entries/s over two topics, broker CPU s "
                          f"{[round(c, 1) for c in cpu]}, load {os.getloadavg()[0]:.1f}", flush=True)
        finally:
            cluster.stop()
    medians = {label: statistics.median(values) for label, values in rates.items()}
    ratio = medians["two brokers"] / medians["one broker"]
    print(f"pair summary: two topics on two brokers {medians['two brokers']:,.0f} entries/s, on one broker "
          f"{medians['one broker']:,.0f} entries/s, ratio {ratio:.2f} (2 cores shared with the generators; busy)",
          flush=True)
    return {"part": "pair", "entries_per_topic": args.entries, "two_brokers": [round(r) for r in rates["two brokers"]],
            "one_broker": [round(r) for r in rates["one broker"]], "ratio": round(ratio, 3)}


def spread_part(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    namespace = "public/spread"
    with ZooKeeperProcess(scratch / "zookeeper") as zookeeper:
        zookeeper.start()
        cluster = Cluster(zookeeper, scratch / "data", 3, {"metadataStoreSessionTimeoutMillis": "5000"})
        client = None
        try:
            webs = [b.web_url for b in cluster.brokers]
            urls = [b.service_url for b in cluster.brokers]
            with httpx.Client(timeout=30) as http:
                http.put(f"{webs[0]}/admin/v2/namespaces/{namespace}",
                         json={"bundles": {"numBundles": args.bundles}}).raise_for_status()
            topics = [f"persistent://{namespace}/t-{i}" for i in range(args.topics)]
            started = time.monotonic()
            # one lookup per bundle through the admin API places it (following the leader's
            # redirect, so the chosen broker takes it), then every topic is looked up on the
            # binary protocol, pipelined, through one broker
            bundles = NamespaceBundles(namespace, default_boundaries(args.bundles))
            first = {bundles.find_bundle(t).range_name: t for t in reversed(topics)}
            with httpx.Client(timeout=60) as http:
                for i, topic in enumerate(first.values()):
                    lookup(webs[i % len(webs)], topic, http)
            placed_s = time.monotonic() - started
            owners = binary_lookups(cluster.brokers[0], topics)
            looked_up = time.monotonic() - started
            per_broker = [owners.count(url) for url in urls]
            even = args.topics / len(urls)
            spread = max(abs(n - even) / even for n in per_broker)
            with httpx.Client(timeout=30) as http:
                owned = [len(http.get(f"{web}/admin/v2/brokers/{CLUSTER}/{Cluster.broker_id(b)}/ownedNamespaces")
                             .json()) for web, b in zip(webs, cluster.brokers, strict=True)]
            print(f"spread: {args.topics} topics of {namespace} ({args.bundles} bundles, {len(first)} with topics, "
                  f"placed in {placed_s:.1f} s) looked up in {looked_up:.1f} s; topics per broker {per_broker} "
                  f"(even {even:.0f}, furthest {spread * 100:.1f} % off), bundles owned {owned}", flush=True)
            client = pulsar.Client(",".join(urls).replace(",pulsar://", ","), operation_timeout_seconds=30,
                                   logger=client_logger(scratch))
            unload = unload_under_load(args, client, topics, webs[0], namespace)
        finally:
            if client is not None:
                client.close()
            cluster.stop()
    return {"part": "spread", "topics": args.topics, "bundles": args.bundles, "topics_per_broker": per_broker,
            "furthest_from_even": round(spread, 3), "lookup_s": round(looked_up, 1), **unload}


def binary_lookups(broker: BrokerProcess, topics: list[str], chunk: int = 1000) -> list[str]:
    """The owner's service URL of each topic, from LOOKUPs pipelined on one connection."""
    owners: list[str] = []
    with RawConnection.to_service(broker.service_url, timeout_s=60) as conn:
        conn.handshake()
        for start in range(0, len(topics), chunk):
            part = topics[start:start + chunk]
            with conn.corked():
                for i, topic in enumerate(part):
                    conn.send_command(raw_lookup(topic, start + i + 1))
            answers: dict[int, pb.CommandLookupTopicResponse] = {}
            while len(answers) < len(part):
                frame = conn.read_until(lambda f: f.command.type == T.LOOKUP_RESPONSE, what="a lookup answer")
                answers[frame.command.lookupTopicResponse.request_id] = frame.command.lookupTopicResponse
            for i, topic in enumerate(part):
                answer = answers[start + i + 1]
                if answer.response == pb.CommandLookupTopicResponse.Failed:
                    raise AssertionError(f"lookup of {topic}: {answer.message}")
                owners.append(answer.brokerServiceUrl)
    return owners


def unload_under_load(args: argparse.Namespace, client: pulsar.Client, topics: list[str], web: str,
                      namespace: str) -> dict[str, Any]:
    """``--producers`` producers each sending every ``--period`` s; the namespace unloaded; for each
    producer the first send issued after the unload returned, timed to its receipt."""
    step = max(1, len(topics) // args.producers)
    sample = topics[::step][:args.producers]
    created = time.monotonic()
    producers = [client.create_producer(t, send_timeout_millis=30_000, batching_enabled=False) for t in sample]
    print(f"spread: {len(producers)} producers created in {time.monotonic() - created:.1f} s", flush=True)
    sends: list[list[tuple[float, float | None]]] = [[] for _ in producers]  # per producer: (sent, receipt)
    failures: list[str] = []
    lock = threading.Lock()
    stopping = threading.Event()

    def done(p: int, n: int) -> Any:
        def callback(result: pulsar.Result, _: pulsar.MessageId) -> None:
            now = time.monotonic()
            with lock:
                if result == pulsar.Result.Ok:
                    sends[p][n] = (sends[p][n][0], now)
                else:
                    failures.append(f"{sample[p]}: {result}")
        return callback

    def publish() -> None:
        while not stopping.is_set():
            round_start = time.monotonic()
            for p, producer in enumerate(producers):
                with lock:
                    n = len(sends[p])
                    sends[p].append((time.monotonic(), None))
                producer.send_async(b"x", done(p, n))
            time.sleep(max(0.0, args.period - (time.monotonic() - round_start)))
    worker = threading.Thread(target=publish, daemon=True)
    worker.start()
    time.sleep(2)
    unload_started = time.monotonic()
    with httpx.Client(timeout=120) as http:
        http.put(f"{web}/admin/v2/namespaces/{namespace}/unload").raise_for_status()
    unload_done = time.monotonic()
    time.sleep(args.after + 2)
    stopping.set()
    worker.join()
    wait_until(lambda: all(r is not None for s in sends for _, r in s) or bool(failures), 60, "every send answered")
    with lock:
        firsts = [next(((r - s) if r is not None else None for s, r in mine if s >= unload_done), None)
                  for mine in sends]
        since_start = [next(((r - unload_started) if r is not None else None for s, r in mine if s >= unload_started),
                            None) for mine in sends]
    timed = sorted(f for f in firsts if f is not None)
    over = sum(1 for f in firsts if f is None or f > 1.0)
    worst_start = max((f for f in since_start if f is not None), default=None)
    print(f"spread: namespace unload took {unload_done - unload_started:.2f} s; first publish after it, per producer: "
          f"median {statistics.median(timed) * 1000:.0f} ms, p99 {timed[int(0.99 * (len(timed) - 1))] * 1000:.0f} ms, "
          f"max {timed[-1] * 1000:.0f} ms, over 1 s or unanswered {over}/{len(firsts)}; errors {len(failures)} "
          f"{failures[:3]}; longest from the unload's start to a producer's first receipt of a send after that start "
          f"{worst_start if worst_start is None else round(worst_start, 2)} s (busy)", flush=True)
    for producer in producers:
        producer.close()
    return {"unload_s": round(unload_done - unload_started, 2), "producers": len(firsts),
            "first_publish_ms": {"median": round(statistics.median(timed) * 1000),
                                 "p99": round(timed[int(0.99 * (len(timed) - 1))] * 1000),
                                 "max": round(timed[-1] * 1000)},
            "over_1s": over, "errors": len(failures)}


# -- the command ------------------------------------------------------------------------------------------------


def positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
        return value
    return parse


def parts_list(text: str) -> list[str]:
    chosen = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [part for part in chosen if part not in PARTS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"parts are among {', '.join(PARTS)}; not {text!r}")
    return chosen


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", type=parts_list, default=["kill", "pause"], help=f"comma-separated among {PARTS}")
    p.add_argument("--trials", type=positive(int), default=20, help="trials of kill and of pause")
    p.add_argument("--brokers", type=positive(int), default=2, help="brokers for kill and pause (2 or more)")
    p.add_argument("--rate", type=positive(float), default=500, help="msgs/s of the producer under fault")
    p.add_argument("--batching", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--session-timeout-ms", type=positive(int), default=5000, help="metadataStoreSessionTimeoutMillis")
    p.add_argument("--client-url", choices=("all", "others"), default="all",
                   help="the producer's client is given every broker's URL, or only those of the brokers not faulted")
    p.add_argument("--probe", action=argparse.BooleanOptionalAction, default=True,
                   help="pause: another client publishes to the topic through the other brokers while the owner is "
                        "paused past its session, so that the successor takes the topic over during the pause")
    p.add_argument("--warmup", type=positive(float), default=1.5, help="seconds of load before the fault")
    p.add_argument("--after", type=positive(float), default=1.5, help="seconds of load after recovery")
    p.add_argument("--hang-after", type=positive(float), default=60, help="seconds before a wait counts as a hang")
    p.add_argument("--entries", type=positive(int), default=200_000,
                   help="entries per run of cpu and per topic of pair")
    p.add_argument("--rounds", type=positive(int), default=2, help="runs of each configuration in cpu and pair")
    p.add_argument("--topics", type=positive(int), default=10_000, help="topics of spread")
    p.add_argument("--bundles", type=positive(int), default=24, help="bundles of spread's namespace")
    p.add_argument("--producers", type=positive(int), default=200, help="producers of spread's unload")
    p.add_argument("--period", type=positive(float), default=0.2, help="seconds between a spread producer's sends")
    p.add_argument("--data-dir", type=Path, help="keep every log and ledger here (default: a temporary directory, "
                                                  "kept when a part finds a problem)")
    return p


def main() -> None:
    args = parser().parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the brokers on the way out
    if args.brokers < 2 and {"kill", "pause"} & set(args.parts):
        parser().error("--brokers: kill and pause need 2 or more (a successor)")
    root = args.data_dir or Path(tempfile.mkdtemp(prefix="failover-campaign-"))
    summaries = []
    problems = False
    for part in args.parts:
        scratch = root / part
        scratch.mkdir(parents=True, exist_ok=True)
        if part in ("kill", "pause"):
            summary = faults(args, part, scratch)
            problems |= summary["clean_trials"] != summary["trials"]
        else:
            summary = {"cpu": cpu_part, "pair": pair_part, "spread": spread_part}[part](args, scratch)
        summaries.append(summary)
    if args.data_dir is None and not problems:
        shutil.rmtree(root, ignore_errors=True)
    elif problems:
        print(f"problems found: logs and ledgers kept under {root}", flush=True)
    for summary in summaries:
        print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()

"""The promises of several brokers over shared storage, judged from outside the brokers:
from the store's ledger lists, the files and the receipts producers got.

* one writer acknowledges on a ledger, and only the writer the ledger list names;
* nothing is acknowledged on a ledger the store already shows closed (a paused broker
  acknowledges nothing after its successor took over);
* an acknowledged entry is durable, holds the message acknowledged, and no close ever cuts
  it off; at the end every one is readable through the final ledger lists;
* at the end, a lookup through any broker leads to one owner, the one the store names.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from magnetar.core.cluster.managed_ledger_info import LedgerWriter, ManagedLedgerInfo
from magnetar.core.cluster.metadata_paths import managed_ledger_path
from magnetar.core.names import TopicName
from magnetar.testing.sim.cluster_files import SimSharedFiles
from magnetar.testing.sim.cluster_store import SimMetadataStore


class ClusterViolation(AssertionError):
    """A promise of the cluster was broken."""


@dataclass(frozen=True)
class Receipt:
    topic: str
    ledger_id: int
    index: int
    message: str
    writer: str
    broker: str


def ledger_list(store: SimMetadataStore, topic: str) -> ManagedLedgerInfo:
    got = store.read(_path(topic))
    return _parsed(got.value) if got else ManagedLedgerInfo()


@lru_cache(maxsize=64)
def _path(topic: str) -> str:
    return managed_ledger_path(TopicName.parse(topic))


@lru_cache(maxsize=1024)
def _parsed(value: bytes) -> ManagedLedgerInfo:
    return ManagedLedgerInfo.from_json(value)


class ClusterChecker:
    def __init__(self, store: SimMetadataStore, files: SimSharedFiles) -> None:
        self.store = store
        self.files = files
        self.receipts: list[Receipt] = []
        self._writer_of: dict[tuple[str, int], str] = {}

    def on_ack(self, receipt: Receipt) -> None:
        key = (receipt.topic, receipt.ledger_id)
        first = self._writer_of.setdefault(key, receipt.writer)
        if first != receipt.writer:
            raise ClusterViolation(f"two writers acknowledged on ledger {key}: {first} and {receipt.writer}")
        ledger = {x.ledger_id: x for x in ledger_list(self.store, receipt.topic).ledgers}.get(receipt.ledger_id)
        if ledger is None or str(ledger.writer) != receipt.writer:
            raise ClusterViolation(f"{receipt.writer} acknowledged on ledger {key}, which the store gives to "
                                   f"{ledger.writer if ledger else 'nobody'}")
        if not ledger.open:
            raise ClusterViolation(f"{receipt.broker} acknowledged entry {receipt.index} of ledger {key} after "
                                   f"the ledger was closed at {ledger.entries} entries")
        self._check_durable(receipt)
        self.receipts.append(receipt)

    def _check_durable(self, receipt: Receipt) -> None:
        file = self.files.files.get((receipt.topic, receipt.ledger_id))
        if file is None or receipt.index >= file.durable or file.entries[receipt.index] != receipt.message:
            raise ClusterViolation(f"acknowledged entry {receipt.index} of ledger {receipt.ledger_id} "
                                   f"({receipt.message}) is not durable in its file")

    def on_ledger_list(self, topic: str, info: ManagedLedgerInfo) -> None:
        """After every write of a ledger list: no close cuts off an acknowledged entry."""
        closed = {x.ledger_id: x.entries for x in info.ledgers if not x.open}
        for receipt in self.receipts:
            entries = closed.get(receipt.ledger_id)
            if receipt.topic == topic and entries is not None and receipt.index >= entries:
                raise ClusterViolation(f"acknowledged entry {receipt.index} of ledger {receipt.ledger_id} "
                                       f"({receipt.message}) lost: the ledger was closed at {entries} entries")

    def on_file_created(self, topic: str, ledger_id: int, writer: LedgerWriter) -> None:
        listed = {x.ledger_id: x for x in ledger_list(self.store, topic).ledgers}.get(ledger_id)
        if listed is None or listed.writer != writer:
            raise ClusterViolation(f"{writer} created ledger file {ledger_id} of {topic}, which the store "
                                   f"gives to {listed.writer if listed else 'nobody'}")

    def check_final(self) -> None:
        """Every acknowledged entry is readable through the final ledger lists."""
        for receipt in self.receipts:
            info = ledger_list(self.store, receipt.topic)
            ledger = {x.ledger_id: x for x in info.ledgers}.get(receipt.ledger_id)
            if ledger is None or (ledger.entries is not None and receipt.index >= ledger.entries):
                raise ClusterViolation(f"acknowledged entry {receipt.index} of ledger {receipt.ledger_id} "
                                       f"({receipt.message}) is not readable at the end")
            self._check_durable(receipt)

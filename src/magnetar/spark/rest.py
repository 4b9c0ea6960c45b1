"""The few admin REST v2 calls the data source makes, on Pulsar's documented paths.

Used on the driver only: partitions of a topic, the last message id (latest offsets
without creating a subscription), internal stats (ledger sizes, to split large
ranges), the first message id at a time, the namespace listing behind
``topicsPattern``, the progress subscription (create, reset cursor) and the
deduplication settings the sink depends on. Any broker that serves Pulsar's admin
API answers them.
"""

from __future__ import annotations

import functools
import json
import os
import ssl
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from magnetar.spark.offsets import EARLIEST, MessagePosition
from magnetar.spark.options import ConnectionOptions
from magnetar.spark.schema_mapping import TopicSchema

TIMEOUT_S = 30.0
#: Pauses before the retries of a call the broker answers 503 (a topic being loaded, unloaded or
#: deleted: "retry shortly"); then the 503 is the answer.
UNAVAILABLE_RETRY_PAUSES_S = (0.1, 0.2, 0.5, 1.0, 2.0)


#: Pause between the tries of a call redirected to a topic's owner that does not answer (a
#: broker of a cluster that stopped: its topics move once its metadata-store session ends);
#: they go on for up to TIMEOUT_S.
OWNER_RETRY_PAUSE_S = 0.5


def _owner_unreachable(exc: httpx.HTTPError, asked: str) -> bool:
    """A connection failure on a redirect's hop, not on the broker the client was given."""
    if not isinstance(exc, (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError)):
        return False
    try:
        failed = exc.request.url
    except RuntimeError:  # no request attached
        return False
    given = httpx.URL(asked)
    return (failed.host, failed.port) != (given.host, given.port)


class MagnetarAdminError(RuntimeError):
    """An admin REST call failed; the message has the method, URL, status and the broker's reason."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class LedgerInfo:
    ledger_id: int
    entries: int


@dataclass(frozen=True)
class DeduplicationSetting:
    """The effective deduplication switch for a topic and the level that decided it."""

    enabled: bool
    decided_by: str


def topic_path(topic: str) -> str:
    """``persistent://t/ns/name`` -> ``persistent/t/ns/name`` with the local name URL-encoded."""
    domain, _, rest = topic.partition("://")
    tenant, namespace, local = rest.split("/", 2)
    return f"{domain}/{quote(tenant, safe='')}/{quote(namespace, safe='')}/{quote(local, safe='')}"


def partition_name(topic: str, index: int) -> str:
    return f"{topic}-partition-{index}"


def base_topic(name: str) -> str:
    """The partitioned topic a partition belongs to (the name itself otherwise)."""
    head, sep, tail = name.rpartition("-partition-")
    return head if sep and tail.isdigit() else name


@functools.cache
def tls_context(verify: bool | str) -> ssl.SSLContext:
    """The admin client's TLS settings (``verify``: on, off, or a CA file or directory), made once
    per process: loading the CA bundle costs some 30 ms of CPU, and Spark plans a query with
    several clients in one Python process."""
    if isinstance(verify, str):
        if os.path.isdir(verify):
            return ssl.create_default_context(capath=verify)
        return ssl.create_default_context(cafile=verify)
    return httpx.create_ssl_context(verify=verify)


class AdminClient:
    def __init__(self, connection: ConnectionOptions) -> None:
        self.base_url = connection.require_admin_url("the data source calls the admin REST API")
        self._http = httpx.Client(timeout=TIMEOUT_S, headers=connection.admin_headers(),
                                  verify=tls_context(connection.admin_verify()), follow_redirects=True)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------------------
    def _call(self, method: str, path: str, body: Any = None, ok_missing: bool = False) -> Any:
        url = f"{self.base_url}/admin/v2/{path}"
        moving_until = time.monotonic() + TIMEOUT_S
        pauses = iter((*UNAVAILABLE_RETRY_PAUSES_S, None))
        while True:
            try:
                resp = self._http.request(method, url, json=body)
            except httpx.HTTPError as exc:
                if _owner_unreachable(exc, url) and time.monotonic() < moving_until:
                    # The broker sent us to the topic's owner, which does not answer: in a
                    # cluster, ownership moves once the owner's session ends; ask again.
                    time.sleep(OWNER_RETRY_PAUSE_S)
                    continue
                raise MagnetarAdminError(f"{method} {url} failed: {exc}; is {self.base_url} the broker's "
                                         "admin (web service) URL?") from exc
            pause_s = next(pauses) if resp.status_code == 503 else None
            if pause_s is None:
                break
            time.sleep(pause_s)  # a topic being unloaded or deleted: the broker asks to retry shortly
        if ok_missing and resp.status_code in (404, 405):
            return None
        if resp.status_code >= 400:
            raise MagnetarAdminError(f"{method} {url} returned {resp.status_code}: {_reason(resp)}",
                                     resp.status_code)
        if not resp.content:
            return None
        try:
            return resp.json()
        except json.JSONDecodeError:
            return resp.text

    # -- topics -----------------------------------------------------------------------------------
    def partitions(self, topic: str) -> int:
        doc = self._call("GET", f"{topic_path(topic)}/partitions")
        return int(doc.get("partitions", 0)) if isinstance(doc, dict) else 0

    def topic_partitions(self, topic: str) -> list[str]:
        """The partition names of a partitioned topic, or the topic itself."""
        count = self.partitions(topic)
        return [partition_name(topic, i) for i in range(count)] if count > 0 else [topic]

    def list_topics(self, tenant: str, namespace: str) -> list[str]:
        doc = self._call("GET", f"persistent/{quote(tenant, safe='')}/{quote(namespace, safe='')}")
        return [str(t) for t in doc or []]

    def last_message_id(self, topic: str) -> MessagePosition:
        """The last message of a topic partition; EARLIEST when it has none."""
        try:
            doc = self._call("GET", f"{topic_path(topic)}/lastMessageId")
        except MagnetarAdminError as exc:
            if exc.status != 404:
                raise
            # A broker may fail to describe a last entry that retention already deleted;
            # the ledger's last confirmed entry still says where the topic ends.
            confirmed = self._last_confirmed_entry(topic)
            if confirmed is None:
                raise
            return confirmed
        if not isinstance(doc, dict):
            raise MagnetarAdminError(f"lastMessageId of {topic}: unexpected answer {doc!r}")
        entry_id = int(doc.get("entryId", -1))
        if entry_id < 0:
            return EARLIEST
        return MessagePosition.normalised(int(doc["ledgerId"]), entry_id, int(doc.get("batchIndex", -1)))

    def _last_confirmed_entry(self, topic: str) -> MessagePosition | None:
        doc = self._call("GET", f"{topic_path(topic)}/internalStats", ok_missing=True)
        text = doc.get("lastConfirmedEntry") if isinstance(doc, dict) else None
        if not isinstance(text, str) or ":" not in text:
            return None
        ledger, entry = (int(x) for x in text.split(":", 1))
        return EARLIEST if entry < 0 else MessagePosition.normalised(ledger, entry)

    def first_message_at(self, topic: str, timestamp_ms: int) -> MessagePosition | None:
        """The first entry published at or after the time; None when there is none."""
        doc = self._call("GET", f"{topic_path(topic)}/messageid/{timestamp_ms}", ok_missing=True)
        if not isinstance(doc, dict):
            return None
        return MessagePosition.normalised(int(doc["ledgerId"]), int(doc["entryId"]))

    def ledgers(self, topic: str) -> list[LedgerInfo] | None:
        """Ledger ids and entry counts from internal stats; None when the broker has no such endpoint."""
        doc = self._call("GET", f"{topic_path(topic)}/internalStats", ok_missing=True)
        if not isinstance(doc, dict) or not isinstance(doc.get("ledgers"), list):
            return None
        ledgers = [LedgerInfo(int(item["ledgerId"]), int(item.get("entries", 0))) for item in doc["ledgers"]]
        if ledgers:
            # Pulsar reports the open ledger's entries separately and 0 in the list.
            current = int(doc.get("currentLedgerEntries", 0))
            last = ledgers[-1]
            ledgers[-1] = LedgerInfo(last.ledger_id, max(last.entries, current))
        return ledgers

    def exists(self, topic: str) -> bool:
        """Whether the topic partition exists (its internal stats are found)."""
        try:
            self._call("GET", f"{topic_path(topic)}/internalStats")
        except MagnetarAdminError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def applied_policy(self, topic: str, policy: str) -> Any:
        """A topic policy as it applies (topic, else namespace, else broker); for a topic that no
        longer exists, its namespace's policy (None: the broker's default)."""
        try:
            return self._call("GET", f"{topic_path(topic)}/{policy}?applied=true")
        except MagnetarAdminError as exc:
            if exc.status != 404:
                raise
        tenant, namespace = topic_path(topic).split("/")[1:3]
        return self._call("GET", f"namespaces/{tenant}/{namespace}/{policy}", ok_missing=True)

    def broker_configuration(self) -> dict[str, Any]:
        """The broker's runtime configuration (empty when the broker does not serve it)."""
        doc = self._call("GET", "brokers/configuration/runtime", ok_missing=True)
        return doc if isinstance(doc, dict) else {}

    # -- subscriptions ------------------------------------------------------------------------------
    def reset_cursor(self, topic: str, subscription: str, position: MessagePosition) -> None:
        """Make ``position`` the next message the subscription delivers, creating it if needed.

        The last processed message stays in the backlog on purpose: retention then keeps
        its ledger, which lets the next micro-batch verify that nothing after it was lost.
        """
        body = _message_id_body(position)
        path = f"{topic_path(topic)}/subscription/{quote(subscription, safe='')}"
        try:
            self._call("POST", f"{path}/resetcursor", body)
        except MagnetarAdminError as exc:
            if exc.status != 404:
                raise
            self.create_subscription(topic, subscription, position)

    def create_subscription(self, topic: str, subscription: str, position: MessagePosition) -> bool:
        """A durable subscription whose first unconsumed message is ``position``; False when it
        exists already (it is left where it is)."""
        path = f"{topic_path(topic)}/subscription/{quote(subscription, safe='')}"
        try:
            self._call("PUT", path, _message_id_body(position))
        except MagnetarAdminError as exc:
            if exc.status != 409:
                raise
            return False
        return True

    # -- schemas ------------------------------------------------------------------------------------
    def topic_schema(self, topic: str, version: int | None = None) -> TopicSchema | None:
        """The topic's latest schema (or one version); None when it has none."""
        tenant, namespace, local = topic_path(base_topic(topic)).split("/")[1:]
        path = f"schemas/{tenant}/{namespace}/{local}/schema" + (f"/{version}" if version is not None else "")
        try:
            doc = self._call("GET", path)
        except MagnetarAdminError as exc:
            if exc.status == 404:
                return None
            raise
        return TopicSchema.from_rest(doc) if isinstance(doc, dict) else None

    # -- deduplication ------------------------------------------------------------------------------
    def deduplication(self, topic: str) -> DeduplicationSetting:
        """Topic policy over namespace policy over ``brokerDeduplicationEnabled``, as the broker applies them."""
        path = topic_path(base_topic(topic))
        applied = self._call("GET", f"{path}/deduplicationEnabled?applied=true", ok_missing=True)
        if isinstance(applied, bool):
            return DeduplicationSetting(applied, f"topic {base_topic(topic)}")
        tenant, namespace = path.split("/")[1:3]
        ns_value = self._call("GET", f"namespaces/{tenant}/{namespace}/deduplication", ok_missing=True)
        if isinstance(ns_value, bool):
            return DeduplicationSetting(ns_value, f"namespace {tenant}/{namespace} policy")
        config = self.broker_configuration()
        if "brokerDeduplicationEnabled" in config:
            value = str(config["brokerDeduplicationEnabled"]).strip().lower() == "true"
            return DeduplicationSetting(value, f"broker setting brokerDeduplicationEnabled={str(value).lower()} "
                                               f"(namespace {tenant}/{namespace} sets no policy)")
        raise MagnetarAdminError(f"cannot tell whether deduplication is enabled for {topic}: the broker at "
                                 f"{self.base_url} answers neither the namespace deduplication policy nor "
                                 "brokers/configuration/runtime")


def _message_id_body(position: MessagePosition) -> dict[str, Any]:
    if position.is_earliest:
        return {"ledgerId": -1, "entryId": -1, "partitionIndex": -1, "batchIndex": -1, "isExcluded": False}
    return {"ledgerId": position.ledger_id, "entryId": position.entry_id, "partitionIndex": -1,
            "batchIndex": position.batch_index, "isExcluded": False}


def _reason(resp: httpx.Response) -> str:
    try:
        doc = resp.json()
    except json.JSONDecodeError:
        return resp.text.strip()[:300] or resp.reason_phrase
    if isinstance(doc, dict):
        return str(doc.get("reason") or doc.get("detail") or doc)[:300]
    return str(doc)[:300]

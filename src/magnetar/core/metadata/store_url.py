"""Pulsar's ``metadataStoreUrl``: ``zk:host:port[,host:port...][/chroot]``, or the older bare
``host:port[,...][/chroot]`` (what ``zookeeperServers`` held). Other schemes Pulsar knows
(``etcd:``, ``rocksdb:``, ``memory:``) are refused here with a message that says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_HOST = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)")
_CHROOT_PART = re.compile(r"[^/\x00]+")
_OTHER_SCHEMES = ("etcd:", "rocksdb:", "memory:", "oxia:", "metadata-store:")


class MetadataStoreUrlError(ValueError):
    """A ``metadataStoreUrl`` that names no ZooKeeper ensemble; the message says what is wrong."""


@dataclass(frozen=True)
class ZooKeeperUrl:
    """Where a ZooKeeper-backed store lives: the ensemble and the chroot under it."""

    servers: tuple[tuple[str, int], ...]
    #: "" for the root, else "/a/b"
    chroot: str = ""

    @property
    def hosts(self) -> str:
        """The servers as kazoo (and ZooKeeper's own clients) take them: ``h:p,h:p``."""
        return ",".join(f"[{host}]:{port}" if ":" in host else f"{host}:{port}" for host, port in self.servers)

    def __str__(self) -> str:
        return f"zk:{self.hosts}{self.chroot}"


def parse_metadata_store_url(url: str, *, key: str = "metadataStoreUrl") -> ZooKeeperUrl:
    """Parse ``url``; :class:`MetadataStoreUrlError` names ``key`` and what is wrong."""
    if not isinstance(url, str) or not url.strip():
        raise MetadataStoreUrlError(f"{key} is empty: expected zk:host:port[,host:port...][/chroot]")
    text = url.strip()
    if text.startswith(_OTHER_SCHEMES):
        scheme = text.split(":", 1)[0]
        raise MetadataStoreUrlError(f"{key}={url!r}: the {scheme} metadata store is not supported; use zk:host:port")
    text = text.removeprefix("zk:").removeprefix("//")
    servers_text, slash, chroot = text.partition("/")
    servers = tuple(_server(key, url, item) for item in servers_text.split(","))
    if slash:
        parts = chroot.rstrip("/").split("/") if chroot.rstrip("/") else []
        if not parts or not all(_CHROOT_PART.fullmatch(p) and p not in (".", "..") for p in parts):
            raise MetadataStoreUrlError(f"{key}={url!r}: invalid chroot {'/' + chroot!r}: expected /name[/name...]")
        return ZooKeeperUrl(servers, "/" + "/".join(parts))
    return ZooKeeperUrl(servers)


def _server(key: str, url: str, item: str) -> tuple[str, int]:
    host, colon, port = item.strip().rpartition(":")
    if not colon or not _HOST.fullmatch(host) or not port.isdigit() or not 0 < int(port) < 65536:
        raise MetadataStoreUrlError(
            f"{key}={url!r}: invalid server {item!r}: expected host:port with a port from 1 to 65535"
        )
    return host.strip("[]"), int(port)

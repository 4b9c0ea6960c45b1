"""Pulsar's ``metadataStoreUrl`` and the metadata store keys of the broker's config."""

from __future__ import annotations

import pytest

from magnetar.core.broker.broker_config import BrokerConfig, ConfigError
from magnetar.core.metadata.store_url import MetadataStoreUrlError, ZooKeeperUrl, parse_metadata_store_url


@pytest.mark.parametrize(
    ("url", "servers", "chroot"),
    [
        ("zk:localhost:2181", (("localhost", 2181),), ""),
        ("zk:zk1:2181,zk2:2182,zk3:2183/pulsar", (("zk1", 2181), ("zk2", 2182), ("zk3", 2183)), "/pulsar"),
        ("zk:10.0.0.1:2181/a/b/", (("10.0.0.1", 2181),), "/a/b"),
        ("zk://zk1:2181", (("zk1", 2181),), ""),
        ("zk:[::1]:2181", (("::1", 2181),), ""),
        ("zk1:2181,zk2:2181", (("zk1", 2181), ("zk2", 2181)), ""),  # the older bare form
        (" 127.0.0.1:2181/ns ", (("127.0.0.1", 2181),), "/ns"),
    ],
)
def test_good_urls(url: str, servers: tuple[tuple[str, int], ...], chroot: str) -> None:
    parsed = parse_metadata_store_url(url)
    assert parsed == ZooKeeperUrl(servers, chroot)
    assert parse_metadata_store_url(str(parsed)) == parsed


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("", "is empty"),
        ("zk:", "invalid server ''"),
        ("zk:localhost", "invalid server 'localhost'"),
        ("zk:localhost:0", "port from 1 to 65535"),
        ("zk:localhost:65536", "port from 1 to 65535"),
        ("zk:localhost:21x81", "invalid server"),
        ("zk:a:1,,b:2", "invalid server ''"),
        ("zk:bad host:2181", "invalid server 'bad host:2181'"),
        ("zk:localhost:2181/", "invalid chroot '/'"),
        ("zk:localhost:2181/a//b", "invalid chroot"),
        ("zk:localhost:2181/a/../b", "invalid chroot"),
        ("etcd:http://localhost:2379", "etcd metadata store is not supported"),
        ("memory:local", "memory metadata store is not supported"),
        ("rocksdb:/tmp/x", "rocksdb metadata store is not supported"),
    ],
)
def test_bad_urls_are_refused_with_a_clear_error(url: str, match: str) -> None:
    with pytest.raises(MetadataStoreUrlError, match=match) as raised:
        parse_metadata_store_url(url)
    assert "metadataStoreUrl" in str(raised.value)


def test_the_config_keys_and_their_defaults() -> None:
    config = BrokerConfig()
    assert (config.metadataStoreUrl, config.metadataStoreSessionTimeoutMillis,
            config.metadataStoreOperationTimeoutSeconds) == ("", 30000, 30)
    assert config.metadata_store_url is None and config.configuration_metadata_store_url is None
    cluster = config.with_overrides({"metadataStoreUrl": "zk:zk1:2181/c1", "metadataStoreSessionTimeoutMillis": "5000"})
    assert cluster.metadata_store_url == ZooKeeperUrl((("zk1", 2181),), "/c1")
    assert cluster.configuration_metadata_store_url == cluster.metadata_store_url
    split = cluster.with_overrides({"configurationMetadataStoreUrl": "zk:global:2181"})
    assert split.configuration_metadata_store_url == ZooKeeperUrl((("global", 2181),))


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"metadataStoreUrl": "zk:localhost"}, "metadataStoreUrl='zk:localhost': invalid server"),
        ({"metadataStoreUrl": "zk:h:1", "configurationMetadataStoreUrl": "h"}, "configurationMetadataStoreUrl='h'"),
        ({"configurationMetadataStoreUrl": "zk:h:1"}, "needs metadataStoreUrl"),
        ({"metadataStoreSessionTimeoutMillis": "0"}, "metadataStoreSessionTimeoutMillis=0 must be greater than 0"),
        ({"metadataStoreOperationTimeoutSeconds": "-1"}, "metadataStoreOperationTimeoutSeconds=-1 must be"),
        ({"metadataStoreSessionTimeoutMillis": "soon"}, "metadataStoreSessionTimeoutMillis='soon': expected"),
    ],
)
def test_bad_config_values_are_refused(values: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        BrokerConfig().with_overrides(values)

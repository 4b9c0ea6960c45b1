"""Limits and back-pressure settings: Pulsar's names, checked values, clear errors."""

from __future__ import annotations

import pytest

from magnetar.core.broker.broker_config import BrokerConfig, ConfigError


@pytest.mark.parametrize(("key", "value"), [
    ("maxProducersPerTopic", "-1"),
    ("maxConsumersPerSubscription", "-5"),
    ("brokerMaxConnectionsPerIp", "-1"),
    ("maxPendingPublishRequestsPerConnection", "-1"),
    ("pulsarChannelWriteBufferHighWaterMark", "0"),
    ("pulsarChannelWriteBufferLowWaterMark", "-1"),
    ("pulsarChannelPauseReceivingRequestsIfUnwritable", "sometimes"),
    ("maxMessagePublishBufferSizeInMB", "lots"),
    ("maxConcurrentTopicLoadRequest", "0"),
    ("managedLedgerCacheSizeMB", "-1"),
    ("managedLedgerCacheSizeMB", "a lot"),
    ("journalRemoveFromPageCache", "sometimes"),
])
def test_bad_limit_values_name_their_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=key):
        BrokerConfig().with_overrides({key: value})


def test_low_water_above_high_water_is_refused() -> None:
    with pytest.raises(ConfigError, match="pulsarChannelWriteBufferLowWaterMark=70000 is above"):
        BrokerConfig().with_overrides({"pulsarChannelWriteBufferLowWaterMark": "70000"})


def test_publish_buffer_default_and_off() -> None:
    assert BrokerConfig().publish_buffer_bytes == 512 * 1024 * 1024
    assert BrokerConfig().with_overrides({"maxMessagePublishBufferSizeInMB": "0"}).publish_buffer_bytes == 0
    assert BrokerConfig().with_overrides({"maxMessagePublishBufferSizeInMB": "64"}).publish_buffer_bytes == 64 << 20


def test_entry_cache_size_unset_zero_and_set() -> None:
    assert BrokerConfig().managedLedgerCacheSizeMB is None
    assert BrokerConfig().with_overrides({"managedLedgerCacheSizeMB": ""}).managedLedgerCacheSizeMB is None
    assert BrokerConfig().with_overrides({"managedLedgerCacheSizeMB": "0"}).managedLedgerCacheSizeMB == 0
    assert BrokerConfig().with_overrides({"managedLedgerCacheSizeMB": "256"}).managedLedgerCacheSizeMB == 256

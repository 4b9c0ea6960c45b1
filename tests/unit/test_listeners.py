"""advertisedListeners parsing and the listener a lookup answers with."""

from __future__ import annotations

import pytest

from magnetar.core.broker.broker_config import ConfigError
from magnetar.core.broker.listeners import Listener, internal_listener, listener_for, parse_listeners
from magnetar.core.errors import ServiceNotReady


def test_plain_and_tls_addresses_of_one_listener_combine() -> None:
    listeners = parse_listeners("internal:pulsar://10.0.0.5:6650, external:pulsar://b.example.com:6650,"
                                "external:pulsar+ssl://b.example.com:6651")
    assert listeners == {
        "internal": Listener("internal", "pulsar://10.0.0.5:6650"),
        "external": Listener("external", "pulsar://b.example.com:6650", "pulsar+ssl://b.example.com:6651"),
    }
    assert internal_listener(listeners, "") == listeners["internal"]
    assert internal_listener(listeners, "external") == listeners["external"]
    assert listener_for(listeners, "external").broker_url_tls == "pulsar+ssl://b.example.com:6651"


@pytest.mark.parametrize("text", [
    "internal", "internal:", ":pulsar://h:1", "internal:http://h:1", "internal:pulsar://",
    "a:pulsar://h:1,a:pulsar://h:2",
])
def test_bad_listener_lists_are_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="advertisedListeners"):
        parse_listeners(text)


def test_internal_name_must_be_a_listener() -> None:
    with pytest.raises(ConfigError, match="internalListenerName='x'"):
        internal_listener(parse_listeners("a:pulsar://h:1"), "x")
    with pytest.raises(ConfigError, match="needs advertisedListeners"):
        internal_listener({}, "a")
    assert internal_listener({}, "") is None


def test_an_unknown_listener_is_pulsar_s_error() -> None:
    with pytest.raises(ServiceNotReady, match="the broker do not have nope listener"):
        listener_for(parse_listeners("a:pulsar://h:1"), "nope")

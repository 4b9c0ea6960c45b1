"""Security settings: parsed with Pulsar's names, refused with a message naming the fix."""

from __future__ import annotations

import pytest

from magnetar.core.broker.broker_config import BrokerConfig, ConfigError
from magnetar.security.authentication import AuthenticationService
from magnetar.security.identity import AuthenticationFailed

TOKEN = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
BASIC = "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic"


def test_defaults_leave_security_off() -> None:
    config = BrokerConfig()
    assert not config.authenticationEnabled and not config.authorizationEnabled
    assert AuthenticationService.from_config(config) is None
    assert config.brokerServicePortTls is None and config.tokenAuthClaim == "sub"


def test_lists_and_optional_ports_parse() -> None:
    config = BrokerConfig().with_overrides({
        "authenticationEnabled": "true", "authenticationProviders": f" {TOKEN} , {BASIC} ,",
        "tokenSecretKey": "c2VjcmV0", "basicAuthConf": "data:,u:$apr1$abcdefgh$h9FWgUz3n9YxylKLlR5SQ/",
        "superUserRoles": "admin, ops", "brokerServicePort": "", "brokerServicePortTls": "6651",
        "tlsCertificateFilePath": "/c", "tlsKeyFilePath": "/k", "tlsProtocols": "TLSv1.3"})
    assert config.authentication_methods == ["token", "basic"]
    assert config.super_user_roles == {"admin", "ops"}
    assert config.brokerServicePort is None and config.brokerServicePortTls == 6651
    assert config.tls_protocols == ["TLSv1.3"]


@pytest.mark.parametrize(("values", "message"), [
    ({"authenticationEnabled": "yes"}, "authenticationEnabled='yes': expected bool"),
    ({"authenticationEnabled": "true"}, "needs authenticationProviders"),
    ({"authenticationProviders": "com.example.Nope"}, "unknown provider 'com.example.Nope'"),
    ({"authenticationEnabled": "true", "authenticationProviders": TOKEN}, "needs tokenSecretKey or tokenPublicKey"),
    ({"tokenSecretKey": "a", "tokenPublicKey": "b"}, "only one of tokenSecretKey"),
    ({"tokenAudienceClaim": "aud"}, "needs tokenAudience"),
    ({"authenticationEnabled": "true", "authenticationProviders": BASIC}, "needs basicAuthConf"),
    ({"authorizationEnabled": "true"}, "needs authenticationEnabled=true"),
    ({"authenticationRefreshCheckSeconds": "0"}, "must be greater than 0"),
    ({"brokerServicePortTls": "abc"}, "expected int"),
    ({"brokerServicePortTls": "70000"}, "not a TCP port"),
    ({"brokerServicePortTls": "6651"}, "need tlsCertificateFilePath and tlsKeyFilePath"),
    ({"brokerServicePort": ""}, "both empty"),
    ({"webServicePort": ""}, "both empty"),
    ({"tlsProtocols": "SSLv3"}, "unknown protocol 'SSLv3'"),
    ({"tlsRequireTrustedClientCertOnConnect": "true"}, "needs tlsTrustCertsFilePath"),
])
def test_bad_values_are_refused_clearly(values: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig().with_overrides(values)


class Fixed:
    method = "token"

    def authenticate(self, data: bytes):  # type: ignore[no-untyped-def]
        from magnetar.security.identity import Identity
        if data != b"good":
            raise AuthenticationFailed("bad")
        return Identity("alice", "token")


def test_http_schemes_and_the_anonymous_role() -> None:
    strict = AuthenticationService([Fixed()])
    assert strict.authenticate_http("Bearer good").role == "alice"
    assert strict.authenticate_http("bearer   good ").role == "alice"
    for header in (None, "", "Bearer bad", "Basic Z29vZA==", "Token good", "Bearer"):
        with pytest.raises(AuthenticationFailed):
            strict.authenticate_http(header)
    with pytest.raises(AuthenticationFailed):
        strict.authenticate("none", b"")
    anonymous = AuthenticationService([Fixed()], anonymous_role="guest")
    assert anonymous.authenticate_http(None).role == "guest"
    assert anonymous.authenticate("none", b"").role == "guest"
    with pytest.raises(AuthenticationFailed):
        anonymous.authenticate_http("Bearer bad")  # wrong credentials are never anonymous


@pytest.mark.parametrize(("settings", "warned"), [
    ({}, True),
    ({"bindAddress": "127.0.0.1"}, False),
    ({"bindAddress": "::1"}, False),
    ({"bindAddress": "localhost"}, False),
    ({"bindAddress": "192.168.1.5"}, True),
])
def test_one_warning_when_listening_beyond_loopback_without_authentication(
        settings: dict[str, str], warned: bool) -> None:
    from magnetar.core.broker.broker_config import BrokerConfig
    from magnetar.server.standalone import exposure_warning
    message = exposure_warning(BrokerConfig(**settings))  # type: ignore[arg-type]
    assert (message is not None) == warned
    if warned:
        assert "without authentication" in str(message)

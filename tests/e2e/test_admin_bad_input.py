"""Bad admin requests get a 4xx with a reason, never a 5xx, and the broker carries on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from e2e_helpers import round_trip

from magnetar.testing.broker_process import BrokerProcess

LIMIT_BYTES = 4096
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def small_body_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data: Path = tmp_path_factory.mktemp("limits") / "data"
    proc = BrokerProcess(data, config={"httpMaxRequestSize": str(LIMIT_BYTES),
                                       "maxNumPartitionsPerPartitionedTopic": "8"}).start()
    yield proc
    proc.kill()


@pytest.fixture
def admin(small_body_broker: BrokerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=small_body_broker.web_url, timeout=10) as c:
        yield c


def check_reason(r: httpx.Response, status: int) -> str:
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json()
    assert isinstance(body, dict) and set(body) == {"reason"} and body["reason"], body
    return str(body["reason"])


BAD_REQUESTS = [
    ("PUT", "/admin/v2/tenants/t1", b'{"adminRoles": [', 400),
    ("PUT", "/admin/v2/tenants/t1", b'"a string"', 400),
    ("PUT", "/admin/v2/tenants/t1", b'{"allowedClusters": [1, 2]}', 400),
    ("PUT", "/admin/v2/tenants/t1", b"", 400),
    ("PUT", "/admin/v2/tenants/t1", b"\xff\xfe\x00", 400),
    ("PUT", "/admin/v2/tenants/t1", b'{"allowedClusters": NaN}', 400),
    ("PUT", "/admin/v2/clusters/c1", b"[]", 400),
    ("PUT", "/admin/v2/namespaces/public/n1", b'{"message_ttl_in_seconds": 1e400}', 400),
    ("PUT", "/admin/v2/namespaces/public/n1", b'{"retention_policies": {"retentionSizeInMB": "big"}}', 400),
    ("PUT", "/admin/v2/namespaces/public/n1", b'{"properties": {"a": 1}}', 400),
    ("PUT", "/admin/v2/namespaces/public/n2", b'{"x": NaN}', 400),
    ("POST", "/admin/v2/namespaces/public/default/messageTTL", b"99999999999999999999", 400),
    ("POST", "/admin/v2/namespaces/public/default/messageTTL", b"true", 400),
    ("POST", "/admin/v2/namespaces/public/default/deduplication", b"1", 400),
    ("POST", "/admin/v2/namespaces/public/default/subscriptionTypesEnabled", b'"Shared"', 400),
    ("POST", "/admin/v2/namespaces/public/default/autoTopicCreation", b'{"allowAutoTopicCreation": "yes"}', 400),
    ("PUT", "/admin/v2/persistent/public/default/t/partitions", b"{}", 400),
    ("PUT", "/admin/v2/persistent/public/default/t/partitions", b"-3", 406),
    ("PUT", "/admin/v2/persistent/public/default/t/partitions", b"9", 406),
    ("PUT", "/admin/v2/persistent/public/default/t/partitions", b"2147483648", 400),
    ("PUT", "/admin/v2/persistent/public/default/t", b'{"k": {"nested": 1}}', 400),
    ("POST", "/admin/v2/persistent/public/default/t/subscription/s/resetcursor", b"null", 400),
    ("PUT", "/admin/v2/persistent/public/default/t/subscription/s", b'{"ledgerId": 1e30, "entryId": 0}', 400),
    ("PUT", "/admin/v2/persistent/public/default/t/subscription/s",
     b'{"ledgerId": 99999999999999999999, "entryId": 0}', 400),
]


@pytest.mark.parametrize(("method", "path", "body", "status"), BAD_REQUESTS)
def test_malformed_bodies(admin: httpx.Client, method: str, path: str, body: bytes, status: int) -> None:
    check_reason(admin.request(method, path, content=body, headers=JSON), status)


ILLEGAL_NAMES = [
    ("PUT", "/admin/v2/tenants/bad%20tenant", {"adminRoles": [], "allowedClusters": []}, 412),
    ("PUT", "/admin/v2/tenants/%E2%98%83", {"adminRoles": [], "allowedClusters": []}, 412),
    ("PUT", "/admin/v2/clusters/a%3Cb", {}, 412),
    ("GET", "/admin/v2/namespaces/public/bad%2Cns", None, 412),
    ("PUT", "/admin/v2/namespaces/public/%24", None, 412),
    ("GET", "/admin/v2/persistent/bad*tenant/default/t/stats", None, 412),
    ("GET", "/admin/v2/persistent/public/default/%20leading/stats", None, 412),
    ("PUT", "/admin/v2/persistent/public/default/nul%00byte", None, 412),
    ("GET", "/lookup/v2/topic/bogus/public/default/t", None, 412),
]


@pytest.mark.parametrize(("method", "path", "body", "status"), ILLEGAL_NAMES)
def test_illegal_names(admin: httpx.Client, method: str, path: str, body: object, status: int) -> None:
    kwargs = {} if body is None else {"json": body}
    reason = check_reason(admin.request(method, path, **kwargs), status)
    assert "not valid" in reason


UNKNOWN = [
    ("GET", "/admin/v2/tenants/no-such-tenant", 404, "Tenant does not exist"),
    ("GET", "/admin/v2/namespaces/no-such-tenant", 404, "Tenant does not exist"),
    ("GET", "/admin/v2/namespaces/public/no-such-ns", 404, "Namespace does not exist"),
    ("GET", "/admin/v2/persistent/no-such-tenant/ns/t/stats", 404, "Tenant does not exist"),
    ("GET", "/admin/v2/persistent/public/default/no-such-topic/stats", 404, "Topic not found"),
    ("GET", "/admin/v2/persistent/public/default/no-such-topic/internalStats", 404, "Topic not found"),
    ("GET", "/admin/v2/persistent/public/default/no-such-topic/subscriptions", 404, "Topic not found"),
    ("DELETE", "/admin/v2/persistent/public/default/no-such-topic/subscription/s", 404, "Topic not found"),
    ("GET", "/admin/v2/clusters/no-such-cluster", 404, "Cluster does not exist"),
    ("GET", "/admin/v2/no/such/path", 404, "Not Found"),
    ("PATCH", "/admin/v2/tenants", 405, "Method Not Allowed"),
]


@pytest.mark.parametrize(("method", "path", "status", "expected"), UNKNOWN)
def test_unknown_resources(admin: httpx.Client, method: str, path: str, status: int, expected: str) -> None:
    assert check_reason(admin.request(method, path), status) == expected


def test_oversize_bodies_are_refused_at_the_limit(admin: httpx.Client) -> None:
    roles = ["r"] * 10
    body = b'{"adminRoles": ' + str(roles).replace("'", '"').encode() + b', "allowedClusters": []'
    padding = LIMIT_BYTES - len(body) - 1
    exact = body + b" " * padding + b"}"
    assert len(exact) == LIMIT_BYTES
    assert admin.put("/admin/v2/tenants/at-limit", content=exact, headers=JSON).status_code == 204
    over = body + b" " * (padding + 1) + b"}"
    reason = check_reason(admin.put("/admin/v2/tenants/over-limit", content=over, headers=JSON), 413)
    assert "httpMaxRequestSize" in reason
    assert admin.get("/admin/v2/tenants/over-limit").status_code == 404


def test_oversize_chunked_body_is_refused(admin: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(100):
            yield b" " * 1024

    r = admin.put("/admin/v2/tenants/chunked", content=chunks(), headers=JSON)
    check_reason(r, 413)


def test_broker_unharmed(admin: httpx.Client, small_body_broker: BrokerProcess) -> None:
    for method, path, body, _ in BAD_REQUESTS + ILLEGAL_NAMES:  # type: ignore[operator]
        content = body if isinstance(body, bytes) else None
        assert admin.request(method, path, content=content, headers=JSON).status_code < 500
    assert admin.get("/admin/v2/brokers/health").text == "ok"
    assert small_body_broker.proc is not None and small_body_broker.proc.poll() is None
    round_trip(small_body_broker.service_url)
    assert "Traceback" not in small_body_broker.log_tail(200)

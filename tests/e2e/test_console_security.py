"""The web console with authentication and authorization on, in headless Chromium.

The console asks for a token, keeps it in the tab's sessionStorage only (no cookie, no
localStorage), and shows and allows what the role may: the same REST checks decide, so a
role without permissions sees neither data nor buttons. The browser logs each refused
request ("Failed to load resource: 401/403"): those are the answers the page is built from
and are the only console errors allowed here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import httpx
import pulsar
import pytest
from console_helpers import ConsolePage, chromium_context
from e2e_helpers import quiet_logger, wait_until
from security_helpers import BASIC_PROVIDER, SECRET_DATA_URL, TOKEN_PROVIDER, token

from magnetar.testing.broker_process import BrokerProcess

TOPIC = "persistent://public/default/guarded"
REST = "/admin/v2/persistent/public/default/guarded"
PASSWORD = "s3cret-console"
REFUSED = re.compile(r"^Failed to load resource: the server responded with a status of 40[13]")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root: Path = tmp_path_factory.mktemp("console-auth")
    users = root / "users"
    users.write_text(f"admin:{bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()}\n")
    proc = BrokerProcess(root / "data", {"authenticationEnabled": "true",
                                         "authenticationProviders": f"{TOKEN_PROVIDER},{BASIC_PROVIDER}",
                                         "basicAuthConf": str(users), "tokenSecretKey": SECRET_DATA_URL,
                                         "authorizationEnabled": "true", "superUserRoles": "admin"}).start()
    yield proc
    proc.kill()


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.web_url, timeout=10,
                      headers={"Authorization": f"Bearer {token('admin')}"}) as c:
        yield c


@pytest.fixture(scope="module")
def traffic(broker: BrokerProcess, admin: httpx.Client) -> Iterator[None]:
    assert admin.post("/admin/v2/namespaces/public/default/permissions/reader", json=["consume"]).status_code == 204
    client = pulsar.Client(broker.service_url, authentication=pulsar.AuthenticationToken(token("admin")),
                           operation_timeout_seconds=10, logger=quiet_logger())
    consumer = client.subscribe(TOPIC, "sub")
    producer = client.create_producer(TOPIC, batching_enabled=False)
    for i in range(6):
        producer.send(f"m{i}".encode())
    yield
    consumer.close()
    producer.close()
    client.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium_context() as context:
        yield context


@pytest.fixture
def console(browser: Any, broker: BrokerProcess, traffic: None) -> Iterator[ConsolePage]:
    page = ConsolePage(browser, broker.web_url)
    yield page
    page.close()


def sign_in(console: ConsolePage, role: str, route: str = "/overview") -> Any:
    page = console.open(route)
    page.wait_for_selector("#login")
    page.fill("#auth-token", token(role))
    page.click("#login-submit")
    page.wait_for_selector("#login", state="detached")
    return page


def unexpected(errors: list[str]) -> list[str]:
    return [e for e in errors if not REFUSED.match(e)]


def backlog(admin: httpx.Client) -> int:
    return int(admin.get(REST + "/stats").json()["subscriptions"]["sub"]["msgBacklog"])


def test_the_console_asks_for_a_token_and_keeps_it_for_the_tab_only(console: ConsolePage,
                                                                    broker: BrokerProcess) -> None:
    page = console.open("/overview")
    page.wait_for_selector("#login")
    assert page.locator("#totals").count() == 0
    page.fill("#auth-token", "not-a-token")
    page.click("#login-submit")
    page.wait_for_selector("#login")
    page = sign_in(console, "admin")
    page.wait_for_selector("#totals [data-field=numTopics]")
    assert console.text("#totals [data-field=numProducers] .value") == "1"
    assert page.evaluate("Object.keys(sessionStorage)") == ["magnetar.console.auth"]
    assert page.evaluate("localStorage.length") == 0 and page.evaluate("document.cookie") == ""
    page.click("#logout")
    page.wait_for_selector("#login")
    assert page.evaluate("sessionStorage.length") == 0
    assert unexpected(console.errors) == []
    # state changes need the header: a request a foreign page could make without it is refused
    refused = httpx.put(f"{broker.web_url}{REST}-csrf", timeout=10)
    assert refused.status_code == 401


def test_a_role_without_permission_sees_no_data_and_no_buttons(console: ConsolePage, admin: httpx.Client) -> None:
    page = sign_in(console, "nobody")
    page.wait_for_selector("#totals .banner")
    assert page.locator("#totals [data-field]").count() == 0
    page.wait_for_selector("#tenants .banner")
    page = console.open("/topics")
    page.wait_for_selector("#topic-count")
    assert console.text("#topic-count") == "0–0 of 0"
    assert page.locator("#create-topic button").count() == 0
    page = console.open("/topic/persistent/public/default/guarded")
    page.wait_for_selector("#topic-cards .banner")
    assert "guarded" not in console.text("#main").replace("persistent://public/default/guarded", "")
    assert page.locator("#producer-table").count() == 0 and page.locator("#subscription-table").count() == 0
    page = console.open("/subscription/persistent/public/default/guarded/sub")
    page.wait_for_selector("#sub-cards .banner")
    page = console.open("/messages/persistent/public/default/guarded?mode=peek&sub=sub&count=5")
    page.wait_for_selector("#main .banner")
    assert page.locator("#message-table").count() == 0
    assert page.locator("button.danger").count() == 0
    assert unexpected(console.errors) == []
    assert backlog(admin) == 6


def test_a_consuming_role_may_act_on_subscriptions_but_not_administer_the_topic(
        console: ConsolePage, admin: httpx.Client) -> None:
    page = sign_in(console, "reader", "/topics")
    page.wait_for_selector(f"#topic-table tr[data-row='{TOPIC}']")
    assert page.locator("#create-topic button").count() == 0
    page = console.open("/topic/persistent/public/default/guarded")
    page.wait_for_selector("#subscription-table tr[data-subscription=sub]")
    assert console.text("#topic-cards [data-field=msgInCounter] .value") == "6"
    page.wait_for_selector("#policies .banner")
    assert page.locator("#unload-topic, #delete-topic, #terminate-topic, #create-subscription").count() == 0
    page = console.open("/subscription/persistent/public/default/guarded/sub")
    page.wait_for_selector("#skip-messages")
    before = backlog(admin)
    console.act("#skip-messages")
    wait_until(lambda: backlog(admin) == before - 1, what="one message skipped")
    assert unexpected(console.errors) == []


def test_basic_credentials_sign_in_where_that_provider_is_on(console: ConsolePage) -> None:
    page = console.open("/topics")
    page.wait_for_selector("#login")
    page.select_option("#auth-kind", "basic")
    page.fill("#auth-user", "admin")
    page.fill("#auth-password", "wrong")
    page.click("#login-submit")
    page.wait_for_selector("#login")
    page.select_option("#auth-kind", "basic")
    page.fill("#auth-user", "admin")
    page.fill("#auth-password", PASSWORD)
    page.click("#login-submit")
    page.wait_for_selector(f"#topic-table tr[data-row='{TOPIC}']")
    # the actions render once the console has learnt what the signed-in role may do
    page.wait_for_selector("#create-topic-button")
    assert page.locator("#create-topic-button").count() == 1
    assert unexpected(console.errors) == []


def test_the_live_streams_are_refused_as_the_routes_they_carry(broker: BrokerProcess, traffic: None) -> None:
    def status(role: str | None, path: str) -> int:
        headers = {} if role is None else {"Authorization": f"Bearer {token(role)}"}
        with httpx.Client(base_url=broker.web_url, timeout=10, headers=headers) as http, \
                http.stream("GET", path) as resp:
            return resp.status_code
    for role in (None, "nobody", "reader", "admin"):
        assert status(role, "/admin/v2/console-stream/overview") == \
            status(role, "/admin/v2/broker-stats/load-report"), role
        assert status(role, REST + "/console-stream") == status(role, REST + "/stats"), role
        assert status(role, "/admin/v2/console-stream/topics-page") == status(role, "/admin/v2/topics-page"), role
    assert status("nobody", "/admin/v2/console-stream/overview") == 401
    assert status("nobody", REST + "/console-stream") == 401
    assert status("reader", REST + "/console-stream") == 200
    with httpx.Client(base_url=broker.web_url, timeout=10,
                      headers={"Authorization": f"Bearer {token('nobody')}"}) as http, \
            http.stream("GET", "/admin/v2/console-stream/topics-page") as resp:
        first = next(line for line in resp.iter_lines() if line.startswith("data: "))
    assert json.loads(first[6:])["total"] == 0

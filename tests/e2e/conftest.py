from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pulsar
import pytest
from e2e_helpers import quiet_logger

from magnetar.testing.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("broker") / "data"
    proc = BrokerProcess(data).start()
    yield proc
    proc.kill()


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    yield c
    c.close()


@pytest.fixture
def topic() -> str:
    return f"persistent://public/default/t-{uuid.uuid4().hex[:10]}"


def tmp_data(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def admin(broker: BrokerProcess) -> Iterator[httpx.Client]:
    """An HTTP client on the broker's admin API."""
    with httpx.Client(base_url=broker.web_url, timeout=10) as c:
        yield c

"""Property-based fuzzing of every admin operation from the broker's own /openapi.json.

Schemathesis generates valid and invalid requests for each operation; none may get a
5xx, and every response must match the document (status code, content type, schema).
Random names mostly miss, so a second pass pins the path to a tenant, namespace, topic
and subscription that exist and hold messages. Example counts are bounded so the run
stays well under a minute.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pulsar
import pytest

schemathesis = pytest.importorskip("schemathesis")

from e2e_helpers import quiet_logger, round_trip  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import (  # noqa: E402
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from magnetar.testing.broker_process import BrokerProcess  # noqa: E402

EXAMPLES_PER_OPERATION = 3
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
PINNED = {"tenant": "fuzz", "namespace": "ns", "topic": "data", "subName": "sub", "cluster": "standalone"}
#: operations whose purpose is to stop the broker under test (tested on their own)
STOPS_THE_BROKER = {("POST", "/admin/v2/brokers/shutdown")}
#: answers that last 30 s, an event whenever something changed (test_console_streams.py checks
#: them against the answers of the routes they carry, bad queries included)
STREAMS = {("GET", "/admin/v2/console-stream/overview"), ("GET", "/admin/v2/console-stream/topics-page"),
           ("GET", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/console-stream"),
           ("GET", "/admin/v2/non-persistent/{tenant}/{namespace}/{topic}/console-stream")}


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data: Path = tmp_path_factory.mktemp("fuzz") / "data"
    proc = BrokerProcess(data, config={"maxNumPartitionsPerPartitionedTopic": "4"}).start()
    yield proc
    proc.kill()


def seed(broker: BrokerProcess) -> None:
    """A tenant, namespace, topic with messages and a subscription for the pinned pass."""
    with httpx.Client(base_url=broker.web_url) as admin:
        admin.put("/admin/v2/tenants/fuzz", json={"adminRoles": [], "allowedClusters": ["standalone"]})
        admin.put("/admin/v2/namespaces/fuzz/ns")
        admin.put("/admin/v2/persistent/fuzz/ns/data/subscription/sub",
                  json={"ledgerId": -1, "entryId": -1})
    client = pulsar.Client(broker.service_url, logger=quiet_logger())
    try:
        producer = client.create_producer("persistent://fuzz/ns/data", batching_enabled=False)
        for i in range(5):
            producer.send(f"m{i}".encode(), properties={"i": str(i)}, partition_key=str(i))
    finally:
        client.close()


def negatable(document: dict[str, Any], path: str, method: str) -> bool:
    """Whether any input of the operation can be invalid (a body, or a parameter with a type or bounds)."""
    raw = document["paths"][path][method.lower()]
    if "requestBody" in raw:
        return True
    return any(param["schema"].get("type") != "string" or set(param["schema"]) - {"type", "title"}
               for param in raw.get("parameters", []))


def fuzz(operation: Any, mode: GenerationMode, failures: list[str], pinned: dict[str, str] | None = None) -> None:
    """Run bounded examples of one operation; record failures instead of stopping at the first."""
    strategy = operation.as_strategy(generation_mode=mode, path_parameters=pinned)

    @given(case=strategy)
    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=True, database=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    def run(case: schemathesis.Case) -> None:
        response = case.call(timeout=10)
        case.validate_response(response, checks=CHECKS)

    try:
        run()
    except Unsatisfiable:
        pass
    except Exception as exc:  # a check failed: keep its report, fuzz the other operations too
        failures.append(f"{operation.label} ({mode.value}, pinned={bool(pinned)}): {exc}")


def test_no_server_errors_and_responses_match_the_document(fuzz_broker: BrokerProcess) -> None:
    seed(fuzz_broker)
    url = f"{fuzz_broker.web_url}/openapi.json"
    document = httpx.get(url).json()
    schema = schemathesis.openapi.from_url(url)
    operations = [op for op in (result.ok() for result in schema.get_all_operations())
                  if (op.method.upper(), op.path) not in STOPS_THE_BROKER | STREAMS]
    assert len(operations) > 100
    failures: list[str] = []
    for operation in operations:
        fuzz(operation, GenerationMode.POSITIVE, failures)
        if negatable(document, operation.path, operation.method):
            fuzz(operation, GenerationMode.NEGATIVE, failures)
        names = {p["name"] for p in document["paths"][operation.path][operation.method.lower()].get(
            "parameters", []) if p["in"] == "path"}
        pinned = {k: v for k, v in PINNED.items() if k in names}
        if pinned and operation.method.upper() != "DELETE":
            fuzz(operation, GenerationMode.POSITIVE, failures, pinned)
    assert not failures, "\n\n".join(failures)


def test_broker_survives_the_fuzzing(fuzz_broker: BrokerProcess) -> None:
    assert fuzz_broker.proc is not None and fuzz_broker.proc.poll() is None
    round_trip(fuzz_broker.service_url)
    assert "Traceback" not in fuzz_broker.log_tail(500)

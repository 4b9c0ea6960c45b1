"""Property-based fuzzing of every admin operation from the broker's own /openapi.json.

Schemathesis generates valid and invalid requests for each operation; none may get a
5xx, and every response must match the document (status code, content type, schema).
The example count is bounded so the whole run stays well under a minute.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis.checks import (  # noqa: E402
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from schemathesis import GenerationMode  # noqa: E402

from e2e_helpers import round_trip  # noqa: E402
from magnetar.testing.broker_process import BrokerProcess  # noqa: E402

EXAMPLES_PER_OPERATION = 4
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data: Path = tmp_path_factory.mktemp("fuzz") / "data"
    proc = BrokerProcess(data, config={"maxNumPartitionsPerPartitionedTopic": "4"}).start()
    yield proc
    proc.kill()


def fuzz_operation(operation: object, mode: object, failures: list[str]) -> None:
    """Run bounded examples of one operation; record failures instead of stopping at the first."""

    @given(case=operation.as_strategy(generation_mode=mode))  # type: ignore[attr-defined]
    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=True, database=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    def run(case: schemathesis.Case) -> None:
        response = case.call(timeout=10)
        case.validate_response(response, checks=CHECKS)

    try:
        run()
    except Unsatisfiable:  # no invalid input exists (every parameter is a free string)
        pass
    except Exception as exc:  # a check failed: keep its report, fuzz the other operations too
        failures.append(f"{operation.label} ({mode.value}): {exc}")  # type: ignore[attr-defined]


def test_no_server_errors_and_responses_match_the_document(fuzz_broker: BrokerProcess) -> None:
    schema = schemathesis.openapi.from_url(f"{fuzz_broker.web_url}/openapi.json")
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 100
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            fuzz_operation(operation, mode, failures)
    assert not failures, "\n\n".join(failures)


def test_broker_survives_the_fuzzing(fuzz_broker: BrokerProcess) -> None:
    assert fuzz_broker.proc is not None and fuzz_broker.proc.poll() is None
    round_trip(fuzz_broker.service_url)
    assert "Traceback" not in fuzz_broker.log_tail(500)

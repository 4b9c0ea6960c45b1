"""``magnetar admin brokers leader|load|owned-bundles`` and ``namespaces bundles|split-bundle``,
run as a user runs them, against a standalone broker; and their bad input."""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
from test_cli import magnetar, ok

from magnetar.testing.broker_process import BrokerProcess


def test_load_balancing_verbs_and_their_bad_input(broker: BrokerProcess, admin: httpx.Client) -> None:
    tenant = f"cli-{uuid.uuid4().hex[:8]}"
    namespace = f"{tenant}/ns"
    assert admin.put(f"/admin/v2/tenants/{tenant}", json={"allowedClusters": ["standalone"]}).status_code == 204
    assert admin.put(f"/admin/v2/namespaces/{namespace}").status_code == 204
    broker_id = admin.get("/admin/v2/brokers/leaderBroker").json()["brokerId"]
    split = ("namespaces", "split-bundle", namespace, "-b", "0x00000000_0x40000000", "--unload")
    calls = [("--json", "brokers", "leader"), ("--json", "brokers", "load"),
             ("brokers", "owned-bundles", "standalone", broker_id), split,
             ("namespaces", "split-bundle", namespace, "-b", "nope"),
             ("namespaces", "split-bundle", namespace, "-b", "0x00000000_0x20000000", "-san", "sideways"),
             ("namespaces", "split-bundle", "no-slash", "-b", "0x00000000_0x20000000"),
             ("namespaces", "split-bundle", namespace)]
    with ThreadPoolExecutor(len(calls)) as pool:
        leader, load, owned, done, *bad = pool.map(lambda args: magnetar(broker, "admin", *args), calls)
    assert json.loads(ok(leader))["brokerId"] == broker_id
    assert "msgRateIn" in json.loads(ok(load))
    assert "public/default/0x00000000_0x40000000" in ok(owned)
    assert "Split bundle 0x00000000_0x40000000" in ok(done)
    expected = [(1, "expected 0x<lower>_0x<upper>"), (1, "invalid --split-algorithm-name"),
                (1, "invalid namespace"), (2, "--bundle")]
    for (code, says), result in zip(expected, bad, strict=True):
        assert result.returncode == code and says in result.stderr, result.stderr
    # the broker's refusal of a range that is no bundle (split already), and the bundles after
    again = magnetar(broker, "admin", *split)
    assert again.returncode == 1 and "is not a bundle of" in again.stderr
    bundles = json.loads(ok(magnetar(broker, "admin", "--json", "namespaces", "bundles", namespace)))
    assert bundles["numBundles"] == 5 and "0x20000000" in bundles["boundaries"]

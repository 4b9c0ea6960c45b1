"""``magnetar admin brokers leader|load|owned-bundles`` and ``namespaces bundles|split-bundle``,
run as a user runs them, against a standalone broker; and their bad input."""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor

from test_cli import magnetar, ok

from magnetar.testing.broker_process import BrokerProcess


def test_leader_load_and_owned_bundles(broker: BrokerProcess) -> None:
    with ThreadPoolExecutor(2) as pool:
        leader_out, load_out = pool.map(lambda verb: ok(magnetar(broker, "admin", "--json", "brokers", verb)),
                                        ("leader", "load"))
    leader = json.loads(leader_out)
    assert leader["brokerId"].endswith(f":{broker.web_port}")
    assert "msgRateIn" in json.loads(load_out)
    owned = ok(magnetar(broker, "admin", "brokers", "owned-bundles", "standalone", leader["brokerId"]))
    assert "public/default/0x00000000_0x40000000" in owned


def test_split_bundle_and_its_bad_input(broker: BrokerProcess) -> None:
    namespace = f"cli-{uuid.uuid4().hex[:8]}/ns"
    ok(magnetar(broker, "admin", "tenants", "create", namespace.split("/")[0]))
    ok(magnetar(broker, "admin", "namespaces", "create", namespace))
    done = ok(magnetar(broker, "admin", "namespaces", "split-bundle", namespace, "-b", "0x00000000_0x40000000",
                       "--unload"))
    assert "Split bundle 0x00000000_0x40000000" in done
    bundles = json.loads(ok(magnetar(broker, "admin", "--json", "namespaces", "bundles", namespace)))
    assert bundles["numBundles"] == 5 and "0x20000000" in bundles["boundaries"]
    cases = [
        ((namespace, "-b", "0x00000000_0x40000000"), 1, "is not a bundle of"),  # split already
        ((namespace, "-b", "nope"), 1, "expected 0x<lower>_0x<upper>"),
        ((namespace, "-b", "0x00000000_0x20000000", "-san", "sideways"), 1, "invalid --split-algorithm-name"),
        (("no-slash", "-b", "0x00000000_0x20000000"), 1, "invalid namespace"),
        ((namespace,), 2, "--bundle"),
    ]
    with ThreadPoolExecutor(len(cases)) as pool:
        results = list(pool.map(lambda case: magnetar(broker, "admin", "namespaces", "split-bundle", *case[0]),
                                cases))
    for (args, code, says), result in zip(cases, results, strict=True):
        assert result.returncode == code and says in result.stderr, (args, result.stderr)
    assert json.loads(ok(magnetar(broker, "admin", "--json", "namespaces", "bundles", namespace)))["numBundles"] == 5

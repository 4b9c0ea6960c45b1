"""The documented effectively-once consumer example survives crashes without loss or double counting."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pulsar
import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "effectively_once_consumer.py"


def load_example():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("effectively_once_consumer", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class Crash(Exception):
    pass


def test_crash_before_commit_is_replayed_once(client: pulsar.Client, topic: str, tmp_path: Path) -> None:
    example = load_example()
    producer = client.create_producer(topic)
    for i in range(30):
        producer.send(f"w{i % 3} all".encode())
    db = str(tmp_path / "state.db")

    def crash_at_12(done: int) -> None:
        if done == 12:
            raise Crash

    with pytest.raises(Crash):
        example.EffectivelyOnceCounter(client, topic, db).run(before_commit=crash_at_12)
    assert example.EffectivelyOnceCounter(client, topic, db).counts()["all"] == 12
    assert example.EffectivelyOnceCounter(client, topic, db).run(stop_after=5) == 5
    remaining = example.EffectivelyOnceCounter(client, topic, db).run()
    assert remaining == 13
    counts = example.EffectivelyOnceCounter(client, topic, db).counts()
    assert counts == {"all": 30, "w0": 10, "w1": 10, "w2": 10}

"""A full data disk, on small filesystems this test mounts (tmpfs; skipped where mounting is
not allowed): appends are refused with a clear PersistenceError, reads go on, nothing
receipted is lost, and appends come back by themselves once space is freed."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from e2e_helpers import new_topic, wait_until

from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.raw_client import RawConnection, T, flow
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import parse_entry

MB = 1024 * 1024


def mounted(path: Path, size_mb: int) -> Path:
    path.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem here: {done.stderr.strip() or done.returncode}")
    return path


@pytest.fixture(scope="module")
def small_disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = mounted(tmp_path_factory.mktemp("disk-full") / "fs", 48)
    yield path
    subprocess.run(["umount", "-l", str(path)], check=False)


def start_broker(root: Path, logs: Path, config: dict[str, str]) -> BrokerProcess:
    proc = BrokerProcess(root / "data", config={"diskCheckInterval": "100", **config})
    proc.log_path = logs / f"{root.name}-broker.log"
    return proc.start()


def fill(disk: Path, leave_bytes: int) -> Path:
    """A file that leaves ``leave_bytes`` free on the disk."""
    filler = disk / "filler"
    free = shutil.disk_usage(disk).free
    with open(filler, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, max(free - leave_bytes, 1))
    return filler


def send(conn: RawConnection, seq: int, payload: bytes, producer_id: int = 1) -> pb.BaseCommand:
    conn.send_message(producer_id, seq, payload)
    return conn.read_until(lambda f: f.command.type in (T.SEND_RECEIPT, T.SEND_ERROR)).command


def test_appends_stop_at_the_threshold_and_resume_below(small_disk: Path, tmp_path: Path) -> None:
    root = small_disk / "threshold"
    root.mkdir()
    broker = start_broker(root, tmp_path, {"diskUsageThreshold": "0.9", "diskUsageWarnThreshold": "0.8"})
    try:
        with RawConnection.to_service(broker.service_url) as conn:
            conn.handshake()
            conn.create_producer(new_topic("threshold"), producer_id=1, request_id=1)
            assert send(conn, 0, b"before").type == T.SEND_RECEIPT
            filler = fill(small_disk, leave_bytes=2 * MB)  # about 96% used

            def refused() -> pb.CommandSendError | None:
                reply = send(conn, 1, b"refused")
                return reply.send_error if reply.type == T.SEND_ERROR else None
            error = wait_until(refused, what="appends refused above the threshold")
            assert error.error == pb.PersistenceError
            assert "diskUsageThreshold 90%" in error.message
            health = httpx.get(f"{broker.web_url}/admin/v2/brokers/health", timeout=30)
            assert health.status_code == 503 and "Not enough disk space" in health.text
            assert "magnetar_disk_appends_refused{cluster=\"standalone\"} 1.0" in \
                httpx.get(f"{broker.web_url}/metrics", timeout=30).text  # a first scrape is slow on a busy machine

            filler.unlink()
            wait_until(lambda: send(conn, 2, b"after").type == T.SEND_RECEIPT, what="appends taken again")
            assert httpx.get(f"{broker.web_url}/admin/v2/brokers/health", timeout=30).text == "ok"
    finally:
        broker.kill()
        (small_disk / "filler").unlink(missing_ok=True)  # the next test fills the disk itself


def test_a_full_disk_fails_appends_clearly_and_loses_nothing(small_disk: Path, tmp_path: Path) -> None:
    root = small_disk / "full"
    root.mkdir()
    broker = start_broker(root, tmp_path, {"diskUsageThreshold": "1.0", "diskUsageWarnThreshold": "1.0"})
    topic = new_topic("full")
    try:
        filler = fill(small_disk, leave_bytes=3 * MB)
        receipted: list[bytes] = []
        with RawConnection.to_service(broker.service_url, timeout_s=30) as conn:
            conn.handshake()
            conn.create_producer(topic, producer_id=1, request_id=1)
            for seq in range(100):
                payload = bytes([seq]) * (100 * 1024)
                reply = send(conn, seq, payload)
                if reply.type == T.SEND_ERROR:
                    break
                receipted.append(payload)
            else:
                pytest.fail("10 MB went onto a disk with 3 MB free")
            assert reply.send_error.error == pb.PersistenceError
            assert "No space left on device" in reply.send_error.message
            assert receipted, "the first appends fit"

            assert read_all(broker, topic, len(receipted)) == receipted  # reads go on
            filler.unlink()
            # as in Pulsar, a failed write disconnected the producer: the client creates it again
            conn.create_producer(topic, producer_id=2, request_id=2)
            wait_until(lambda: send(conn, 1000, b"again", producer_id=2).type == T.SEND_RECEIPT,
                       what="appends after space is freed")
        assert broker.stop() == 0
        broker.start()
        assert read_all(broker, topic, len(receipted) + 1) == [*receipted, b"again"]
    finally:
        broker.kill()


def read_all(broker: BrokerProcess, topic: str, count: int) -> list[bytes]:
    with RawConnection.to_service(broker.service_url, timeout_s=30) as conn:
        conn.handshake()
        conn.subscribe(topic, f"reader-{os.urandom(4).hex()}", consumer_id=1, request_id=1,
                       initialPosition=pb.CommandSubscribe.Earliest)
        conn.send_command(flow(1, count + 10))
        frames = [conn.expect(T.MESSAGE) for _ in range(count)]
        assert not [f for f in conn.frames_for(0.3) if f.command.type == T.MESSAGE], "nothing more, no duplicates"
        return [bytes(parse_entry(f.entry).payload) for f in frames]

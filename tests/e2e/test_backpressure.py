"""Back-pressure against clients that do not read: broker memory stays bounded, and
nothing is lost once they read again."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from e2e_helpers import new_topic, wait_until

from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.raw_client import RawConnection, T, flow, producer
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import encode_payload_command, make_entry

MB = 1024 * 1024
ENTRY_PAYLOAD = 1 * MB
BACKLOG_ENTRIES = 60


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("backpressure") / "data"
    proc = BrokerProcess(data, config={"maxPendingPublishRequestsPerConnection": "200"}).start()
    yield proc
    proc.kill()


def short(topic: str) -> str:
    return topic.removeprefix("persistent://")


def consumer_stats(broker: BrokerProcess, topic: str, sub: str) -> dict[str, int]:
    reply = httpx.get(f"{broker.web_url}/admin/v2/persistent/{short(topic)}/stats", timeout=10)
    reply.raise_for_status()
    consumers = reply.json()["subscriptions"][sub]["consumers"]
    return consumers[0] if consumers else {}


def publish_backlog(broker: BrokerProcess, topic: str, entries: int) -> None:
    with RawConnection.to_service(broker.service_url, timeout_s=30) as conn:
        conn.handshake()
        conn.create_producer(topic, producer_id=1, request_id=1)
        for seq in range(entries):
            conn.send_message(1, seq, bytes([seq % 256]) * ENTRY_PAYLOAD)
            conn.expect(T.SEND_RECEIPT)


def test_a_consumer_that_does_not_read_holds_the_broker_to_its_write_buffer(broker: BrokerProcess) -> None:
    topic = new_topic("no-reader")
    with RawConnection.to_service(broker.service_url, timeout_s=30, receive_buffer=8192) as reader:
        reader.handshake()
        reader.subscribe(topic, "s", consumer_id=7, request_id=1)
        publish_backlog(broker, topic, BACKLOG_ENTRIES)
        before = broker.rss_bytes()
        reader.send_command(flow(7, 1_000_000))
        wait_until(lambda: consumer_stats(broker, topic, "s").get("msgOutCounter", 0) > 0, what="a first dispatch")
        publish_backlog(broker, new_topic("other"), 3)  # the broker went round its loop many times since
        sent = consumer_stats(broker, topic, "s")["msgOutCounter"]
        grown = broker.rss_bytes() - before
        assert sent < BACKLOG_ENTRIES // 4, \
            f"{sent} of {BACKLOG_ENTRIES} 1 MB entries went to a consumer that reads nothing"
        assert grown < 24 * MB, f"broker RSS grew by {grown / MB:.1f} MB for a consumer that reads nothing"

        received = [reader.expect(T.MESSAGE, timeout_s=30) for _ in range(BACKLOG_ENTRIES)]
        entries = [f.command.message.message_id.entryId for f in received]
        assert entries == sorted(entries) and len(set(entries)) == BACKLOG_ENTRIES
        assert [f.entry[-1] for f in received] == [seq % 256 for seq in range(BACKLOG_ENTRIES)]


FIRST_SEQ = 1 << 14  # every sequence id a three-byte varint: every frame the same size


def send_frames(count: int, payload: bytes) -> tuple[bytes, int]:
    frames = []
    for seq in range(FIRST_SEQ, FIRST_SEQ + count):
        meta = pb.MessageMetadata(producer_name="flood", sequence_id=seq, publish_time=int(time.time() * 1000))
        cmd = pb.BaseCommand(type=T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=seq))
        frames.append(encode_payload_command(cmd, make_entry(meta, payload)))
    assert len({len(f) for f in frames}) == 1
    return b"".join(frames), len(frames[0])


def push_until_stalled(sock: socket.socket, blob: bytes, stall_s: float) -> int:
    """Write as much of ``blob`` as the peer takes; stop after ``stall_s`` without progress."""
    sock.setblocking(False)
    offset = 0
    while offset < len(blob):
        _, writable, _ = select.select([], [sock], [], stall_s)
        if not writable:
            break
        with contextlib.suppress(BlockingIOError):
            offset += sock.send(blob[offset:offset + 4 * MB])
    sock.settimeout(30)
    return offset


def test_a_producer_that_does_not_read_its_receipts_is_no_longer_read(broker: BrokerProcess) -> None:
    # the kernel's socket buffers hold some 100,000 receipts before the broker's own
    # buffer fills: a flood well beyond that must stop being read
    count = 400_000
    blob, frame_size = send_frames(count, b"x" * 100)
    with RawConnection.to_service(broker.service_url, timeout_s=30, receive_buffer=4096) as conn:
        conn.handshake()
        conn.send_command(producer(new_topic("flood"), 1, 1, producer_name="flood"))
        conn.expect_reply(1, T.PRODUCER_SUCCESS)
        before = broker.rss_bytes()
        pushed = push_until_stalled(conn.sock, blob, stall_s=2.0)
        grown = broker.rss_bytes() - before
        assert pushed < len(blob) // 2, f"the broker read {pushed // frame_size} of {count} sends without receipts read"
        assert grown < 48 * MB, f"broker RSS grew by {grown / MB:.1f} MB"

        complete = -(-pushed // frame_size)  # the partial frame is finished below
        receipts: list[int] = []
        reading = threading.Thread(target=lambda: receipts.extend(
            conn.expect(T.SEND_RECEIPT, timeout_s=30).command.send_receipt.sequence_id for _ in range(complete)))
        reading.start()
        conn.sock.sendall(blob[pushed:complete * frame_size])
        reading.join(timeout=60)
        assert not reading.is_alive()
        # every send accepted before the pause is receipted, in order
        assert receipts == list(range(FIRST_SEQ, FIRST_SEQ + complete))

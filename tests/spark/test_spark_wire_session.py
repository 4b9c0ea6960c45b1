"""The source's protocol-level connection reading frames as they come off a real socket: cut at
every place, many to a read, and larger than its read buffer."""

from __future__ import annotations

import random
import socket
import threading

import pytest

from magnetar.spark import wire_session
from magnetar.spark.options import parse_source_options
from magnetar.spark.wire_session import BrokerSessionError
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import payload_frame_header

T = pb.BaseCommand


def _message_frame(entry_id: int, entry: bytes) -> bytes:
    command = T(type=T.MESSAGE, message=pb.CommandMessage(
        consumer_id=1, message_id=pb.MessageIdData(ledgerId=3, entryId=entry_id)))
    return payload_frame_header(command, len(entry)) + entry


def _serve(listener: socket.socket, data: bytes, seed: int) -> None:
    """Send ``data`` to the first connection in pieces of random sizes, then close it."""
    conn, _ = listener.accept()
    rng = random.Random(seed)
    with conn:
        at = 0
        while at < len(data):
            piece = rng.choice([1, 7, 100, 4096, 70_000, 1 << 20, 3 << 20])
            conn.sendall(data[at:at + piece])
            at += piece


@pytest.mark.timeout(60)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_frames_come_whole_however_the_reads_cut_them(seed: int) -> None:
    rng = random.Random(seed)
    sizes = [0, 1, 50, 106_000, 70_000, 5 << 20, 10, 1 << 20, 3]
    entries = [rng.randbytes(size) for size in sizes * 3]
    data = b"".join(_message_frame(i, entry) for i, entry in enumerate(entries))
    with socket.create_server(("127.0.0.1", 0)) as listener:
        server = threading.Thread(target=_serve, args=(listener, data, seed), daemon=True)
        server.start()
        port = listener.getsockname()[1]
        options = parse_source_options({"service.url": f"pulsar://127.0.0.1:{port}",
                                        "admin.url": "http://127.0.0.1:1", "topic": "t"}, streaming=False)
        sock = wire_session._Socket(options.connection.service_url, options.connection, 10)
        try:
            for i, entry in enumerate(entries):
                frame = sock.receive(10)
                assert frame is not None, i
                command, rest = frame
                assert (command.type, command.message.message_id.entryId) == (T.MESSAGE, i)
                assert rest == entry, i
            with pytest.raises(BrokerSessionError, match="closed the connection"):
                sock.receive(10)
        finally:
            sock.close()
        server.join(10)

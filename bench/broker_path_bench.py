"""The broker's own CPU per entry, in one process, without sockets or other processes.

``bench/wire_bench.py`` measures the broker end to end over loopback, with generator and
consumer processes competing for the same cores; on a shared 2-core machine its CPU
figure moves by 20% between runs. This bench drives the real broker (``BrokerService``
and ``ServerConnection`` on an asyncio loop, real segment files, the group-commit and
metadata threads) through in-memory transports: a producer connection is fed pre-encoded
SEND frames a read's worth at a time (none while the broker has paused reading it, as a
socket would not be read), a consumer connection with large permits receives
every MESSAGE and acknowledges cumulatively every 1,000 entries, as the wire bench's
consumer does. It prints the broker's CPU time per entry (the loop thread alone, and the
whole process), so a change to the send, receipt, dispatch or ack path can be judged
from a few runs.

    python bench/broker_path_bench.py --entries 200000 [--batch 1] [--sync] [--rate 10000] [--profile out.prof]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from magnetar.core.broker.broker_config import BrokerConfig  # noqa: E402
from magnetar.server.broker_service import BrokerService  # noqa: E402
from magnetar.server.connection import ServerConnection  # noqa: E402
from magnetar.testing.memory_transport import MemoryTransport  # noqa: E402
from magnetar.wire import pulsar_api_pb2 as pb  # noqa: E402
from magnetar.wire.batch import make_batch  # noqa: E402
from magnetar.wire.frames import encode_command, encode_payload_command, make_entry  # noqa: E402
from magnetar.wire.gathering import gathered  # noqa: E402

T = pb.BaseCommand
TOPIC = "persistent://public/default/broker-path-bench"
READ_BYTES = 256 * 1024


def command(cmd: T) -> bytes:
    return encode_command(cmd)


def connect_frame() -> bytes:
    cmd = T(type=T.CONNECT)
    cmd.connect.client_version = "broker-path-bench"
    cmd.connect.protocol_version = 21
    return command(cmd)


def send_frames(entries: int, batch: int, size: int) -> list[bytes]:
    metadata = pb.MessageMetadata(producer_name="bench", sequence_id=0, publish_time=int(time.time() * 1000))
    payload = b"x" * size
    if batch > 1:
        metadata.num_messages_in_batch = batch
        payload = make_batch([(pb.SingleMessageMetadata(payload_size=size), payload) for _ in range(batch)])
    frames = []
    for sequence_id in range(entries):
        metadata.sequence_id = sequence_id
        cmd = T(type=T.SEND)
        cmd.send.producer_id = 1
        cmd.send.sequence_id = sequence_id
        if batch > 1:
            cmd.send.num_messages = batch
        frames.append(encode_payload_command(cmd, make_entry(metadata, payload)))
    return frames


def reads(frames: list[bytes]) -> list[bytes]:
    """The frames as a socket would hand them over: about READ_BYTES per read."""
    return list(gathered(frames, READ_BYTES))


async def until(condition: Any, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the broker did not get there in time")
        await asyncio.sleep(0.001)


async def run(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    config = BrokerConfig(journalSyncData=args.sync, brokerServicePort=0, webServicePort=0)
    broker = BrokerService(config, data_dir)
    broker.start(asyncio.get_running_loop())
    producer = ServerConnection(broker)
    producer.connection_made(MemoryTransport(("127.0.0.1", 1)))  # type: ignore[arg-type]
    consumer = ServerConnection(broker)
    consumer.connection_made(MemoryTransport(("127.0.0.1", 2)))  # type: ignore[arg-type]
    producer.data_received(connect_frame())
    consumer.data_received(connect_frame())
    cmd = T(type=T.PRODUCER)
    cmd.producer.topic, cmd.producer.producer_id, cmd.producer.request_id = TOPIC, 1, 1
    cmd.producer.producer_name = "bench"
    producer.data_received(command(cmd))
    cmd = T(type=T.SUBSCRIBE)
    sub = cmd.subscribe
    sub.topic, sub.subscription, sub.consumer_id, sub.request_id = TOPIC, "bench", 1, 2
    sub.subType = pb.CommandSubscribe.Exclusive
    sub.initialPosition = pb.CommandSubscribe.Earliest
    consumer.data_received(command(cmd))
    await until(lambda: 1 in consumer.consumers and 1 in producer.producers)
    consumer.data_received(command(T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=1, messagePermits=1 << 30))))
    frames = send_frames(args.entries, args.batch, args.size)
    # at a fixed rate each SEND comes in a read of its own, as from a client sending one at a time
    chunks = frames if args.rate > 0 else reads(frames)

    bench_consumer = consumer.consumers[1][0]

    def consumer_entries() -> int:
        return bench_consumer.msg_out.total_events

    acked = 0

    def acknowledge() -> None:
        nonlocal acked
        pending = bench_consumer.pending
        if not pending:
            return
        last = next(reversed(pending))
        ack = T(type=T.ACK, ack=pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Cumulative))
        ack.ack.message_id.add(ledgerId=last.ledger_id, entryId=last.entry_id)
        consumer.data_received(command(ack))
        acked = consumer_entries()

    profiler = cProfile.Profile() if args.profile else None
    started, cpu0, thread0 = time.perf_counter(), time.process_time(), time.thread_time()
    if profiler is not None:
        profiler.enable()
    for sent, chunk in enumerate(chunks):
        while producer.reading_paused:  # a socket would not be read now (pending-publish limit)
            await asyncio.sleep(0.0002)
        if args.rate > 0 and (ahead := started + sent / args.rate - time.perf_counter()) > 0:
            await asyncio.sleep(ahead)
        producer.data_received(chunk)
        await asyncio.sleep(0)
        if consumer_entries() - acked >= 1000:
            acknowledge()
    while consumer_entries() < args.entries:
        await asyncio.sleep(0.0005)
        if consumer_entries() - acked >= 1000:
            acknowledge()
    acknowledge()
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)
    elapsed = time.perf_counter() - started
    cpu, thread = time.process_time() - cpu0, time.thread_time() - thread0
    await broker.close()
    return {"entries": args.entries, "batch": args.batch, "size": args.size, "journalSyncData": args.sync,
            "rate": args.rate,
            "elapsed_s": round(elapsed, 3), "entries_per_s": round(args.entries / elapsed),
            "loop_cpu_us_per_entry": round(thread / args.entries * 1e6, 2),
            "process_cpu_us_per_entry": round(cpu / args.entries * 1e6, 2),
            "receipts_bytes": producer.transport.written if producer.transport else 0}  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1, help="messages per entry")
    parser.add_argument("--size", type=int, default=100, help="bytes per message")
    parser.add_argument("--sync", action="store_true", help="journalSyncData=true (fsync before receipts)")
    parser.add_argument("--rate", type=float, default=0,
                        help="entries/s, each in a read of its own (0: as fast as possible, 256 KB reads)")
    parser.add_argument("--profile", help="write a cProfile of the measured part here")
    args = parser.parse_args()
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    with tempfile.TemporaryDirectory(prefix="broker-path-bench-") as tmp:
        print(json.dumps(asyncio.run(run(args, Path(tmp) / "data"))))


if __name__ == "__main__":
    main()

"""Protocol-level load generator: the broker's own speed, without a client library's cost.

The official Python client spends more CPU per message than the broker, so it cannot
measure the broker. This bench speaks the binary protocol directly: generator
processes stream pre-encoded SEND frames (only the sequence id differs) with a window
of outstanding sends, and one consumer process with large permits counts messages from
each entry's metadata, verifies every entry's CRC32C, and checks that every message of
every producer arrived exactly once. It starts its own broker (``journalSyncData`` on
unless ``--no-sync``) and prints one JSON line with msgs/s, MB/s and the broker's CPU
time per entry (user + system time of the broker process, all its threads).

    python bench/wire_bench.py                      # 300,000 unbatched 100-byte entries
    python bench/wire_bench.py --batch 1000 --messages 6000000
    python bench/wire_bench.py --broker-src /tmp/old-checkout   # an older commit's broker

Batched runs of a few million messages last a second or two and give the burst rate; for
the sustained rate give ``--messages 30000000`` or more. Over a longer run the segment
grows by gigabytes, and every page of it is new page cache: on a virtual machine whose
host takes freed guest memory back, the first touch of each page cost the broker's
``writev`` most of its time (on the 2-core machine, ``dd`` of 4 GB into a file ran at
590 MB/s, and at 1.9 GB/s when repeated at once), until synced data far behind the end
was given back to the kernel (``journalRemoveFromPageCache``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import google_crc32c

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from magnetar.testing.broker_process import BrokerProcess, checkout_source, start_from_checkout  # noqa: E402
from magnetar.wire import pulsar_api_pb2 as pb  # noqa: E402
from magnetar.wire.batch import make_batch  # noqa: E402
from magnetar.wire.frames import FrameDecoder, encode_command, encode_payload_command, make_entry  # noqa: E402

T = pb.BaseCommand
_U32 = struct.Struct(">I")
TOPIC = "persistent://public/default/wire-bench"


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    cmd = T(type=T.CONNECT)
    cmd.connect.client_version = "magnetar-wire-bench"
    cmd.connect.protocol_version = 21
    sock.sendall(encode_command(cmd))
    return sock


def receive(sock: socket.socket, decoder: FrameDecoder) -> list[Any]:
    data = sock.recv(1 << 20)
    if not data:
        raise EOFError("the broker closed the connection")
    frames = decoder.feed(data)
    for frame in frames:
        if frame.command.type == T.PING:
            sock.sendall(encode_command(T(type=T.PONG, pong=pb.CommandPong())))
    return frames


def make_sends(name: str, count: int, batch: int, size: int) -> list[bytes]:
    """Every SEND frame of one producer, built before the clock starts."""
    metadata = pb.MessageMetadata(producer_name=name, sequence_id=0, publish_time=int(time.time() * 1000))
    payload = b"x" * size
    if batch > 1:
        metadata.num_messages_in_batch = batch
        payload = make_batch([(pb.SingleMessageMetadata(payload_size=size), payload) for _ in range(batch)])
    frames = []
    for sequence_id in range(count):
        metadata.sequence_id = sequence_id
        cmd = T(type=T.SEND)
        cmd.send.producer_id = 1
        cmd.send.sequence_id = sequence_id
        if batch > 1:
            cmd.send.num_messages = batch
        frames.append(encode_payload_command(cmd, make_entry(metadata, payload)))
    return frames


def generator(port: int, name: str, entries: int, batch: int, size: int, window: int, rate: float,
              ready: Any, results: Any, topic: str = TOPIC) -> None:
    sock, decoder = connect(port), FrameDecoder(64 << 20)
    receive(sock, decoder)
    cmd = T(type=T.PRODUCER)
    cmd.producer.topic, cmd.producer.producer_id, cmd.producer.request_id = topic, 1, 1
    cmd.producer.producer_name = name
    sock.sendall(encode_command(cmd))
    while not any(f.command.type == T.PRODUCER_SUCCESS for f in receive(sock, decoder)):
        pass
    sends = make_sends(name, entries, batch, size)
    ready.put(name)
    sent_at: list[float] = [0.0] * entries
    latencies: list[float] = []
    sent = acked = 0
    started = time.perf_counter()
    while acked < entries:
        limit = min(entries, acked + window)
        if rate > 0:
            limit = min(limit, int((time.perf_counter() - started) * rate) + 1)
        if sent < limit:
            now = time.perf_counter()
            for i in range(sent, limit):
                sent_at[i] = now
            sock.sendall(b"".join(sends[sent:limit]))
            sent = limit
        for frame in receive(sock, decoder):
            if frame.command.type == T.SEND_RECEIPT:
                if rate > 0:
                    latencies.append(time.perf_counter() - sent_at[frame.command.send_receipt.sequence_id])
                acked += 1
            elif frame.command.type == T.SEND_ERROR:
                raise RuntimeError(f"{name}: {frame.command.send_error}")
    results.put(("generator", name, time.perf_counter(), latencies))


def consumer(port: int, names: list[str], entries: int, batch: int, ready: Any, results: Any,
             topic: str = TOPIC) -> None:
    sock, decoder = connect(port), FrameDecoder(64 << 20)
    cmd = T(type=T.SUBSCRIBE)
    sub = cmd.subscribe
    sub.topic, sub.subscription, sub.consumer_id, sub.request_id = topic, "bench", 1, 1
    sub.subType = pb.CommandSubscribe.Exclusive
    sub.initialPosition = pb.CommandSubscribe.Earliest
    sock.sendall(encode_command(cmd))
    permits = 1 << 30
    sock.sendall(encode_command(T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=1, messagePermits=permits))))
    ready.put("consumer")
    seen = {name: bytearray(entries) for name in names}
    received = messages = lost = duplicates = crc_errors = payload_bytes = 0
    total = entries * len(names)
    while received < total:
        for frame in receive(sock, decoder):
            if frame.command.type != T.MESSAGE:
                continue
            entry = frame.entry
            received += 1
            if google_crc32c.value(entry[6:]) != _U32.unpack_from(entry, 2)[0]:
                crc_errors += 1
            size = _U32.unpack_from(entry, 6)[0]
            metadata = pb.MessageMetadata.FromString(entry[10:10 + size])
            messages += metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1
            payload_bytes += len(entry) - 10 - size
            marks = seen[metadata.producer_name]
            if marks[metadata.sequence_id]:
                duplicates += 1
            marks[metadata.sequence_id] = 1
            if received % 1000 == 0 or received == total:
                mid = frame.command.message.message_id
                ack = T(type=T.ACK, ack=pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Cumulative))
                ack.ack.message_id.add(ledgerId=mid.ledgerId, entryId=mid.entryId)
                sock.sendall(encode_command(ack))
    lost = sum(marks.count(0) for marks in seen.values())
    results.put(("consumer", time.perf_counter(), messages, payload_bytes, lost, duplicates, crc_errors))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile_ms(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3) if ordered else None


def run(args: argparse.Namespace) -> dict[str, Any]:
    config = {"journalSyncData": "false" if args.no_sync else "true"}
    with tempfile.TemporaryDirectory(prefix="wire-bench-") as tmp:
        broker = start_from_checkout(BrokerProcess(Path(tmp) / "data", config), args.broker_src)
        try:
            return measure(args, broker)
        finally:
            broker.stop()


def measure(args: argparse.Namespace, broker: BrokerProcess) -> dict[str, Any]:
    assert broker.proc is not None
    ctx = mp.get_context("spawn")
    ready, results = ctx.Queue(), ctx.Queue()
    per_generator = args.messages // args.batch // args.generators
    names = [f"wire-bench-{i}" for i in range(args.generators)]
    topic = getattr(args, "topic", TOPIC)
    procs = [ctx.Process(target=consumer, args=(broker.port, names, per_generator, args.batch, ready, results, topic))]
    procs += [ctx.Process(target=generator, args=(broker.port, name, per_generator, args.batch, args.size,
                                                   args.window, args.rate / args.generators, ready, results, topic))
              for name in names]
    for proc in procs:
        proc.start()
    for _ in procs:
        ready.get(timeout=300)
    cpu_before, started = cpu_seconds(broker.proc.pid), time.perf_counter()
    outcomes = [results.get(timeout=args.timeout) for _ in procs]
    cpu = cpu_seconds(broker.proc.pid) - cpu_before
    for proc in procs:
        proc.join(30)
    produced_at = max(o[2] for o in outcomes if o[0] == "generator")
    counted = next(o for o in outcomes if o[0] == "consumer")
    _, consumed_at, messages, payload_bytes, lost, duplicates, crc_errors = counted
    latencies = [x for o in outcomes if o[0] == "generator" for x in o[3]]
    entries = per_generator * args.generators
    elapsed = consumed_at - started
    return {
        "mode": "batched" if args.batch > 1 else "unbatched", "batch": args.batch, "size": args.size,
        "generators": args.generators, "journalSyncData": not args.no_sync, "entries": entries,
        "messages": messages, "elapsed_s": round(elapsed, 3),
        "produce_msgs_per_s": round(messages / (produced_at - started)),
        "end_to_end_msgs_per_s": round(messages / elapsed), "end_to_end_entries_per_s": round(entries / elapsed),
        "mb_per_s": round(payload_bytes / elapsed / 1e6, 1), "broker_cpu_s": round(cpu, 2),
        "broker_cpu_us_per_entry": round(cpu / entries * 1e6, 1), "lost": lost, "duplicates": duplicates,
        "crc_errors": crc_errors, "rate": args.rate,
        "publish_p50_ms": percentile_ms(latencies, 0.5), "publish_p99_ms": percentile_ms(latencies, 0.99),
        "load_avg_1m": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000, help="messages in all (entries x batch)")
    parser.add_argument("--batch", type=int, default=1, help="messages per entry (1: unbatched)")
    parser.add_argument("--size", type=int, default=100, help="bytes per message")
    parser.add_argument("--generators", type=int, default=2, help="producer processes")
    parser.add_argument("--window", type=int, default=1000, help="outstanding sends per generator")
    parser.add_argument("--rate", type=float, default=0, help="entries/s in all (0: as fast as possible)")
    parser.add_argument("--no-sync", action="store_true", help="journalSyncData=false")
    parser.add_argument("--broker-src", help="run the broker of this checkout (its src/) to compare versions")
    parser.add_argument("--timeout", type=float, default=900, help="seconds before giving up")
    args = parser.parse_args()
    if args.broker_src:
        try:
            checkout_source(args.broker_src)
        except ValueError as exc:
            parser.error(str(exc))
    result = run(args)
    print(json.dumps(result), flush=True)
    print(f"{result['mode']}: {result['end_to_end_msgs_per_s']:,} msgs/s end to end, {result['mb_per_s']} MB/s, "
          f"broker {result['broker_cpu_us_per_entry']} us CPU/entry, lost {result['lost']}, "
          f"duplicates {result['duplicates']}", file=sys.stderr)


if __name__ == "__main__":
    main()

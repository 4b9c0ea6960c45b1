"""Runs a README example as a new user would: against ``magnetar standalone`` on its
default ports (``pulsar://localhost:6650``, ``http://localhost:8080``), with the
official client of this environment.

``python -m magnetar.testing.readme_quickstart EXAMPLE.py DATA_DIR [--loopback-up]``
starts the broker, runs the example with this interpreter, stops the broker and exits
with the example's status. Under ``unshare -rn`` (a network namespace of its own, whose
loopback is down until ``--loopback-up`` brings it up) the default ports are free
whatever else runs on the machine.
"""

from __future__ import annotations

import argparse
import fcntl
import socket
import struct
import subprocess
import sys
from pathlib import Path

from magnetar.testing.broker_process import BrokerProcess

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = struct.Struct("16sH")


def loopback_up() -> None:
    """Bring ``lo`` up (a new network namespace starts with it down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = _IFREQ.unpack(fcntl.ioctl(sock, _SIOCGIFFLAGS, _IFREQ.pack(b"lo", 0)))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, _IFREQ.pack(b"lo", flags | _IFF_UP))


def run(example: Path, data_dir: Path, timeout_s: float) -> int:
    broker = BrokerProcess(data_dir, {"bindAddress": "0.0.0.0", "advertisedAddress": "localhost"})
    broker.port, broker.web_port = 6650, 8080  # the defaults the README's example connects to
    broker.start()
    try:
        return subprocess.run([sys.executable, str(example)], timeout=timeout_s, check=False).returncode
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("example", type=Path)
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--loopback-up", action="store_true")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    if args.loopback_up:
        loopback_up()
    return run(args.example, args.data_dir, args.timeout)


if __name__ == "__main__":
    sys.exit(main())

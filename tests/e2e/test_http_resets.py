"""Scrapers that reset their connections (RST, not FIN) while the broker starts answering.

A known fault, in the code before the scrape wrote to the socket as well as after: a
connection reset before uvloop hands it over leaves a descriptor number that uvloop still
watches after it was closed; the next pipe to a scrape's child can get that number, and
uvloop refuses it (``FileExistsError``), and later scrapes time out. 13 of 40 rounds of five
resets failed the scrape after them, with either code. Kept here, in a broker of its own,
until it is fixed.
"""

from __future__ import annotations

import socket
import struct
import urllib.request

import pytest

from magnetar.testing.broker_process import BrokerProcess


@pytest.mark.xfail(reason="uvloop watches the number of a descriptor closed by a reset (module docstring)",
                   strict=False)
def test_scrapes_after_scrapers_that_reset_are_whole(broker: BrokerProcess) -> None:
    host, port = broker.web_url.split("//", 1)[1].rsplit(":", 1)
    for _ in range(10):
        for _ in range(5):
            sock = socket.create_connection((host, int(port)), timeout=30)
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: broker\r\n\r\n")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()  # a reset, not a goodbye
        with urllib.request.urlopen(f"{broker.web_url}/metrics", timeout=10) as response:
            assert b"pulsar_ml_cache_used_size" in response.read()

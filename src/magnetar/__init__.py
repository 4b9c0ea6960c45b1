"""Magnetar: a message broker that implements the Apache Pulsar messaging model.

Layers, from the wire inwards:

- ``wire``    the Pulsar binary protocol (frames, checksums, batch payloads); knows no topics.
- ``core``    the broker's logic as sans-IO state machines: topics, producers, subscriptions,
              dispatchers, selectors, trackers. Time is passed in; effects go to sinks.
- ``storage`` the managed ledger (segment files, group commit) and the SQLite metadata store,
              each with an in-memory twin for tests.
- ``server``  the asyncio shell: connections, timers, the HTTP app, the broker service.
- ``admin``   the admin REST API v2 and metrics.
- ``cli``     ``magnetar standalone``, ``admin``, ``client`` and ``perf``.
- ``spark``   the PySpark data source.
"""

__version__ = "0.1.0"

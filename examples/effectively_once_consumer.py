"""Effectively-once consumption: a reader whose position lives in the same SQLite
transaction as the result of processing each message.

Acknowledgements are at-least-once: a crash between "result written" and "ack sent"
replays the message. Storing the message id with the result, in one transaction, and
starting a reader after that id on restart, processes every message exactly once.

    python examples/effectively_once_consumer.py pulsar://localhost:6650 my-topic state.db
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable

import pulsar

SCHEMA = """
CREATE TABLE IF NOT EXISTS position (topic TEXT PRIMARY KEY, message_id BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS word_counts (word TEXT PRIMARY KEY, n INTEGER NOT NULL);
"""


class EffectivelyOnceCounter:
    """Counts words of messages; the count and the reader position commit together."""

    def __init__(self, client: pulsar.Client, topic: str, db_path: str) -> None:
        self.client = client
        self.topic = topic
        self.db = sqlite3.connect(db_path, isolation_level=None)
        self.db.executescript(SCHEMA)

    def start_position(self) -> pulsar.MessageId:
        row = self.db.execute("SELECT message_id FROM position WHERE topic = ?", (self.topic,)).fetchone()
        return pulsar.MessageId.deserialize(row[0]) if row else pulsar.MessageId.earliest

    def run(self, stop_after: int | None = None, before_commit: Callable[[int], None] | None = None) -> int:
        """Process what is available; returns how many messages were committed."""
        reader = self.client.create_reader(self.topic, self.start_position(), start_message_id_inclusive=False)
        done = 0
        try:
            while reader.has_message_available() and (stop_after is None or done < stop_after):
                msg = reader.read_next(timeout_millis=10_000)
                self.db.execute("BEGIN")
                for word in msg.data().decode().split():
                    self.db.execute("INSERT INTO word_counts VALUES (?, 1) "
                                    "ON CONFLICT(word) DO UPDATE SET n = n + 1", (word,))
                self.db.execute("INSERT INTO position VALUES (?, ?) ON CONFLICT(topic) "
                                "DO UPDATE SET message_id = excluded.message_id",
                                (self.topic, msg.message_id().serialize()))
                if before_commit is not None:
                    before_commit(done)
                self.db.execute("COMMIT")
                done += 1
        finally:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            reader.close()
        return done

    def counts(self) -> dict[str, int]:
        return dict(self.db.execute("SELECT word, n FROM word_counts").fetchall())


def main() -> None:
    service_url, topic, db_path = sys.argv[1:4]
    client = pulsar.Client(service_url)
    counter = EffectivelyOnceCounter(client, topic, db_path)
    print(f"processed {counter.run()} messages; counts: {counter.counts()}")
    client.close()


if __name__ == "__main__":
    main()

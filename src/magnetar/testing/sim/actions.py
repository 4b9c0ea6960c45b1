"""The steps of a simulated schedule, as values with a one-line text form.

A schedule is a list of actions. Actions name consumers by their simulated client
name (``c3``) and messages by their place in that client's list of received messages,
so a schedule printed by a failing run replays exactly, and a hand-trimmed one still
means something (a step that no longer applies is skipped).
"""

from __future__ import annotations

from dataclasses import dataclass

#: verbs and what their arguments mean
VERBS = {
    "publish": "KEY COUNT [DELAY_MS]: one entry; KEY '-' is keyless, 'k@o' puts k in the ordering key; "
               "COUNT>1 is a batch; DELAY_MS delays its delivery",
    "persist": "storage makes every appended entry durable; durable entries are dispatched",
    "join": "NAME QUEUE [RANGES]: a consumer subscribes with a receiver queue; STICKY ranges as a:b,c:d",
    "join-bad": "NAME QUEUE KIND [RANGES]: a subscribe the broker must refuse "
                "(KIND: conflict, invalid, mode, ooo, exclusive, type)",
    "leave": "NAME: the application acknowledges what it received, then closes the consumer",
    "crash": "NAME: the consumer's connection drops",
    "reconnect": "NAME: the consumer's connection drops and it subscribes again under the same name",
    "receive": "NAME COUNT: the application takes entries from its receiver queue (FLOW as the client does)",
    "ack": "NAME I,J,...: acknowledge received entries by their place in the received list",
    "ack-cum": "NAME I: acknowledge cumulatively up to the I-th received entry (Exclusive, Failover)",
    "ack-part": "NAME I INDEX: acknowledge one message of a received batch",
    "nack": "NAME I,J,...: ask for redelivery of received entries (on Exclusive and Failover the client "
            "asks for all, as the official client does)",
    "nack-all": "NAME: redeliverUnacknowledgedMessages; the client drops its receiver queue",
    "flow": "NAME COUNT: extra permits",
    "behave": "NAME normal|slow|stalled: how the application acts from now on",
    "tick": "MS: time passes; due timers fire",
    "expire": "LEDGER:ENTRY: message TTL moves the mark-delete position there (entries consumed unseen)",
    "seek": "earliest|LEDGER:ENTRY: reset the subscription's cursor; consumers are closed and subscribe "
            "again; everything from there on is delivered again",
    "reader-open": "NAME earliest|LEDGER:ENTRY QUEUE: a reader (non-durable subscription) from there on",
    "reader-receive": "NAME COUNT: the reader's application takes entries from its queue",
    "reader-close": "NAME: the reader closes; its subscription goes with it",
}


@dataclass(frozen=True, slots=True)
class Action:
    verb: str
    args: tuple[str, ...] = ()

    def __str__(self) -> str:
        return " ".join((self.verb, *self.args))

    @classmethod
    def parse(cls, line: str) -> Action:
        words = line.split()
        if not words or words[0] not in VERBS:
            raise ValueError(f"not a schedule step: {line!r} (verbs: {', '.join(VERBS)})")
        return cls(words[0], tuple(words[1:]))


def act(verb: str, *args: object) -> Action:
    return Action(verb, tuple(str(a) for a in args))


def parse_schedule(text: str) -> list[Action]:
    """Steps one per line; blank lines and ``#`` comments are skipped."""
    steps = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            steps.append(Action.parse(line))
    return steps


def format_indexes(indexes: list[int]) -> str:
    return ",".join(str(i) for i in indexes)


def parse_indexes(text: str) -> list[int]:
    return [int(i) for i in text.split(",") if i]


def format_ranges(ranges: list[tuple[int, int]]) -> str:
    return ",".join(f"{a}:{b}" for a, b in ranges)


def parse_ranges(text: str) -> list[tuple[int, int]]:
    ranges = []
    for part in text.split(","):
        a, _, b = part.partition(":")
        ranges.append((int(a), int(b)))
    return ranges

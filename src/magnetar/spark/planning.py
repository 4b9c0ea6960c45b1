"""Driver side of the source: which topic partitions, from where, to where, in how many tasks.

Everything here talks to the admin REST API only (partitions, last message id,
internal stats, message id by time), so planning creates no subscription and no
client connection. The admission-control walk (``maxRecordsPerTrigger``) is the
exception: counting messages needs reading them, which :class:`BacklogWalker` does
with short-lived Readers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from magnetar.spark.offsets import EARLIEST, MessagePosition, OffsetError
from magnetar.spark.options import (
    ENDING_OFFSETS,
    STARTING_OFFSETS,
    MagnetarOptionError,
    SourceOptions,
    TopicSelection,
    normalise_topic,
    pattern_namespace,
)
from magnetar.spark.reading import MagnetarInputPartition
from magnetar.spark.rest import AdminClient, LedgerInfo, base_topic


def resolve_partitions(admin: AdminClient, selection: TopicSelection) -> list[str]:
    """Every topic partition the query reads, sorted: partitioned topics expand to their partitions."""
    if selection.pattern is not None:
        tenant, namespace = pattern_namespace(selection.pattern)
        regex = re.compile(selection.pattern)
        bases = sorted({base_topic(t) for t in admin.list_topics(tenant, namespace)
                        if regex.fullmatch(base_topic(t))})
    else:
        bases = list(selection.topics)
    names: list[str] = []
    for topic in bases:
        names.extend(admin.topic_partitions(topic))
    return sorted(set(names))


def latest_positions(admin: AdminClient, partitions: Iterable[str]) -> dict[str, MessagePosition]:
    return {tp: admin.last_message_id(tp) for tp in partitions}


def starting_positions(admin: AdminClient, options: SourceOptions, partitions: list[str],
                       *, default: str) -> dict[str, MessagePosition]:
    """Exclusive start per topic partition from startingOffsets / startingTime (or the default)."""
    if options.starting_time_ms is not None:
        return {tp: position_before_time(admin, tp, options.starting_time_ms) for tp in partitions}
    spec = (options.starting_offsets or default).strip()
    return _positions_from_spec(admin, STARTING_OFFSETS, spec, partitions, missing="earliest")


def ending_positions(admin: AdminClient, options: SourceOptions,
                     partitions: list[str]) -> dict[str, MessagePosition]:
    spec = (options.ending_offsets or "latest").strip()
    ends = _positions_from_spec(admin, ENDING_OFFSETS, spec, partitions, missing="latest")
    if spec.lower() != "latest":
        for tp, end in ends.items():
            last = admin.last_message_id(tp)
            if end > last:
                raise MagnetarOptionError(f"{ENDING_OFFSETS} {end} for {tp} is after its last message ({last})")
    return ends


def _positions_from_spec(admin: AdminClient, option: str, spec: str, partitions: list[str],
                         missing: str) -> dict[str, MessagePosition]:
    if spec.lower() == "earliest":
        return dict.fromkeys(partitions, EARLIEST)
    if spec.lower() == "latest":
        return latest_positions(admin, partitions)
    given = parse_offsets_json(option, spec, partitions)
    out: dict[str, MessagePosition] = {}
    for tp in partitions:
        value = given.get(tp, missing)
        if value == "latest":
            out[tp] = admin.last_message_id(tp)
        elif value == "earliest":
            out[tp] = EARLIEST
        else:
            assert isinstance(value, MessagePosition)
            out[tp] = value
    return out


def parse_offsets_json(option: str, text: str, partitions: list[str]) -> dict[str, MessagePosition | str]:
    """Topic (partition) -> message id, ``"earliest"`` or ``"latest"``.

    Accepts our checkpoint form (``{"topics": {...}, "version": 1}``) or a flat object.
    A partitioned topic's name applies to all its partitions; a name the query does
    not read is an error, so a typo cannot silently read from the default position.
    """
    doc: Any = json.loads(text)
    if isinstance(doc, Mapping) and "topics" in doc and "version" in doc:
        doc = doc["topics"]
    if not isinstance(doc, Mapping):
        raise MagnetarOptionError(f"option {option}: expected a JSON object of topic partition -> message id")
    wanted = set(partitions)
    out: dict[str, MessagePosition | str] = {}
    for raw_name, value in doc.items():
        name = normalise_topic(str(raw_name))
        targets = [name] if name in wanted else [tp for tp in partitions if base_topic(tp) == name]
        if not targets:
            raise MagnetarOptionError(f"option {option} names {raw_name!r}, which the query does not read "
                                      f"(it reads {', '.join(partitions) or 'no topic'})")
        if isinstance(value, str) and value.strip().lower() in ("earliest", "latest"):
            parsed: MessagePosition | str = value.strip().lower()
        else:
            try:
                parsed = MessagePosition.from_json(value, f"option {option}, {raw_name}")
            except OffsetError as exc:
                raise MagnetarOptionError(str(exc)) from None
        for tp in targets:
            out[tp] = parsed
    return out


def position_before_time(admin: AdminClient, topic: str, timestamp_ms: int) -> MessagePosition:
    """The exclusive start that makes the first message published at or after the time the first read."""
    first = admin.first_message_at(topic, timestamp_ms)
    if first is None:
        return admin.last_message_id(topic)
    if first.entry_id > 0:
        return MessagePosition(first.ledger_id, first.entry_id - 1, -1)
    # Entry 0 of a ledger: "everything before ledger L" is (L, -1).
    return MessagePosition(first.ledger_id, -1, -1)


def check_range(topic: str, start: MessagePosition, end: MessagePosition) -> None:
    if start > end:
        raise MagnetarOptionError(f"{STARTING_OFFSETS} {start} is after {ENDING_OFFSETS} {end} for {topic}")


def plan_partitions(topic: str, start: MessagePosition, end: MessagePosition,
                    ledgers: list[LedgerInfo] | None, max_entries: int) -> list[MagnetarInputPartition]:
    """The Spark partitions for one topic partition's range; more than one when the range is large."""
    if end <= start:
        return []
    bounds = split_points(start, end, ledgers, max_entries) if ledgers else []
    edges = [start, *bounds, end]
    return [MagnetarInputPartition(topic, a, b) for a, b in zip(edges, edges[1:], strict=False) if b > a]


def split_points(start: MessagePosition, end: MessagePosition, ledgers: list[LedgerInfo],
                 max_entries: int) -> list[MessagePosition]:
    """Whole-entry boundaries every ``max_entries`` entries strictly inside (start, end]."""
    ids = [info.ledger_id for info in ledgers]
    if not start.is_earliest and start.ledger_id not in ids:
        return []  # the start's ledger is gone: one task reads and reports the loss
    points: list[MessagePosition] = []
    count = 0
    for info in ledgers:
        if not start.is_earliest and info.ledger_id < start.ledger_id or info.ledger_id > end.ledger_id:
            continue
        first = 0
        if not start.is_earliest and info.ledger_id == start.ledger_id:
            first = start.entry_id if start.batch_index >= 0 else start.entry_id + 1
        last = info.entries - 1
        if info.ledger_id == end.ledger_id:
            last = min(last, end.entry_id - 1)  # a cut at the end's entry would pass the end
        entry = first
        while entry <= last:
            step = min(max_entries - count, last - entry + 1)
            count += step
            entry += step
            if count == max_entries:
                points.append(MessagePosition(info.ledger_id, entry - 1, -1))
                count = 0
    return [p for p in points if start < p < end]


def plan_ranges(admin: AdminClient, options: SourceOptions, starts: Mapping[str, MessagePosition],
                ends: Mapping[str, MessagePosition], *, split: bool) -> list[MagnetarInputPartition]:
    parts: list[MagnetarInputPartition] = []
    for tp in sorted(ends):
        start, end = starts.get(tp, EARLIEST), ends[tp]
        if end <= start:
            continue
        ledgers = admin.ledgers(tp) if split else None
        parts.extend(plan_partitions(tp, start, end, ledgers, options.max_entries_per_split))
    return parts

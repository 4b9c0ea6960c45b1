"""Everything a schedule varies, derived from one seed (as TigerBeetle's VOPR does).

The seed picks the subscription type (from a mix the command line may narrow), the
Key_Shared mode and broker settings, the shape of the traffic
(how many keys, how skewed, how often batched) and the weight of every kind of step.
Printing the options with the seed tells a reader what kind of world failed.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, replace

AUTO_SPLIT_CONSISTENT = "consistent-hashing"
AUTO_SPLIT_RANGES = "auto-split"
STICKY = "sticky"

EXCLUSIVE, FAILOVER, SHARED, KEY_SHARED = "Exclusive", "Failover", "Shared", "Key_Shared"
SUB_TYPES = (EXCLUSIVE, FAILOVER, SHARED, KEY_SHARED)
#: types that deliver to one active consumer, in order
SINGLE_ACTIVE = (EXCLUSIVE, FAILOVER)
#: every type, equally often
ALL_TYPES: tuple[tuple[str, float], ...] = tuple((t, 1.0) for t in SUB_TYPES)


def parse_type_mix(text: str) -> tuple[tuple[str, float], ...]:
    """``Shared,Key_Shared=2``: the types a campaign draws from and how often (case-insensitive)."""
    by_name = {t.lower().replace("_", ""): t for t in SUB_TYPES}
    mix = []
    for part in text.split(","):
        name, _, weight = part.strip().partition("=")
        sub_type = by_name.get(name.lower().replace("_", "").replace("-", ""))
        if sub_type is None:
            raise ValueError(f"unknown subscription type {name!r} (types: {', '.join(SUB_TYPES)})")
        mix.append((sub_type, float(weight) if weight else 1.0))
    return tuple(mix)


@dataclass(frozen=True)
class SimOptions:
    seed: int
    #: the subscription's type: Exclusive, Failover, Shared or Key_Shared
    sub_type: str
    selector: str
    classic: bool
    allow_out_of_order: bool
    #: broker settings
    unblocking_interval_ms: int
    look_ahead_per_consumer: int
    look_ahead_per_subscription: int
    max_unacked_per_consumer: int
    max_unacked_per_subscription: int
    replica_points: int
    entries_per_ledger: int
    #: traffic
    keys: int
    key_skew: float
    batch_probability: float
    ordering_key_probability: float
    keyless_probability: float
    #: share of entries published with a delivery time in the future (delayed delivery)
    delayed_probability: float
    delayed_tick_ms: int
    #: consumers
    max_consumers: int
    queue_sizes: tuple[int, ...]
    sticky_slots: tuple[tuple[int, int], ...]
    #: schedule
    steps: int
    weights: tuple[tuple[str, float], ...]

    @classmethod
    def from_seed(cls, seed: int, steps: int | None = None,
                  types: tuple[tuple[str, float], ...] = ALL_TYPES) -> SimOptions:
        """The seed's options; the type is drawn apart so each type's other options do not
        depend on the mix a campaign runs with."""
        rng = random.Random(seed)
        roll = rng.random()
        selector = AUTO_SPLIT_CONSISTENT if roll < 0.45 else AUTO_SPLIT_RANGES if roll < 0.85 else STICKY
        classic = rng.random() < 0.25
        allow_out_of_order = rng.random() < 0.05
        steps_total = steps if steps is not None else rng.choice((60, 120, 200, 300))
        return cls(
            seed=seed,
            sub_type=_pick_type(seed, types),
            selector=selector,
            classic=classic,
            allow_out_of_order=allow_out_of_order,
            unblocking_interval_ms=rng.choice((0, 1, 10, 50)),
            look_ahead_per_consumer=rng.choice((1, 3, 10, 2000)),
            look_ahead_per_subscription=rng.choice((2, 8, 50, 20000)),
            max_unacked_per_consumer=rng.choice((0, 0, 3, 10, 50000)),
            max_unacked_per_subscription=rng.choice((0, 0, 8, 200000)),
            replica_points=rng.choice((1, 3, 20, 100)),
            entries_per_ledger=rng.choice((3, 10, 50000)),
            keys=rng.choice((1, 3, 10, 40, 200)),
            key_skew=rng.choice((0.0, 0.8, 1.5)),
            batch_probability=rng.choice((0.0, 0.0, 0.2, 0.6)),
            ordering_key_probability=rng.choice((0.0, 0.2)),
            keyless_probability=rng.choice((0.0, 0.05, 0.3)),
            delayed_probability=rng.choice((0.0, 0.0, 0.0, 0.1)),
            delayed_tick_ms=rng.choice((1, 8, 100)),
            max_consumers=rng.choice((1, 2, 3, 4, 6)),
            queue_sizes=tuple(sorted(rng.sample((1, 2, 3, 5, 10, 100, 1000), k=rng.randint(1, 3)))),
            sticky_slots=_sticky_slots(rng),
            steps=steps_total,
            weights=_weights(rng),
        )

    @classmethod
    def scenario(cls, selector: str = AUTO_SPLIT_CONSISTENT, classic: bool = False, **values: object) -> SimOptions:
        """Fixed options for a hand-written scenario: Pulsar's defaults, no faults of its own."""
        defaults: dict[str, object] = dict(
            seed=0, sub_type=KEY_SHARED, selector=selector, classic=classic, allow_out_of_order=False,
            unblocking_interval_ms=0, look_ahead_per_consumer=2000, look_ahead_per_subscription=20000,
            max_unacked_per_consumer=0, max_unacked_per_subscription=0, replica_points=100,
            entries_per_ledger=50000, keys=1, key_skew=0.0, batch_probability=0.0,
            ordering_key_probability=0.0, keyless_probability=0.0, delayed_probability=0.0, delayed_tick_ms=1,
            max_consumers=100,
            queue_sizes=(1000,), sticky_slots=((1, 65535),), steps=0, weights=(("publish", 1.0),))
        defaults.update(values)
        return cls(**defaults)  # type: ignore[arg-type]

    @property
    def sticky(self) -> bool:
        """Key_Shared consumers claim hash ranges of their own (STICKY mode)."""
        return self.sub_type == KEY_SHARED and self.selector == STICKY

    @property
    def single_active(self) -> bool:
        return self.sub_type in SINGLE_ACTIVE

    def with_overrides(self, overrides: dict[str, str]) -> SimOptions:
        """A copy with some options forced (``--set classic=true``), to explore one kind of world."""
        values: dict[str, object] = {}
        for key, text in overrides.items():
            current = getattr(self, key)
            if isinstance(current, bool):
                values[key] = text.lower() in ("1", "true", "yes")
            elif isinstance(current, (int, float)):
                values[key] = type(current)(text)
            elif isinstance(current, str):
                values[key] = text
            else:
                raise ValueError(f"option {key} cannot be set from the command line")
        return replace(self, **values)  # type: ignore[arg-type]

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> SimOptions:
        values = json.loads(text)
        values.setdefault("sub_type", KEY_SHARED)  # schedules recorded before other types were simulated
        values["queue_sizes"] = tuple(values["queue_sizes"])
        values["sticky_slots"] = tuple(tuple(s) for s in values["sticky_slots"])
        values["weights"] = tuple(tuple(w) for w in values["weights"])
        return cls(**values)

    def describe(self) -> str:
        fields = asdict(self)
        fields.pop("weights")
        fields.pop("sticky_slots")
        return " ".join(f"{k}={v}" for k, v in fields.items())


def _pick_type(seed: int, types: tuple[tuple[str, float], ...]) -> str:
    if len(types) == 1:
        return types[0][0]
    rng = random.Random(f"type-{seed}")
    return rng.choices([t for t, _ in types], weights=[w for _, w in types])[0]


def _sticky_slots(rng: random.Random) -> tuple[tuple[int, int], ...]:
    """The hash space cut into a few slots; STICKY consumers claim whole slots."""
    cuts = sorted(rng.sample(range(2, 65535), k=rng.randint(1, 5)))
    starts = [1, *cuts]
    ends = [c - 1 for c in cuts] + [65535]
    return tuple(zip(starts, ends, strict=True))


def _weights(rng: random.Random) -> tuple[tuple[str, float], ...]:
    """How often each kind of step is picked; some worlds have many more faults than others."""
    churn = rng.choice((0.2, 1.0, 3.0))
    nacks = rng.choice((0.0, 0.5, 2.0))
    return (
        ("publish", rng.choice((4.0, 8.0, 15.0))),
        ("persist", rng.choice((2.0, 6.0))),
        ("join", 1.5 * churn),
        ("join-bad", 0.2),
        ("leave", 0.5 * churn),
        ("crash", 0.5 * churn),
        ("reconnect", 0.4 * churn),
        ("receive", 8.0),
        ("ack", rng.choice((3.0, 8.0))),
        ("ack-part", 0.5),
        ("nack", nacks),
        ("nack-all", nacks / 4),
        ("flow", 0.3),
        ("behave", rng.choice((0.3, 1.0))),
        ("tick", 2.0),
        ("expire", rng.choice((0.0, 0.0, 0.2))),
        # drawn after the Key_Shared-era weights so those keep their values for a seed
        ("ack-cum", rng.choice((0.0, 2.0))),
        ("seek", rng.choice((0.0, 0.1, 0.4))),
        ("reader-open", rng.choice((0.0, 0.3))),
        ("reader-receive", 3.0),
        ("reader-close", 0.1),
    )

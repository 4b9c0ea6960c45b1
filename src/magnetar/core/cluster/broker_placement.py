"""Which broker a bundle nobody owns goes to.

Deterministic on purpose: every broker that answers a lookup for an unowned bundle picks
the same broker from the same view (the least loaded by owned bundles, ties broken by
name), so concurrent lookups through different brokers send the client to one place.
Pulsar's load managers weigh CPU, memory and traffic; counting bundles is the first step,
and the ownership create in the store settles any race the views still leave.
"""

from __future__ import annotations

from collections.abc import Mapping


def select_broker(owned_bundles: Mapping[str, int]) -> str | None:
    """The registered broker owning the fewest bundles (ties: the smallest id), or ``None``
    when no broker is registered."""
    if not owned_bundles:
        return None
    return min(owned_bundles, key=lambda broker_id: (owned_bundles[broker_id], broker_id))

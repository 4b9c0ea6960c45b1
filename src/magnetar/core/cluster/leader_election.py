"""One leader among the registered brokers, and who decides where a free bundle goes.

Pulsar's ``LeaderElectionService``: the leader is the broker whose ephemeral node
``/loadbalance/leader`` (Pulsar's ``LeaderBroker``: ``brokerId``, ``serviceUrl``) the
store accepted; it goes with its session, and then every broker tries to create it again
and the store lets exactly one win. Only the leader places bundles nobody owns and sheds
load, so two brokers never decide differently about one bundle (apache/pulsar #13584):
a broker that is not the leader sends a lookup of a free bundle to the leader (a redirect
that is not authoritative, Pulsar's ``searchForCandidateBroker``), and the leader answers
with the broker it chose, authoritatively, which then takes the bundle.

A broker leads only through a create it made in its current session: a node that names
it but was made in an earlier session (whose answer was lost, or before a session loss)
is not its lead, and it waits for that node to go with its session like everyone else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Any

LEADER_PATH = "/loadbalance/leader"


class InvalidLeaderData(ValueError):
    """A leader node whose value is not a ``LeaderBroker``."""


@dataclass(frozen=True, slots=True)
class LeaderBroker:
    """The leader node's value (Pulsar's ``LeaderBroker``)."""

    broker_id: str
    service_url: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"brokerId": self.broker_id, "serviceUrl": self.service_url}

    @classmethod
    def from_json(cls, data: Any) -> LeaderBroker:
        if isinstance(data, bytes | str):
            try:
                data = json.loads(data)
            except ValueError as exc:
                raise InvalidLeaderData(f"leader node is not JSON: {exc}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("brokerId"), str) or not data["brokerId"]:
            raise InvalidLeaderData(f"leader node has no brokerId: {data!r}")
        url = data.get("serviceUrl")
        return cls(data["brokerId"], url if isinstance(url, str) else None)


class Election(Enum):
    #: no leader: try to create the node
    TRY_TO_LEAD = "try-to-lead"
    #: this broker's create in its current session won
    LEADING = "leading"
    #: another broker leads, or an earlier session of this one still holds the node
    FOLLOWING = "following"


def election_state(me: str, leader: LeaderBroker | None, created_in_this_session: bool) -> Election:
    """What a broker does given the leader node it sees."""
    if leader is None:
        return Election.TRY_TO_LEAD
    if leader.broker_id == me and created_in_this_session:
        return Election.LEADING
    return Election.FOLLOWING


@dataclass(frozen=True, slots=True)
class PlaceHere:
    """This broker is the leader: it chooses the broker for the free bundle."""


@dataclass(frozen=True, slots=True)
class AskLeader:
    """Send the client to the leader (not authoritative: the leader decides)."""

    leader: str


@dataclass(frozen=True, slots=True)
class TakeIt:
    """The leader sent the client here (an authoritative lookup): take the bundle."""


@dataclass(frozen=True, slots=True)
class NoLeader:
    message: str = "no load manager leader is elected yet; look up again"


def route_free_bundle(me: str, leader: str | None, leading: bool, authoritative: bool) \
        -> PlaceHere | AskLeader | TakeIt | NoLeader:
    """Who decides where a bundle nobody owns goes, for a lookup that reached ``me``."""
    if authoritative:
        return TakeIt()
    if leading:
        return PlaceHere()
    if leader is None or leader == me:
        return NoLeader()
    return AskLeader(leader)

"""The answer to a topic lookup, an admin request or a topic command on any broker.

Pulsar's ``NamespaceService.findBrokerServiceUrl`` and the admin's
``validateTopicOwnership``, as pure decisions over what the broker knows: its own state for
the bundle, the bundle's ownership node (read from the store or its watched cache) and the
registered brokers' loads. The shell does what the answer says:

* :class:`Connect` — this broker owns the bundle: answer LOOKUP ``Connect`` with its URL.
* :class:`Redirect` — another broker owns it (or the placement picked another broker):
  answer ``Redirect`` with that broker's URL for the client's listener, authoritative, so
  the target serves instead of redirecting again.
* :class:`Acquire` — nobody owns it and it comes here (placement, or an authoritative
  redirect): create the ownership node, take the topic over, then answer ``Connect``.
* :class:`NotReady` — ``ServiceNotReady``: the client looks up again after a back-off
  (ownership changing hands, no broker registered, the owner lacks the listener).

The admin REST answer is the same decision with web URLs: 307 to the owner's web service.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from magnetar.core.cluster.broker_placement import select_broker
from magnetar.core.cluster.bundle_ownership import BundleState
from magnetar.core.cluster.namespace_ephemeral_data import NamespaceEphemeralData

#: the HTTP status of an admin request served by another broker (Pulsar's)
TEMPORARY_REDIRECT = 307


@dataclass(frozen=True, slots=True)
class Connect:
    pass


@dataclass(frozen=True, slots=True)
class Redirect:
    broker_id: str
    service_url: str | None
    service_url_tls: str | None
    authoritative: bool = True


@dataclass(frozen=True, slots=True)
class Acquire:
    pass


@dataclass(frozen=True, slots=True)
class NotReady:
    message: str


LookupAnswer = Connect | Redirect | Acquire | NotReady


@dataclass(frozen=True, slots=True)
class AdminRedirect:
    """Answer an admin request with 307 to ``location`` (the owner's web URL + the path)."""

    location: str
    status: int = TEMPORARY_REDIRECT


AdminAnswer = Connect | AdminRedirect | Acquire | NotReady


@dataclass(frozen=True, slots=True)
class BundleView:
    """What a broker knows of a bundle when it answers."""

    #: this broker's own state for the bundle
    state: BundleState
    #: the ownership node's value, ``None`` when there is no node
    owner: NamespaceEphemeralData | None
    #: the node is this broker's under its current session (a create whose answer was lost)
    owner_session_is_ours: bool = False


@dataclass(frozen=True, slots=True)
class Placed:
    """Where the load manager's leader sends a free bundle (``authoritative``: the broker
    takes it; not: the broker is the leader, which decides)."""

    broker_id: str
    authoritative: bool = True


@dataclass(frozen=True, slots=True)
class RegisteredBroker:
    """A broker's registration (``/loadbalance/brokers/<id>``): how to reach it, and its load."""

    urls: NamespaceEphemeralData
    owned_bundles: int = 0


def decide_lookup(me: str, view: BundleView, brokers: Mapping[str, RegisteredBroker], listener: str | None = None,
                  authoritative: bool = False, placed: Placed | None = None) -> LookupAnswer:
    """The LOOKUP answer for a topic of the bundle ``view`` describes; a free bundle goes
    where ``placed`` says, or without it to the broker owning the fewest bundles."""
    if view.state is BundleState.OWNED:
        return Connect()
    if view.state is not BundleState.UNOWNED:
        return NotReady(f"bundle is {view.state} on {me}; look up again")
    if view.owner is not None:
        if view.owner.broker_id == me:
            if view.owner_session_is_ours:
                return Acquire()
            return NotReady(f"bundle is held by an earlier session of {me}; look up again")
        return _redirect(view.owner, listener)
    if authoritative:
        return Acquire()
    if placed is None:
        chosen = select_broker({broker_id: b.owned_bundles for broker_id, b in brokers.items()})
        placed = None if chosen is None else Placed(chosen)
    if placed is None:
        return NotReady("no broker is registered in the cluster")
    if placed.broker_id == me:
        return Acquire()
    if placed.broker_id not in brokers:
        return NotReady(f"broker {placed.broker_id} is not registered; look up again")
    return _redirect(brokers[placed.broker_id].urls, listener, placed.authoritative)


def _redirect(target: NamespaceEphemeralData, listener: str | None, authoritative: bool = True) -> LookupAnswer:
    urls = target.service_urls(listener)
    if urls is None or (urls.service_url is None and urls.service_url_tls is None):
        return NotReady(f"broker {target.broker_id} advertises no listener '{listener}'")
    return Redirect(target.broker_id, urls.service_url, urls.service_url_tls, authoritative)


def decide_admin(me: str, view: BundleView, brokers: Mapping[str, RegisteredBroker], path: str,
                 tls: bool = False, placed: Placed | None = None) -> AdminAnswer:
    """An admin request on a topic: serve it here, acquire first, or 307 to the web URL of
    the owner (or of the broker the placement picked) with the same path; a redirect the
    leader makes to the broker it placed the bundle on says ``authoritative=true``."""
    answer = decide_lookup(me, view, brokers, placed=placed, authoritative=_authoritative(path))
    if not isinstance(answer, Redirect):
        return answer
    target = view.owner if view.owner is not None else brokers[answer.broker_id].urls
    base = target.web_url(tls)
    if base is None:
        return NotReady(f"broker {answer.broker_id} advertises no web service URL")
    location = base.rstrip("/") + "/" + path.lstrip("/")
    if view.owner is None and placed is not None and placed.authoritative and not _authoritative(path):
        location += ("&" if "?" in path else "?") + "authoritative=true"
    return AdminRedirect(location)


def _authoritative(path: str) -> bool:
    return "authoritative=true" in path.partition("?")[2].split("&")


def check_serving(me: str, state: BundleState, topic_serving: bool) -> NotReady | None:
    """A command (PRODUCER, SUBSCRIBE, SEND ...) on a topic: ``None`` to go on, else the
    ``ServiceNotReady`` that sends the client back to lookup."""
    if state is BundleState.OWNED and topic_serving:
        return None
    return NotReady(f"Namespace bundle for the topic is not served by {me}. Please redo the lookup.")

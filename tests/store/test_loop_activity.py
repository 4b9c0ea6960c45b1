"""What tells a scrape that the event loop has clients' work: unread bytes on a watched
socket, a sync running or reported and not yet handled, replies not yet written."""

from __future__ import annotations

import asyncio
import socket

import pytest

from magnetar.server.loop_activity import LoopActivity


class Committer:
    def __init__(self) -> None:
        self.idle = True


def activity_of(committer: Committer | None = None, appends: list[int] | None = None) -> LoopActivity:
    waiting = appends if appends is not None else []
    return LoopActivity(committer or Committer(), lambda: bool(waiting))


@pytest.mark.timeout(10)
def test_a_watched_socket_with_unread_bytes_is_work_until_they_are_read() -> None:
    activity = activity_of()
    ours, theirs = socket.socketpair()
    with ours, theirs:
        activity.watch(ours.fileno(), "connection")
        assert not activity.busy()
        theirs.sendall(b"SEND")
        assert activity.busy()
        assert ours.recv(16) == b"SEND"
        assert not activity.busy()
        activity.unwatch(ours.fileno(), "connection")
        theirs.sendall(b"more")
        assert not activity.busy()
    activity.close()


@pytest.mark.timeout(10)
def test_only_the_watcher_of_a_descriptor_unwatches_it() -> None:
    """A socket's number is reused once it is closed: the connection that had it must not
    take the new one's watch away when it is told of its loss late."""
    activity = activity_of()
    ours, theirs = socket.socketpair()
    with ours, theirs:
        activity.watch(ours.fileno(), "new")
        activity.unwatch(ours.fileno(), "old")
        theirs.sendall(b"x")
        assert activity.busy()
    activity.close()


@pytest.mark.timeout(10)
def test_a_descriptor_left_in_the_set_by_a_closed_socket_is_watched_again() -> None:
    activity = activity_of()
    first, other = socket.socketpair()
    fd = first.fileno()
    activity.watch(fd, "first")
    first.close()
    other.close()
    again, theirs = socket.socketpair()
    with again, theirs:
        if again.fileno() != fd:
            pytest.skip("the descriptor was not reused")
        activity.watch(fd, "again")
        theirs.sendall(b"x")
        assert activity.busy()
    activity.close()


@pytest.mark.timeout(10)
def test_syncs_reports_replies_and_appends_are_work() -> None:
    committer, appends = Committer(), list[int]()
    activity = activity_of(committer, appends)
    committer.idle = False
    assert activity.busy()
    committer.idle = True
    activity.reports_posted += 1
    assert activity.busy()
    activity.reports_handled += 1
    activity.replies_waiting.add("connection")
    assert activity.busy()
    activity.replies_waiting.clear()
    appends.append(1)
    assert activity.busy()
    appends.clear()
    assert not activity.busy()
    activity.close()


@pytest.mark.timeout(10)
def test_a_wait_for_the_next_report_ends_when_one_is_handled_or_at_its_timeout() -> None:
    activity = activity_of()

    async def scenario() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        waiting = asyncio.ensure_future(activity.next_settled(10.0))
        await asyncio.sleep(0)
        loop.call_soon(activity.settled)
        await asyncio.wait_for(waiting, 5.0)
        settled = waiting.done()
        started = loop.time()
        await activity.next_settled(0.01)
        return settled, loop.time() - started >= 0.009

    assert asyncio.run(scenario()) == (True, True)
    activity.close()

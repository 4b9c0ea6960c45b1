"""The one poll-with-a-deadline that tests and benches share."""

from __future__ import annotations

import itertools

import pytest

from magnetar.testing.polling import NotReached, wait_until


def test_returns_the_first_truthy_value() -> None:
    calls = itertools.count()
    assert wait_until(lambda: next(calls) >= 3 and "ready", 5, interval_s=0) == "ready"


def test_fails_naming_what_was_awaited() -> None:
    with pytest.raises(NotReached, match="the receipt not reached within 0.05 s"):
        wait_until(lambda: None, 0.05, "the receipt", interval_s=0.01)


def test_a_miss_is_an_assertion_so_tests_fail_on_it() -> None:
    assert issubclass(NotReached, AssertionError)

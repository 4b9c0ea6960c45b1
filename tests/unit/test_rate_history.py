"""The broker's rate history samples: rates from counters between two walks over the topics."""

from __future__ import annotations

from magnetar.admin.rate_history import Totals, add, sample_between


def test_samples_count_what_went_by_and_never_go_negative() -> None:
    before = Totals(msgs_in=100, bytes_in=1000, msgs_out=50, bytes_out=500, topics=2)
    after = Totals(msgs_in=150, bytes_in=1500, msgs_out=20, bytes_out=200, topics=3, backlog=7)
    sample = sample_between(before, after, 5.0, 1234)
    assert (sample.msgRateIn, sample.msgThroughputIn) == (10.0, 100.0)
    assert (sample.msgRateOut, sample.msgThroughputOut) == (0.0, 0.0)  # a consumer left: not negative
    assert (sample.numTopics, sample.msgBacklog, sample.timestamp) == (3, 7, 1234)
    assert sample_between(after, after, 0, 1).msgRateIn == 0.0
    assert add(before, after) == Totals(250, 2500, 70, 700, 5, 0, 0, 0, 7, 0)

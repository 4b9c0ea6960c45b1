"""The topic list's kept orders: a page read off a kept order is the page of a full sort of
the same figures, whatever the ties, the filter, the page and the slice size."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from magnetar.admin.topic_figures import FIELDS, NONE, Figures, combine
from magnetar.admin.topic_order import KeptOrders, drain, order_steps, page_steps, values_steps


@dataclass(frozen=True)
class Row:
    members: tuple[str, ...]


def full_sort_page(values: list[float], chosen: list[int] | None, offset: int, limit: int,
                   descending: bool) -> list[int]:
    """What the topic list answered before orders were kept: every row sorted at once."""
    every = range(len(values)) if chosen is None else chosen
    ordered = sorted(every, key=lambda i: (values[i], i), reverse=descending)
    return ordered[offset:offset + limit]


# few distinct values, so that ties are the rule (most topics of a broker are idle)
values_lists = st.lists(st.sampled_from([0.0, 0.0, 0.0, 1.0, 2.5, 7.0, 1e9]), max_size=200)


@given(values=values_lists, slice_size=st.integers(1, 50), offset=st.integers(0, 220),
       limit=st.integers(1, 60), descending=st.booleans(), data=st.data())
def test_a_page_of_a_kept_order_is_the_page_of_a_full_sort(values: list[float], slice_size: int, offset: int,
                                                           limit: int, descending: bool, data: st.DataObject) -> None:
    chosen = data.draw(st.none() | st.lists(st.integers(0, max(0, len(values) - 1)), unique=True)
                       .map(sorted) if values else st.none())
    order = drain(order_steps(values, slice_size))
    assert sorted(order) == list(range(len(values)))
    page = drain(page_steps(order, chosen, offset, limit, descending, slice_size))
    assert page == full_sort_page(values, chosen, offset, limit, descending)


@given(st.dictionaries(st.sampled_from(["a", "b", "c", "d", "e"]),
                       st.builds(Figures, st.floats(0, 1e6), st.floats(0, 1e6), st.floats(0, 1e6), st.floats(0, 1e6),
                                 st.integers(0, 10**6), st.integers(0, 10**9), st.integers(0, 5), st.integers(0, 5),
                                 st.integers(0, 5))),
       st.sampled_from(FIELDS), st.integers(1, 3))
def test_row_values_fold_partitions_and_count_unloaded_topics_as_zero(figures: dict[str, Figures], field: str,
                                                                       slice_size: int) -> None:
    rows = [Row(("a",)), Row(("b", "c", "x")), Row(("x",)), Row(("d", "e"))]
    values = drain(values_steps(rows, figures, field, slice_size))
    expected = [getattr(combine(figures.get(m, NONE) for m in row.members), field) for row in rows]
    assert values == expected
    assert values[2] == 0


def test_combine_sums_partitions_but_counts_subscriptions_once() -> None:
    one = Figures(1.0, 2.0, 10.0, 20.0, 3, 100, 1, 2, 1)
    two = Figures(0.5, 0.0, 5.0, 0.0, 4, 50, 0, 2, 2)
    assert combine([one, two]) == Figures(1.5, 2.0, 15.0, 20.0, 7, 150, 1, 2, 3)
    assert combine([]) == NONE


def test_kept_orders_are_built_once_per_sample_and_list() -> None:
    rows = [Row((name,)) for name in "abcd"]

    async def scenario() -> None:
        orders = KeptOrders()
        figures = {"a": Figures(backlog=3), "c": Figures(backlog=9)}
        first = await orders.order("backlog", rows, figures, 1)
        assert first == [1, 3, 0, 2]
        # the same list and sample: the order built before, even if figures were changed in place
        figures["b"] = Figures(backlog=100)
        assert await orders.order("backlog", rows, figures, 1) is first
        assert await orders.order("backlog", rows, figures, 2) == [3, 0, 2, 1]  # a new sample
        assert await orders.order("backlog", list(rows), {}, 2) == [0, 1, 2, 3]  # a new list of topics
        assert await orders.order("msgRateIn", rows, figures, 2) == [0, 1, 2, 3]
    asyncio.run(scenario())

"""The workshop's shop (rstream.story): seeded, order-independent, and as the notebooks describe it:
skewed customers, bounded disorder, payments after their orders, late views, unparseable records."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstream.story import CREDIT_MOVES, CUSTOMERS, PAGES, PAYMENT_DELAY_MS, PRODUCTS, Shop

SEEDS = st.integers(0, 2**32)


@settings(deadline=None, max_examples=30)
@given(seed=SEEDS)
def test_a_seed_gives_the_same_data_whatever_was_asked_before(seed: int) -> None:
    first = Shop(seed)
    views = first.views(0, 10_000, 20, disorder_ms=1_500)
    reviews = first.reviews(10)
    again = Shop(seed)
    assert again.reviews(10) == reviews  # asked in the other order
    assert again.views(0, 10_000, 20, disorder_ms=1_500) == views
    assert again.reviews(5, start=5) == reviews[5:]  # a continuation is the same sentences


def test_two_seeds_give_two_shops() -> None:
    assert Shop(1).reviews(20) != Shop(2).reviews(20)
    assert Shop(1).views(0, 60_000, 50) != Shop(2).views(0, 60_000, 50)


@settings(deadline=None, max_examples=50)
@given(seed=SEEDS, start=st.integers(0, 10**6), span=st.integers(1, 10**5), n=st.integers(0, 200),
       disorder=st.integers(0, 5_000))
def test_views_lie_in_their_range_and_are_out_of_order_by_less_than_the_disorder(
        seed: int, start: int, span: int, n: int, disorder: int) -> None:
    views = Shop(seed).views(start, start + span, n, disorder_ms=disorder)
    assert len(views) == n
    assert all(start <= v["ts"] < start + span and v["user"] in CUSTOMERS and v["page"] in PAGES for v in views)
    highest = -1
    for v in views:  # how far each view is behind the latest time delivered before it
        assert highest - v["ts"] < max(disorder, 1)
        highest = max(highest, v["ts"])
    if disorder == 0:
        assert [v["ts"] for v in views] == sorted(v["ts"] for v in views)


def test_customers_are_skewed_as_the_notebooks_say() -> None:
    counts = Counter(v["user"] for v in Shop().views(0, 10**6, 5_000))
    ranked = [u for u, _ in counts.most_common()]
    assert ranked[:2] == ["ann", "bob"]
    assert counts["ann"] > 5 * counts[CUSTOMERS[-1]]
    assert set(counts) == set(CUSTOMERS)


@settings(deadline=None, max_examples=40)
@given(seed=SEEDS, cuts=st.lists(st.integers(1, 120_000), max_size=5))
def test_the_orders_are_one_book_however_its_time_is_cut(seed: int, cuts: list[int]) -> None:
    whole = Shop(seed).orders(0, 120_000)
    assert [o["order"] for o in whole] == [f"o{i}" for i in range(1, len(whole) + 1)]  # from the opening
    assert [o["ts"] for o in whole] == sorted(o["ts"] for o in whole)
    assert all(0 < o["ts"] < 120_000 and o["amount"] % PRODUCTS[o["product"]] == 0 for o in whole)
    shop = Shop(seed)  # asked in pieces, the latest first: the same orders, the same ids
    edges = sorted({0, *cuts, 120_000})
    pieces = [shop.orders(lo, hi) for lo, hi in reversed(list(zip(edges, edges[1:])))]
    assert [o for piece in reversed(pieces) for o in piece] == whole
    for piece in pieces:  # what a caller does with the orders it got is not the shop's book
        for o in piece:
            o["amount"] = -1
    assert shop.orders(0, 120_000) == whole


@settings(deadline=None, max_examples=40)
@given(seed=SEEDS, lo=st.integers(0, 100_000))
def test_payments_are_one_book_too_and_come_after_their_orders(seed: int, lo: int) -> None:
    shop = Shop(seed)
    orders = shop.orders(0, 120_000)
    by_id = {o["order"]: o for o in orders}
    payments = shop.payments(orders)
    assert len({p["order"] for p in payments}) == len(payments)
    for p in payments:
        order = by_id[p["order"]]
        assert order["ts"] + 500 <= p["ts"] <= order["ts"] + PAYMENT_DELAY_MS and p["amount"] == order["amount"]
    assert [p["ts"] for p in payments] == sorted(p["ts"] for p in payments)
    some = shop.orders(lo, lo + 20_000)  # an order is paid (or not) alike whichever list it came in
    assert shop.payments(some) == [p for p in payments if p["order"] in {o["order"] for o in some}]


def test_the_shop_takes_about_fifteen_orders_a_minute_and_one_in_five_is_never_paid() -> None:
    orders = Shop().orders(0, 4_000 * 1_000)
    assert 900 <= len(orders) <= 1_100
    assert 150 <= len(orders) - len(Shop().payments(orders)) <= 250


def test_the_orders_the_notebooks_quote_are_the_book_s() -> None:
    """The notebooks' text quotes these (05: o2 paid across a window edge, o11 never paid)."""
    first_minute = Shop().orders(0, 60_000)
    assert [o["order"] for o in first_minute] == [f"o{i}" for i in range(1, 12)]
    paid = {p["order"]: p["ts"] for p in Shop().payments(first_minute)}
    o2 = first_minute[1]
    assert (o2["ts"], paid["o2"]) == (19_959, 20_578) and "o11" not in paid
    assert [o["order"] for o in Shop().orders(60_000, 120_000)] == [f"o{i}" for i in range(12, 24)]


def test_traffic_is_sorted_by_arrival_and_a_share_of_it_is_late() -> None:
    traffic = Shop().traffic(servers=3, duration_ms=60_000, every_ms=500, late_share=0.1)
    assert len(traffic) == 3 * 120
    assert traffic == sorted(traffic, key=lambda v: (v["arrival"], v["server"]))
    delays = [v["arrival"] - v["ts"] for v in traffic]
    assert all(d in (0, 100, 200, 300, 500, 800, 1_500, 3_000, 6_000, 9_000) for d in delays)
    late = sum(d >= 1_500 for d in delays)
    assert 10 <= late <= 60  # about a tenth of 360
    for server in range(3):
        assert sorted(v["ts"] for v in traffic if v["server"] == server) == list(range(0, 60_000, 500))


def test_reviews_are_lower_case_words_of_the_shop() -> None:
    reviews = Shop().reviews(300)
    words = Counter(w for r in reviews for w in r.split())
    assert all(r == r.lower() and r == " ".join(r.split()) for r in reviews)
    assert set(PRODUCTS) <= set(words)
    assert sum(words[p] for p in PRODUCTS) == 300  # one product per review


def test_profiles_and_credit() -> None:
    shop = Shop()
    assert [p["user"] for p in shop.profiles()] == list(CUSTOMERS)
    assert [p["tier"] for p in shop.profiles()].count("gold") == 3
    moves = shop.credit(50)
    assert moves[10:] == shop.credit(40, start=10)
    assert all(m["amount"] in CREDIT_MOVES and m["user"] in CUSTOMERS for m in moves)
    with pytest.raises(ValueError, match="not the shop's customers"):
        shop.profiles(["zed"])


def test_malformed_records_cannot_be_read_as_json() -> None:
    for i in range(4):
        body = Shop().malformed(i)
        with pytest.raises(ValueError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            json.loads(body.decode("utf-8"))


@pytest.mark.parametrize("call, message", [
    (lambda s: s.views(10, 10, 3), "end_ms must be after start_ms"),
    (lambda s: s.reviews(-1), "number of records must be an int"),
    (lambda s: s.orders(0, 0), "0 <= start_ms < end_ms"),
    (lambda s: s.payments([{"order": "o1"}]), "not one of the shop's orders"),
    (lambda s: s.traffic(late_share=-0.1), "a share is between 0 and 1"),
])
def test_bad_arguments_say_what_is_wrong(call, message) -> None:
    with pytest.raises(ValueError, match=message):
        call(Shop())
    with pytest.raises(TypeError, match="the seed must be an int"):
        Shop("7")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"orders\(0, 60_000\) for its first minute"):
        Shop().orders(0, 6e4)  # type: ignore[arg-type]

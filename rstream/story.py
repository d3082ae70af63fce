"""One online shop, seeded: the data of the workshop series (notebooks 00 to 07).

    from rstream.story import Shop
    shop = Shop()                        # seed 2026: the series' shop
    shop.reviews(3)                      # ['the lamp came fast and works great', ...]
    shop.views(0, 10_000, 6)             # page views, in the order they reach the broker
    orders = shop.orders(0, 30_000)      # the shop's orders of its first 30 s: one order book
    shop.payments(orders)                # most paid a few seconds later, some never

Every notebook continues the same story: the shop's customers (``CUSTOMERS``, a few of them far
busier than the rest), its pages and products, the reviews they write (01's word count), their page
views as two or three web servers deliver them, late and out of order (02, 03), store credit and
unpaid orders (04), orders, payments and profiles to join (05), orders counted per product on a
cluster and on RocketMQ (06, 07), and now and then a record nobody can parse (``malformed``).
Neither RIP-58 nor RocketMQ Streams defines a data set: this is rstream's, after
apache/flink-training, whose labs all read one generated stream of New York taxi rides and their
fares.

The shop keeps one clock: times are milliseconds since it opened, and every notebook's data of a span
of that time is the same data. Its orders are one book (``orders(start_ms, end_ms)``: 05's first
minute is 06's and 07's, with the same ids, and the start of 04's first two), and so are their
payments.

Each method draws from a generator of its own, seeded by the shop's seed, the method's name and its
arguments (an order, and its payment, by the order's number): a notebook gets the same data whatever else it asked for before, and in any order
(flink-training's ``DataGenerator`` does the same: a ride's fields come from a generator seeded by
the ride's id). Times
are milliseconds of event time from 0, so they read easily; each event has its time in ``"ts"``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

#: The customers, busiest first: activity falls off as 1/rank (a Zipf law), so "ann" and "bob" make
#: most of the traffic and a few keys are hot, as in real shops.
CUSTOMERS = ("ann", "bob", "cid", "dan", "eve", "fay", "gus", "hal", "ivy", "jon")

#: Where each customer lives: what an enrichment join adds to a page view.
COUNTRIES = {"ann": "DE", "bob": "FR", "cid": "US", "dan": "CN", "eve": "BR", "fay": "DE", "gus": "US",
             "hal": "IN", "ivy": "FR", "jon": "US"}

#: The shop's pages, most viewed first (again 1/rank).
PAGES = ("home", "product", "search", "cart", "checkout")

#: Products and their prices (whole euros, so sums read easily).
PRODUCTS = {"mug": 12, "lamp": 45, "kettle": 30, "chair": 90, "rug": 60, "clock": 25}

#: The shop's order book: one order every 4 s on average (15 a minute), from its opening at 0.
ORDER_GAP_MS = 4_000

#: Payments: each 0.5 to 6 s after its order; one order in five is never paid.
PAYMENT_DELAY_MS, UNPAID_SHARE = 6_000, 0.2

#: What a store credit account sees: refunds and vouchers in, purchases out (04's balances).
CREDIT_MOVES = (-50, -20, -5, 10, 25, 100)

_OPENINGS = ("the {p}", "my {p}", "this {p}", "a {p}")
_VERDICTS = ("came fast", "came late", "works great", "looks great", "broke", "is fine", "was cheap",
             "was a gift", "came broken")
_ENDINGS = ("", "and works great", "but came late", "and looks great", "but is small", "and was cheap",
            "so it went back", "and we love it")


def _zipf(n: int) -> list[float]:
    return [1 / rank for rank in range(1, n + 1)]


class Shop:
    """The shop's data, deterministic for a ``seed`` (see the module's docstring)."""

    def __init__(self, seed: int = 2026) -> None:
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"Shop(seed={seed!r}): the seed must be an int, such as Shop(seed=7)")
        self.seed = seed
        self._book: list[dict[str, Any]] = []  # the order book as far as it was drawn

    def __repr__(self) -> str:
        return f"Shop(seed={self.seed})"

    def _rng(self, *what: Any) -> random.Random:
        return random.Random(repr((self.seed, *what)))

    @staticmethod
    def _customer(rng: random.Random, users: Sequence[str] = CUSTOMERS) -> str:
        return rng.choices(users, weights=_zipf(len(users)))[0]

    # ------------------------------------------------------------------------------------ people

    def profiles(self, users: Sequence[str] = CUSTOMERS) -> list[dict[str, Any]]:
        """One profile per customer: ``{"user", "country", "tier"}`` (tier "gold" for the busiest
        three, "silver" for the rest)."""
        unknown = [u for u in users if u not in COUNTRIES]
        if unknown:
            raise ValueError(f"profiles({list(users)!r}): {unknown} are not the shop's customers {CUSTOMERS}")
        return [{"user": u, "country": COUNTRIES[u], "tier": "gold" if CUSTOMERS.index(u) < 3 else "silver"}
                for u in users]

    def reviews(self, n: int, start: int = 0) -> list[str]:
        """``n`` short product reviews, lower case, words separated by single spaces: the text that
        01's word count reads. ``start`` continues the sequence (``reviews(5, start=5)`` are the
        five after ``reviews(5)``)."""
        _check_count("reviews", n)
        out = []
        for i in range(start, start + n):
            rng = self._rng("review", i)
            product = rng.choices(list(PRODUCTS), weights=_zipf(len(PRODUCTS)))[0]
            words = [rng.choice(_OPENINGS).format(p=product), rng.choice(_VERDICTS), rng.choice(_ENDINGS)]
            out.append(" ".join(w for w in words if w))
        return out

    # -------------------------------------------------------------------------------- page views

    def views(self, start_ms: int, end_ms: int, n: int, disorder_ms: int = 0,
              users: Sequence[str] = CUSTOMERS, pages: Sequence[str] = PAGES) -> list[dict[str, Any]]:
        """``n`` page views ``{"user", "page", "ts"}`` whose times lie in ``[start_ms, end_ms)``, in the
        order a web server delivers them: a view is sent up to ``disorder_ms`` after its time (a phone
        on a slow network), so the times are out of order by less than ``disorder_ms``."""
        _check_count("views", n)
        if end_ms <= start_ms:
            raise ValueError(f"views({start_ms}, {end_ms}, ...): end_ms must be after start_ms")
        rng = self._rng("views", start_ms, end_ms, n, disorder_ms, tuple(users), tuple(pages))
        times = sorted(rng.randrange(start_ms, end_ms) for _ in range(n))
        out = []
        for t in times:
            ts = max(start_ms, t - rng.randrange(disorder_ms)) if disorder_ms > 0 else t
            out.append({"user": self._customer(rng, users), "page": rng.choices(pages, weights=_zipf(len(pages)))[0],
                        "ts": ts})
        return out

    def traffic(self, servers: int = 3, duration_ms: int = 60_000, every_ms: int = 500,
                late_share: float = 0.1) -> list[dict[str, Any]]:
        """The page views of ``servers`` web servers over ``duration_ms``, one per server every
        ``every_ms``, as the broker receives them over a shaky network:
        ``{"server", "user", "page", "ts", "arrival"}`` sorted by ``arrival`` (then server). Most views
        are delayed by at most 0.8 s; ``late_share`` of them by 1.5 to 9 s."""
        if not 0 <= late_share <= 1:
            raise ValueError(f"traffic(late_share={late_share!r}): a share is between 0 and 1")
        rng = self._rng("traffic", servers, duration_ms, every_ms, late_share)
        out = []
        for server in range(servers):
            for ts in range(0, duration_ms, every_ms):
                slow = rng.random() < late_share
                delay = rng.choice([1_500, 3_000, 6_000, 9_000] if slow else [0, 100, 200, 300, 500, 800])
                out.append({"server": server, "user": self._customer(rng),
                            "page": rng.choices(PAGES, weights=_zipf(len(PAGES)))[0], "ts": ts, "arrival": ts + delay})
        out.sort(key=lambda v: (v["arrival"], v["server"]))
        return out

    # ---------------------------------------------------------------------- orders and payments

    def orders(self, start_ms: int, end_ms: int) -> list[dict[str, Any]]:
        """The shop's orders ``{"order", "user", "product", "amount", "ts"}`` placed in ``[start_ms, end_ms)``,
        in time order. The shop has one order book: orders come one after another from its opening at 0,
        about one every ``ORDER_GAP_MS`` on average, numbered ``o1``, ``o2``, ... from there, so
        ``orders(0, 30_000) + orders(30_000, 60_000) == orders(0, 60_000)`` and an order has the same id,
        customer and time in every notebook that asks for its minute."""
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in (start_ms, end_ms)):
            raise TypeError(f"orders({start_ms!r}, {end_ms!r}): the times are ints of milliseconds since the "
                            "shop opened, such as orders(0, 60_000) for its first minute")
        if start_ms < 0 or end_ms <= start_ms:
            raise ValueError(f"orders({start_ms}, {end_ms}): a span of the shop's time, 0 <= start_ms < end_ms")
        book = self._order_book(end_ms)
        return [dict(o) for o in book if start_ms <= o["ts"] < end_ms]

    def _order_book(self, until_ms: int) -> list[dict[str, Any]]:
        # the book so far, drawn on as far as asked: order i's gap and fields come from a generator of
        # its own (seeded by the shop's seed and i), so the book is the same however far it was drawn
        book = self._book
        ts = book[-1]["ts"] if book else 0
        while ts < until_ms:
            i = len(book) + 1
            rng = self._rng("order", i)
            ts += max(100, round(rng.expovariate(1 / ORDER_GAP_MS)))
            product = rng.choice(list(PRODUCTS))
            quantity = rng.choice([1, 1, 1, 2, 3])
            book.append({"order": f"o{i}", "user": self._customer(rng), "product": product,
                         "amount": PRODUCTS[product] * quantity, "ts": ts})
        return book

    def payments(self, orders: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The payments ``{"order", "amount", "ts"}`` of ``orders``, in time order. Like the orders they are
        one book: an order is paid 0.5 to ``PAYMENT_DELAY_MS`` after it, or (about one in
        ``round(1 / UNPAID_SHARE)``) never, the same in every notebook."""
        out = []
        for o in orders:
            if not isinstance(o, dict) or not {"order", "amount", "ts"} <= set(o):
                raise ValueError(f"payments(...): {o!r} is not one of the shop's orders; pass what "
                                 "shop.orders(start_ms, end_ms) returned")
            rng = self._rng("payment", o["order"])
            if rng.random() >= UNPAID_SHARE:
                out.append({"order": o["order"], "amount": o["amount"],
                            "ts": o["ts"] + rng.randrange(500, PAYMENT_DELAY_MS + 1)})
        out.sort(key=lambda p: (p["ts"], p["order"]))
        return out

    def credit(self, n: int, start: int = 0, users: Sequence[str] = CUSTOMERS) -> list[dict[str, Any]]:
        """``n`` store credit moves ``{"user", "amount"}`` (``CREDIT_MOVES``: refunds, vouchers,
        purchases); ``start`` continues the sequence."""
        _check_count("credit", n)
        out = []
        for i in range(start, start + n):
            rng = self._rng("credit", i, tuple(users))
            out.append({"user": self._customer(rng, users), "amount": rng.choice(CREDIT_MOVES)})
        return out

    # ------------------------------------------------------------------------------ bad records

    def malformed(self, i: int = 0) -> bytes:
        """A record no JSON reader can parse (the ``i``-th of a few kinds): a view cut off in the
        middle, one in Latin-1 rather than UTF-8, an empty body, or plain text."""
        kinds = [json.dumps({"user": "ann", "page": "cart", "ts": 1_000})[:21].encode(),
                 '{"user": "zoë", "page": "home", "ts": 2000}'.encode("latin-1"),
                 b"",
                 b"page view: ann on home"]
        return kinds[i % len(kinds)]


def _check_count(what: str, n: Any) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"{what}({n!r}, ...): the number of records must be an int >= 0")

"""``table.to_stream()``, a table's changelog, run in this process (no Spark) against the plain
reference on generated updates and deletes over a few keys: every update once, as a keyed record at
its data time, a delete as None, each key's in one queue and in the order of each source queue; the
last one per key is the table a plain Python dict gives; it is drawn in both graphs."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rstream import EmbeddedBroker
from rstream.runtime.inprocess import InProcessJob
from tests.support.tables import KEYS, changelog, changelog_job

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
_RUNS = itertools.count()
updates = st.lists(st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.integers(0, 99)),
                             st.integers(-3000, 3000)), min_size=1, max_size=50)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ups=updates, queues=st.integers(1, 3), per_batch=st.sampled_from([2, 7, 1000]))
def test_the_changelog_is_every_update_in_order_per_key(tmp_path: Path, ups: list[tuple[str, Any, int]], queues: int,
                                                       per_batch: int) -> None:
    root = tmp_path / f"run-{next(_RUNS)}"
    broker = EmbeddedBroker(root / "broker")
    broker.create_topic("prices", queues=queues)
    # unique data times (out of order), so each record is known by its key and data time
    records = [{"k": k, "v": v, "ts": T0 + i * 10_000 + jitter} for i, (k, v, jitter) in enumerate(ups)]
    broker.send_batch("prices", [json.dumps(r) for r in records])
    job = InProcessJob(changelog_job("changes").build(), broker, root / "job", {"max_records_per_queue": per_batch})
    job.run_until_idle()
    got = changelog(broker)
    stored = {q: [json.loads(m.body) for m in broker.read("prices", q)] for q in range(queues)}
    want: dict[str, list[tuple[int, Any]]] = {}
    for records_of_queue in stored.values():
        for r in records_of_queue:
            want.setdefault(r["k"], []).append((r["ts"], r["v"]))
    assert {k: sorted(v, key=repr) for k, v in got.items()} == {k: sorted(v, key=repr) for k, v in want.items()}
    for q, records_of_queue in stored.items():  # each source queue's updates of a key keep their order
        for key in got:
            mine = [(r["ts"], r["v"]) for r in records_of_queue if r["k"] == key]
            times = {t for t, _v in mine}
            assert [u for u in got[key] if u[0] in times] == mine, (q, key)
    if queues == 1:  # one order: the table a plain dict keeps, deletes and all
        table: dict[str, Any] = {}
        for r in records:
            if r["v"] is None:
                table.pop(r["k"], None)
            else:
                table[r["k"]] = r["v"]
        assert {k: v[-1][1] for k, v in got.items() if v[-1][1] is not None} == table


def test_the_changelog_is_drawn_in_both_graphs_with_its_shuffle() -> None:
    b = changelog_job("drawn")
    [table] = [n for n in b.graph.nodes if n.kind == "table"]
    stream = [n for n in b.graph.nodes if n.kind == "to_stream"]
    assert [n.name for n in stream] == ["TO_STREAM-6"] and stream[0] in table.children
    topo = b.build()
    assert 'tooltip="TO_STREAM-6"' in topo.logical_dot()
    text = topo.describe()
    assert "drawn-ROCKETMQ-TO_STREAM-6-shuffleTopic" in text and "to_stream        TO_STREAM-6" in text
    assert "TO_STREAM-6" in topo.real_dot()


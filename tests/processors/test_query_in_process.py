"""``job.query(operator, key)`` in this process (no Spark), against plain Python over the same records:
a keyed count's value of every key, and a window count's open windows, which with the windows that
fired make up exactly the reference's windows (no record is later than the allowed lateness here)."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rstream import EmbeddedBroker, JsonDeserializer, JsonSerializer, StreamBuilder, Time, TumblingWindow
from rstream.runtime.inprocess import InProcessJob
from rstream.settings import JobError
from rstream.time.windows import WindowKey
from tests.support.windows import produce, results

_RUNS = itertools.count()
MINUTE = 60_000
T0 = 1_700_000_000_000
#: Generated events: a user and a time up to 5 minutes in, in any order (at most 10 minutes apart).
EVENTS = st.lists(st.tuples(st.sampled_from(["u0", "u1", "u2", "u3"]), st.integers(0, 5 * MINUTE)),
                  min_size=1, max_size=80)


def _job(tmp_path: Path, events: list[tuple[str, int]]) -> tuple[InProcessJob, EmbeddedBroker, str, str]:
    root = tmp_path / f"run-{next(_RUNS)}"
    broker = EmbeddedBroker(root / "broker")
    produce(broker, "clicks", [{"user": u, "ts": T0 + t} for u, t in events])
    b = StreamBuilder(f"query-{next(_RUNS)}", shuffle_queues=3)
    users = b.source("clicks", JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(lambda e: e["user"])
    users.count().to_rstream().sink("counts", JsonSerializer(with_key=True))
    users.window(TumblingWindow(Time.minutes(1))).count().to_rstream().sink("results", JsonSerializer(with_key=True))
    topology = b.build()
    count = next(n.name for n in topology.nodes if n.stateful and not n.windowed)
    window = next(n.name for n in topology.nodes if n.windowed)
    # no record is late (the lateness spans the whole input): what fired plus what is open is every window
    job = InProcessJob(topology, broker, root / "job", {"allowed_lateness_ms": 10 * MINUTE})
    job.run_until_idle(fire_idle=False)
    return job, broker, count, window


@pytest.mark.unit
@given(events=EVENTS)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_query_answers_each_keys_count_and_its_open_windows(tmp_path: Path, events: list[tuple[str, int]]) -> None:
    job, broker, count, window = _job(tmp_path, events)
    expected = Counter(u for u, _t in events)
    assert {u: job.query(count, u) for u in ["u0", "u1", "u2", "u3"]} == {u: expected.get(u) for u in ["u0", "u1", "u2", "u3"]}

    starts = [(u, T0 + t - (T0 + t) % MINUTE) for u, t in events]  # windows align to the epoch
    reference = Counter((u, start, start + MINUTE) for u, start in starts)
    fired = results(broker)
    open_windows: dict[tuple[Any, int, int], Any] = {}
    for user in ["u0", "u1", "u2", "u3"]:
        answer = job.query(window, user) or {}
        assert all(w.key == user for w in answer) and list(answer) == sorted(answer, key=lambda w: w.start)
        open_windows.update({tuple(w): n for w, n in answer.items()})
    assert not open_windows.keys() & fired.keys()  # a window is open or fired, never both
    assert {**open_windows, **fired} == dict(reference)


@pytest.mark.unit
def test_query_of_a_key_never_seen_is_none_and_a_bad_operator_names_the_right_ones(tmp_path: Path) -> None:
    job, _broker, count, window = _job(tmp_path, [("u0", 0), ("u0", 3 * MINUTE)])
    assert job.query(count, "nobody") is None and job.query(window, "nobody") is None
    assert job.query(count, "u0") == 2
    first = T0 - 20_000  # the minute that holds T0
    assert job.query(window, "u0") == {WindowKey("u0", first, first + MINUTE): 1,  # both open: the watermark
                                       WindowKey("u0", first + 3 * MINUTE, first + 4 * MINUTE): 1}  # is 10 min back
    with pytest.raises(JobError, match=f"no stateful operator 'MAP-9'.*{count}, {window}"):
        job.query("MAP-9", "u0")

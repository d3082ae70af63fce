"""Stateless operators and bad records in this process (no Spark): a chain of map, flat_map, filter
and foreach equals the same Python functions applied in a loop; a record a function raises on goes
to the dead-letter topic and the others go on; and none of this loads pyspark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rstream import EmbeddedBroker, StreamBuilder, TextDeserializer, TextSerializer
from rstream.processors.base import dead_letter_row
from rstream.runtime.inprocess import InProcessJob
from tests.support.inprocess import run

SENTENCES = st.lists(st.text("ab c", min_size=0, max_size=12), min_size=1, max_size=30)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sentences=SENTENCES, queues=st.integers(1, 3))
def test_a_stateless_chain_equals_a_python_loop(tmp_path: Path, sentences: list[str], queues: int) -> None:
    root = tmp_path / f"q{queues}-{abs(hash(tuple(sentences)))}"
    broker = EmbeddedBroker(root / "broker")
    broker.create_topic("in", queues=queues)
    broker.send_batch("in", sentences)
    seen: list[str] = []
    b = StreamBuilder("chain")
    (b.source("in", TextDeserializer()).flat_map(str.split).filter(lambda w: "a" in w).map(str.upper)
     .foreach(seen.append).sink("out", TextSerializer()))
    run(b, broker, root)
    stored = [m.body.decode() for q in range(queues) for m in broker.read("in", q)]
    expected = [w.upper() for s in stored for w in s.split() if "a" in w]
    assert sorted(m.body.decode() for m in broker.read("out")) == sorted(expected)
    assert sorted(seen) == sorted(expected)  # foreach ran in this process, once per record


def test_a_raising_function_sends_its_record_to_the_dead_letter_topic(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("in", queues=1)
    broker.send_batch("in", ["1", "2", "x", "4"])
    b = StreamBuilder("dlq")
    b.source("in", TextDeserializer()).map(int).key_by(lambda n: n % 2).count().to_rstream().sink("out")
    job = run(b, broker, tmp_path)
    [letter] = [dead_letter_row(m) for m in broker.read("dlq-dlq")]
    assert (letter["operator"], letter["offset"], letter["body"]) == ("MAP-2", 2, b"x")
    assert "ValueError" in letter["error"] and letter["batch_id"] == 0
    assert sorted(m.body.decode() for m in broker.read("out")) == ["0:1", "0:2", "1:1"]
    assert sum(info["error_count"] for info in job.infos) == 1


def test_the_pure_python_part_never_loads_pyspark(tmp_path: Path) -> None:
    code = (
        "import sys, tempfile\n"
        "import rstream\n"
        "from rstream import StreamBuilder, EmbeddedBroker, TextDeserializer\n"
        "from rstream.runtime.inprocess import InProcessJob\n"
        "d = tempfile.mkdtemp()\n"
        "b = EmbeddedBroker(d + '/broker'); b.create_topic('s', queues=1); b.send_batch('s', ['a b a'])\n"
        "sb = StreamBuilder('wc'); sb.source('s', TextDeserializer()).flat_map(str.split)"
        ".key_by(lambda w: w).count().to_rstream().sink('out')\n"
        "InProcessJob(sb.build(), b, d + '/job').run_until_idle()\n"
        "assert len(b.read('out')) == 3\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_batchs_outputs_are_freed_when_its_append_returns(tmp_path: Path) -> None:
    """The processors and their context refer to each other; the records a batch wrote must not wait
    for Python's cycle collector (which would walk all of them again before the next queue)."""
    import gc

    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("in", queues=1)
    broker.send_batch("in", [f"w{i % 50} w{i % 7}" for i in range(5_000)])
    b = StreamBuilder("freed")
    b.source("in", TextDeserializer()).flat_map(str.split).key_by(lambda w: w).count().to_rstream().sink("out")
    job = InProcessJob(b.build(), broker, tmp_path / "job")
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        [info] = job.run_batch()  # the source queue: 10 000 shuffle records written
        assert info["records_out"] == {"freed-ROCKETMQ-COUNT-4-shuffleTopic": 10_000}
        assert gc.collect() < 1_000  # what the run left for the collector: its few processors, not its records
    finally:
        if enabled:
            gc.enable()


def _same(x: Any) -> Any:
    return x


async def _later(x: Any) -> Any:
    return x


def test_key_by_calls_no_identity_function_per_record_and_knows_one_when_it_sees_one(tmp_path: Path) -> None:
    """``key_by(lambda w: w)`` keys a chunk by its values without a call per record; only functions
    that return their one argument as they are count as that."""
    from rstream.processors.stateless import KeyByProcessor, is_identity

    identities = [lambda w: w, _same, lambda x, /: x, lambda x=1: x]
    others = [lambda w: w.lower(), lambda *a: a, lambda x, y=1: x, lambda *, x: x, _later, str, len,
              lambda x: (yield x), lambda x, **kw: x]
    assert [is_identity(fn) for fn in identities] == [True] * len(identities)
    assert [is_identity(fn) for fn in others] == [False] * len(others)

    calls = []

    def identity_that_counts(w: str) -> str:
        calls.append(w)
        return w

    assert not KeyByProcessor("k", identity_that_counts).identity  # (its code is no identity's)
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("in", queues=1)
    broker.send_batch("in", ["b a b", "c"])
    b = StreamBuilder("ident", shuffle_queues=2)
    b.source("in", TextDeserializer()).flat_map(str.split).key_by(lambda w: w).count().to_rstream().sink(
        "out", TextSerializer(with_key=True))
    run(b, broker, tmp_path)
    last = {m.key: m.body.decode() for m in sorted(broker.read("out"), key=lambda m: (m.queue_id, m.offset))}
    assert last == {"a": "a:1", "b": "b:2", "c": "c:1"}

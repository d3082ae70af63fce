"""Jobs every runtime test reuses: a session-unique job id, a sink read back per key, and the word
count (with its exact-counts check against ``collections.Counter``)."""

from __future__ import annotations

import itertools
import pickle
import textwrap
from collections import Counter, defaultdict
from typing import Any

from rstream import EmbeddedBroker, StreamBuilder, TextDeserializer, TextSerializer

_JOBS = itertools.count()


def job_id(prefix: str = "job") -> str:
    """A job id unique in this test session."""
    return f"{prefix}-{next(_JOBS)}"


def sink_values(broker: EmbeddedBroker, topic: str, parse: Any = None) -> dict[Any, list[Any]]:
    """Per key, the values a sink wrote, in offset order (a key always lands in one queue).
    Bodies are ``key:value`` text unless ``parse(body) -> (key, value)`` says otherwise."""
    out: dict[Any, list[Any]] = defaultdict(list)
    for m in sorted(broker.read(topic), key=lambda m: (m.queue_id, m.offset)):
        if parse is None:
            key, _, value = m.body.decode().rpartition(":")
        else:
            key, value = parse(m.body)
        out[key].append(value)
    return dict(out)


def wordcount(job: str, source: str = "sentences", sink: str = "counts", visible: str = "always") -> StreamBuilder:
    b = StreamBuilder(job, shuffle_queues=3)
    (b.source(source, TextDeserializer()).flat_map(str.split).key_by(lambda w: w)
     .count().to_rstream().sink(sink, TextSerializer(with_key=True), visible=visible))
    return b


def assert_exact_counts(broker: EmbeddedBroker, sink: str, sentences: list[str]) -> None:
    expected = Counter(w for s in sentences for w in s.split())
    got = sink_values(broker, sink)
    # every word's running counts, each exactly once and in order: 1, 2, ..., n
    assert {w: [int(v) for v in vs] for w, vs in got.items()} == {w: list(range(1, n + 1)) for w, n in expected.items()}


def crash_then_finish(broker: Any, make_job: Any, sentences: list[str], guarantee: str, point: str) -> Any:
    """A word count of ``sentences`` whose first task to reach ``point`` dies there (``crash_once``): in
    local mode its batch fails, and the same job made again goes on from its checkpoint to the end."""
    import pytest

    from rstream import JobError

    broker.create_topic("sentences", queues=2)
    broker.send_batch("sentences", sentences)
    name = job_id(f"{guarantee}-{point}".replace("_", "-"))
    job = make_job(wordcount(name), processing_guarantee=guarantee)
    job.crash_once(point)
    with pytest.raises(JobError, match="crashed|exited"):
        job.run_until_idle(progress=False)
    again = make_job(wordcount(name), processing_guarantee=guarantee)  # the same job, from its checkpoint
    again.run_until_idle(progress=False)
    return again


def repeated_counts(broker: Any, sink: str, sentences: list[str]) -> int:
    """How many running counts a word count wrote twice, at least once, after a task died between its
    sink write and its commit: per word the sink must hold 1, ..., m, then k, ..., m again (the range's
    rerun from the same commit, before the queue's next range), then m + 1, ..., n, and nothing else."""
    expected = Counter(w for s in sentences for w in s.split())
    got = {w: [int(v) for v in vs] for w, vs in sink_values(broker, sink).items()}
    assert set(got) == set(expected)
    for w, n in expected.items():
        assert any(got[w] == [*range(1, m + 1), *range(k, m + 1), *range(m + 1, n + 1)]
                   for m in range(0, n + 1) for k in range(1, m + 2)), (w, got[w])
    return sum(len(vs) for vs in got.values()) - sum(expected.values())


#: A word count started in a process of its own, to be killed with SIGKILL mid-batch: ``python -c
#: WORDCOUNT_TO_KILL <broker> <data_dir> <spark tmp dir> <job id> [<source> <sink>]``, the broker as
#: ``broker_arg`` gives it (``wordcount``'s topics unless named).
WORDCOUNT_TO_KILL = textwrap.dedent("""
    import pickle, sys, time
    from rstream import RocketMQStream, get_spark
    from tests.support.jobs import wordcount
    broker = pickle.loads(bytes.fromhex(sys.argv[1]))
    spark = get_spark("local[2]", tmp_dir=sys.argv[3])
    builder = wordcount(sys.argv[4], *sys.argv[5:7])
    job = RocketMQStream(builder.build(), {"data_dir": sys.argv[2], "max_records_per_queue": 15,
                         "trigger_interval_ms": 20}, broker=broker, spark=spark)
    job.start()
    print("started", flush=True)
    time.sleep(600)
""")


def broker_arg(broker: Any) -> str:
    """A broker as a command-line argument of ``WORDCOUNT_TO_KILL`` (any broker pickles as a handle)."""
    return pickle.dumps(broker).hex()

"""rstream and the official Apache RocketMQ Python client (``rocketmq-python-client``, gRPC through the proxy)
read each other's messages on a real RocketMQ: key, tag and properties included, and a job's output
reaches an official consumer, every committed record of it.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from rstream import StreamBuilder, TextDeserializer, TextSerializer
from rstream.broker.base import CommitTag
from rstream.rocketmq import LocalRocketMQ
from rstream.rocketmq.official import OfficialClientError, consume, produce

pytestmark = pytest.mark.e2e


@pytest.fixture
def cluster(local_rocketmq: LocalRocketMQ) -> LocalRocketMQ:
    """The session's RocketMQ (its timer wheel on, as RocketMQ's default: the official SimpleConsumer
    receives by pop, which a broker refuses without it)."""
    return local_rocketmq


@pytest.fixture
def broker(cluster: LocalRocketMQ) -> Iterator[Any]:
    made = cluster.broker()
    yield made
    made.close()


def unique(prefix: str) -> str:
    """A topic, group or job name no other test of the module used."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def test_what_the_official_client_sends_reads_in_rstream_with_its_key_tag_and_properties(
        cluster: LocalRocketMQ, broker: Any) -> None:
    topic = unique("official-in")
    broker.create_topic(topic, queues=2)
    receipts = produce(cluster.proxy, topic, ["hello", b"world"], keys=["k1", None], tag="greeting",
                       properties={"lang": "en", "origin": "official"})
    assert len(receipts) == 2
    read = sorted(broker.read(topic), key=lambda m: m.body)
    assert [(m.key, m.body, m.tags, m.headers) for m in read] == [
        ("k1", b"hello", "greeting", {"lang": "en", "origin": "official"}),  # no BORN_TIMESTAMP: RocketMQ's own
        (None, b"world", "greeting", {"lang": "en", "origin": "official"}),
    ]
    assert all(m.born_timestamp % 1000 == 0 for m in read), "the official client stamps whole seconds"


def test_what_rstream_writes_reaches_the_official_consumer_with_its_keys_tag_and_properties(
        cluster: LocalRocketMQ, broker: Any) -> None:
    topic = unique("official-out")
    broker.create_topic(topic, queues=3)
    broker.send_batch(topic, ["one", "two"], keys=["k1", "k2"], headers={"lang": "en"}, tags="tagA")
    broker.send(topic, "three", key="two words", tags="tagB")
    got = consume(cluster.proxy, topic, unique("official-group"), 3, timeout=60)
    seen = {m.body: (m.keys, m.tag, m.properties) for m in got}
    assert seen == {
        b"one": ({"k1"}, "tagA", {"lang": "en"}),
        b"two": ({"k2"}, "tagA", {"lang": "en"}),
        b"three": ({"two", "words"}, "tagB", {}),  # KEYS is space-separated: one key with a space becomes two
    }


def test_an_append_of_several_queues_shows_its_attempt_to_the_official_consumer(cluster: LocalRocketMQ, broker: Any) -> None:
    """A task's outputs go through the decision log: each record names its attempt (RSTREAM_TXN), and a
    consumer outside rstream receives them like any message."""
    topic, job = unique("official-txn"), unique("job")
    broker.create_topic(topic, queues=2)
    tag = CommitTag(job=job, topic="input", queue=0, start_offset=0, end_offset=1)
    assert broker.append({(topic, 0): [("a", b"first", 1, {"h": "1"}, "t")], (topic, 1): [("b", b"second", 2, None, None)]},
                         tag)
    got = consume(cluster.proxy, topic, unique("official-group"), 2, timeout=60)
    attempts = {m.properties.pop("RSTREAM_TXN") for m in got}
    assert len(attempts) == 1
    assert sorted((m.body, m.keys, m.tag, m.properties) for m in got) == [
        (b"first", {"a"}, "t", {"h": "1"}), (b"second", {"b"}, None, {})]


def test_a_jobs_input_and_output_go_through_the_official_client(cluster: LocalRocketMQ, broker: Any, spark: Any,
                                                                 tmp_path: Any) -> None:
    """Sentences produced with the official client, counted by a job on RocketMQ, and its sink read back with
    the official consumer: every record the job committed, once each, and counts equal a plain Python count."""
    from rstream import RocketMQStream

    source, sink, name = unique("sentences"), unique("word-counts"), unique("wordcount")
    broker.create_topic(source, queues=2)
    text = [f"the fox and the dog {i % 7}" for i in range(40)]
    produce(cluster.proxy, source, text)
    builder = StreamBuilder(name)
    (builder.source(source, TextDeserializer()).flat_map(str.split).key_by(lambda word: word).count()
     .to_rstream().sink(sink, TextSerializer(with_key=True)))
    job = RocketMQStream(builder.build(), broker=broker, spark=spark, properties={"data_dir": str(tmp_path)})
    try:
        job.run_until_idle(progress=False)
    finally:
        job.stop()

    committed = broker.committed_only(sink)
    words = Counter(w for s in text for w in s.split())
    assert len(committed) == sum(words.values())  # one update per word read
    stored = sum(broker.end_offsets(sink))  # every message in the topic, also of attempts that lost
    got = consume(cluster.proxy, sink, unique("official-group"), stored, timeout=120)
    official = Counter((next(iter(m.keys)), m.body) for m in got)
    assert official == Counter((m.key, m.body) for m in committed)
    running: dict[str, list[int]] = {}
    for message in sorted(committed, key=lambda m: (m.queue_id, m.offset)):
        word, _, count = message.body.decode().rpartition(":")
        running.setdefault(word, []).append(int(count))
    assert running == {w: list(range(1, n + 1)) for w, n in words.items()}


def test_the_helpers_say_what_is_wrong(cluster: LocalRocketMQ, broker: Any) -> None:
    with pytest.raises(OfficialClientError, match="cannot reach a RocketMQ proxy"):
        produce("127.0.0.1:1", "anything", ["x"])
    with pytest.raises(OfficialClientError, match="found no route to topic"):
        produce(cluster.proxy, unique("missing"), ["x"])
    with pytest.raises(OfficialClientError, match="found no route to topic"):
        produce(cluster.namesrv, unique("missing"), ["x"])  # the name server is no gRPC endpoint
    with pytest.raises(OfficialClientError, match="one key per body"):
        produce(cluster.proxy, "anything", ["x", "y"], keys=["k"])
    topic = unique("official-short")
    broker.create_topic(topic, queues=1)
    produce(cluster.proxy, topic, ["only one"])
    with pytest.raises(OfficialClientError, match="received 1 of 2 messages"):
        consume(cluster.proxy, topic, unique("official-group"), 2, timeout=3)

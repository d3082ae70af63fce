"""Bad input gets a clear error that names the problem, and nothing committed is lost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rstream import (
    BrokerPathError,
    EmbeddedBroker,
    JobError,
    JsonDeserializer,
    RecordError,
    RocketMQStream,
    StreamBuilder,
    UnhashableKeyError,
    UnknownTopicError,
)
from tests.support.jobs import job_id, sink_values


def json_count(job: str) -> StreamBuilder:
    b = StreamBuilder(job, shuffle_queues=2)
    b.source("events", JsonDeserializer()).key_by(lambda e: e["user"]).count().sink("counts")
    return b


def test_unknown_source_topic(broker: EmbeddedBroker, make_job: Any) -> None:
    b = StreamBuilder(job_id("unknown"))
    b.source("no-such-topic").sink("out")
    with pytest.raises(UnknownTopicError, match="'no-such-topic' does not exist"):
        make_job(b).run_until_idle()


def test_a_raising_deserializer_is_reported_and_skipped(broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("events", queues=1)
    broker.send_batch("events", ['{"user": "a"}', "{not json", '{"user": "b"}', '{"user": "a"}'])
    job = make_job(json_count(job_id("skip")))
    job.run_until_idle()
    errors = job.errors()
    assert errors[["operator", "topic", "queue", "offset"]].values.tolist() == [["SOURCE-1", "events", 0, 1]]
    assert "JSONDecodeError" in errors["error"][0] and "not json" in errors["value"][0]
    assert {k: vs[-1] for k, vs in sink_values(broker, "counts").items()} == {"a": "2", "b": "1"}


def test_data_errors_stop_the_job_when_skipping_is_off_and_nothing_is_lost(broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("events", queues=1)
    name = job_id("strict")
    broker.send_batch("events", ['{"user": "a"}', '{"user": "b"}'])
    make_job(json_count(name), skip_data_error=False).run_until_idle()
    committed = sink_values(broker, "counts")
    assert committed == {"a": ["1"], "b": ["1"]}

    broker.send_batch("events", ['{"user": "a"}', "oops", '{"user": "c"}'])
    strict = make_job(json_count(name), skip_data_error=False)
    with pytest.raises(RecordError, match=r"SOURCE-1 failed on the record at topic 'events' queue 0 offset 3"):
        strict.run_until_idle()
    assert sink_values(broker, "counts") == committed  # the failed batch wrote nothing
    assert strict.state().set_index("key")["value"].to_dict() == {"a": 1, "b": 1}

    lenient = make_job(json_count(name))  # the same job, now skipping: it goes on from the committed batch
    lenient.run_until_idle()
    assert {k: vs[-1] for k, vs in sink_values(broker, "counts").items()} == {"a": "2", "b": "1", "c": "1"}
    assert lenient.errors()["offset"].tolist() == [3]


def test_unhashable_key_is_a_clear_error(broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("events", queues=1)
    broker.send_batch("events", [json.dumps({"tags": ["x", "y"]})])
    b = StreamBuilder(job_id("unhashable"))
    b.source("events", JsonDeserializer()).key_by(lambda e: e["tags"]).count().sink("counts")
    with pytest.raises(UnhashableKeyError, match=r"returned an unhashable list: \['x', 'y'\].*offset 0"):
        make_job(b).run_until_idle()
    assert broker.last_commit(b.job_id, "events", 0) is None


def test_a_raising_serializer_names_the_sink(broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("in", queues=1)
    broker.send_batch("in", ["ok", "bad", "fine"])

    def serialize(key: Any, value: str) -> bytes:
        if value == "bad":
            raise ValueError("cannot write 'bad'")
        return value.encode()

    b = StreamBuilder(job_id("ser"))
    b.source("in").sink("out", serialize)
    job = make_job(b)
    job.run_until_idle()
    assert [m.body for m in broker.read("out")] == [b"ok", b"fine"]
    row = job.errors().iloc[0]
    assert (row["operator"], row["offset"]) == ("SINK-2", 1) and "cannot write 'bad'" in row["error"]


def test_deserializer_must_return_key_and_value(broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("in", queues=1)
    broker.send_batch("in", ["x"])
    b = StreamBuilder(job_id("shape"))
    b.source("in", lambda body: body.decode()).sink("out")
    with pytest.raises(Exception, match=r"must return a \(key, value\) tuple"):
        make_job(b).run_until_idle()


def test_broker_path_that_is_not_writable(spark: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    b = StreamBuilder(job_id("path"))
    b.source("in").sink("out")
    with pytest.raises(BrokerPathError, match="is not writable"):
        RocketMQStream(b.build(), {"data_dir": str(blocker)}, spark=spark)


def test_unknown_properties_are_named(spark: Any, broker: EmbeddedBroker) -> None:
    b = StreamBuilder(job_id("props"))
    b.source("in").sink("out")
    with pytest.raises(JobError, match="unknown job properties \\['skip_errors'\\]"):
        RocketMQStream(b.build(), {"skip_errors": True}, broker=broker, spark=spark)


def test_a_deleted_checkpoint_never_recounts(broker: EmbeddedBroker, make_job: Any) -> None:
    import shutil

    from rstream import CheckpointMismatchError

    broker.create_topic("events", queues=1)
    broker.send_batch("events", ['{"user": "a"}', '{"user": "b"}', '{"user": "a"}'])
    name = job_id("lostckpt")
    job = make_job(json_count(name), max_records_per_queue=2)  # batches of offsets 0..2, then 2..3
    job.run_until_idle()
    committed = sink_values(broker, "counts")
    assert committed == {"a": ["1", "2"], "b": ["1"]}
    shutil.rmtree(job.checkpoint_dir)  # Spark starts over from offset 0, with other batch ranges
    again = make_job(json_count(name))
    with pytest.raises(CheckpointMismatchError, match="checkpoint folder was deleted or belongs to another run"):
        again.run_until_idle()
    assert sink_values(broker, "counts") == committed  # nothing counted twice
    again.reset()  # the way out the error names: start this job over
    fresh = make_job(json_count(name))
    fresh.run_until_idle()
    assert fresh.state().set_index("key")["value"].to_dict() == {"a": 2, "b": 1}

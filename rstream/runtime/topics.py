"""Provisioning: the topics a job needs besides its sources (shuffle, state, sink, late-data and
dead-letter topics), created where missing, and the ``TaskConfig`` every task of the job gets.
Used by the Spark job (``RocketMQStream``) and the in-process runner alike; no Spark here."""

from __future__ import annotations

from pathlib import Path

from rstream.broker.base import Broker
from rstream.graph.topology import Topology
from rstream.runtime.config import TaskConfig
from rstream.settings import JobProperties


def late_topic_name(job_id: str) -> str:
    """Where a job's late records go: ``<job>-late``."""
    return f"{job_id}-late"


def dlq_topic_name(job_id: str) -> str:
    """A job's dead-letter topic (RocketMQ's DLQ): ``<job>-dlq``."""
    return f"{job_id}-dlq"


def prepare_topics(topology: Topology, broker: Broker, settings: JobProperties) -> dict[str, int]:
    """Create the job's topics where missing (its sources must exist: ``UnknownTopicError`` names a
    missing one); returns the queue count of each sink topic."""
    for topic in topology.source_topics:
        broker.topic(topic)  # raises UnknownTopicError with a hint
    for shuffle, queues in topology.shuffle_topics.items():
        broker.create_topic(shuffle, queues=queues, packed=settings.pack_shuffle)
    for input_topic, state_topic in topology.state_topics.items():
        broker.create_topic(state_topic, queues=broker.topic(input_topic).queues, compact=True)
    sink_queues = {}
    for topic in topology.sink_topics:
        if not broker.has_topic(topic):
            broker.create_topic(topic, queues=settings.sink_queues)
        sink_queues[topic] = broker.topic(topic).queues
    if topology.on_commit_topics and hasattr(broker, "answer_checks"):
        broker.answer_checks()  # the job's driver answers the broker's check-backs of its sinks' half messages
    if hasattr(broker, "mirror_progress_of"):
        broker.mirror_progress_of(topology.job_id)  # its consumer group as far as its commits (a writer may have died)
    if topology.framed_topics:
        broker.create_topic(late_topic_name(topology.job_id), queues=1)
    broker.create_topic(dlq_topic_name(topology.job_id), queues=1)
    return sink_queues


def producers(topology: Topology, broker: Broker) -> dict[str, list[str]]:
    """Per framed shuffle topic, its producers (``topic/queue/shuffle sink``)."""
    counts = {t: broker.topic(t).queues for t in topology.input_topics}
    return {t: topology.producers(t, counts) for t in topology.framed_topics}


def task_config(topology: Topology, broker: Broker, settings: JobProperties, state_dir: str | Path) -> TaskConfig:
    """What every task of the job gets; creates the job's topics where missing."""
    sink_queues = prepare_topics(topology, broker, settings)
    return TaskConfig(
        job=topology.job_id, topology=topology, broker=broker, state_dir=str(state_dir), sink_queues=sink_queues,
        settings=settings, late_topic=late_topic_name(topology.job_id) if topology.framed_topics else None,
        producers=producers(topology, broker), dlq_topic=dlq_topic_name(topology.job_id),
    )

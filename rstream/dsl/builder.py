"""``StreamBuilder``: where a job starts. It owns the logical graph (first build) and builds the
real topology from it (second build)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from rstream.broker.base import validate_topic_name
from rstream.dsl.streams import DslError, RStream
from rstream.graph.logical import LogicalGraph
from rstream.graph.topology import Topology, TopologyBuilder
from rstream.processors import rewrites
from rstream.processors.stateless import SOURCE
from rstream.serde import as_deserializer

_JOB_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class StreamBuilder:
    """Start a job: ``StreamBuilder("wordcount").source("sentences", TextDeserializer())``.

    The job id names the job's shuffle topics and folders, so it uses letters, digits, ``_`` and
    ``-`` only (at most 64). ``shuffle_queues`` is the queue count of the shuffle topics (8, as
    in RocketMQ Streams).
    """

    def __init__(self, job_id: str, shuffle_queues: int = 8) -> None:
        if not isinstance(job_id, str) or not _JOB_ID.match(job_id):
            raise DslError(
                f"invalid job id {job_id!r}: use 1 to 64 letters, digits, '_' or '-' "
                "(it becomes part of topic and folder names)"
            )
        if not isinstance(shuffle_queues, int) or shuffle_queues < 1:
            raise DslError(f"shuffle_queues must be a positive int, got {shuffle_queues!r}")
        self.job_id = job_id
        self.shuffle_queues = shuffle_queues
        self.graph = LogicalGraph(job_id)

    def source(self, topic: str, deserializer: Any = None) -> RStream[Any, Any]:
        """Read ``topic``. ``deserializer`` is ``bytes -> (key, value)`` or has ``deserialize``;
        by default ``TextDeserializer()`` (key None, value the utf-8 text).

        >>> b = StreamBuilder("ex")
        >>> b.source("orders", JsonDeserializer()).map(lambda o: o["sku"]).sink("skus", TextSerializer())
        >>> b.run_in_process({"orders": [{"sku": "mug"}, {"sku": "pen"}]})
        {'skus': ['mug', 'pen']}
        """
        validate_topic_name(topic)
        deserialize = as_deserializer(deserializer)
        node = self.graph.add(SOURCE, [], topic=topic, deserializer=deserialize, detail=topic)
        return RStream(self, node)

    def build(self, combine: bool = True, optimize: Iterable[str] | None = None) -> Topology:
        """The second build: the real topology (topics and processor factories), with its speed paths
        as named rewrites (``rstream.processors.rewrites``), each drawn with the topology and switchable on
        its own: ``optimize`` names those to apply (None, the default: every one; ``()``: none, RIP-58's
        topology). Results, state and late records are the same with any of them off.

        - ``"combine"``: a ``COMBINE`` node before the shuffle sink sends one partial per key and source
          range instead of every record (a count, a count over tumbling or sliding windows, and with
          ``aggregate_emit="batch"`` any sum, min, max or avg), as Spark's partial aggregation does;
          the shuffle topic holds partials. ``combine=False`` turns this one off.
        - ``"chunks"``: pure stages run over chunks of records at once.
        - ``"fire to sink"``: a window writes the results it fires at once into its sink.
        - ``"shuffle in source"``: on Spark, a batch's source tasks also run its shuffle side (one Spark
          job per batch instead of two).

        >>> b = StreamBuilder("ex")
        >>> b.source("words").key_by(str).count().to_rstream().sink("counts")
        >>> b.build().describe().splitlines()[0]
        "Topology of job 'ex' (rewrites: chunks, combine, fire to sink, shuffle in source)"
        >>> b.build(optimize=()).describe().splitlines()[0]
        "Topology of job 'ex' (no rewrites)"
        """
        if not self.graph.nodes:
            raise DslError(f"job {self.job_id!r} has no source yet: call builder.source(topic) first")
        if not isinstance(combine, bool):
            raise DslError(f"combine must be True or False, got {combine!r}")
        try:
            chosen = rewrites.chosen(optimize, combine)
        except rewrites.RewriteError as exc:
            raise DslError(str(exc)) from None
        return TopologyBuilder(self.graph, self.shuffle_queues, optimizations=chosen).build()

    def run_in_process(self, inputs: Mapping[str, Iterable[Any]], **properties: Any) -> dict[str, list[str]]:
        """Build the job and run it once over ``inputs`` in this process, without Spark, on a throwaway
        embedded broker: ``{topic: records}`` in (a ``str`` or ``bytes`` as it is, anything else as
        JSON), ``{sink topic: messages as text}`` out, after the end of input fired every window
        (``rstream.runtime.inprocess.run_in_process``). For trying a job out and for the examples of
        this API; a notebook runs its jobs on Spark (``RocketMQStream``).

        >>> b = StreamBuilder("shout")
        >>> b.source("words").map(str.upper).sink("loud", TextSerializer())
        >>> b.run_in_process({"words": ["hello", "world"]})
        {'loud': ['HELLO', 'WORLD']}
        """
        from rstream.runtime.inprocess import run_in_process

        return run_in_process(self.build(), inputs, properties)

    def logical_dot(self) -> str:
        """The logical graph so far as DOT text."""
        return self.graph.to_dot()

    def logical_graph(self) -> Any:
        """The logical graph so far as a ``graphviz.Digraph`` (shows as SVG in a notebook)."""
        return self.graph.to_digraph()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {"text/html": self.graph.to_svg(), "text/plain": self.graph.describe()}

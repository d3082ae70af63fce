"""``union``: several streams merged into one (Flink's ``DataStream.union``, Kafka Streams' ``merge``).

A union has no work of its own: each record passes on unchanged, with its key and its own data time.
What it changes is the graph. The second build puts one ``union`` node in each pipeline its inputs
run in (a source topic's, a shuffle topic's), fed by every input in that pipeline, and copies what
follows it into each of those pipelines up to the next shuffle. That shuffle's topic then has
producers in every pipeline the union merged, so the watermark of a window or join after a union is
the minimum over all of its inputs' queues, as for any shuffle topic with several producers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rstream.processors.base import Processor
from rstream.processors.chunk import Chunk
from rstream.processors.spec import STATELESS_STYLE, OperatorSpec, register
from rstream.settings import JobProperties


class UnionProcessor(Processor):
    """Forwards every record of every parent unchanged."""

    pure = True

    def chunk(self, chunk: Chunk) -> Chunk:
        return chunk


def _make_union(name: str, params: Mapping[str, Any], settings: JobProperties, sink_queues: Mapping[str, int]) -> Processor:
    return UnionProcessor(name)


#: ``a.union(b, *more)``: one node per pipeline its inputs run in, each fed by the inputs there.
UNION = register(OperatorSpec("union", STATELESS_STYLE, _make_union))

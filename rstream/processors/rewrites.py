"""The speed paths of the real topology, each a named rewrite chosen at the second build
(``builder.build(optimize=...)``), drawn with the topology and switchable on its own. Every one leaves
a job's results as they are (``tests/processors/test_rewrites.py`` runs every kind of job with each
off against all on); what changes is how fast, and what a shuffle topic holds.

Precedents: Kafka Streams' ``topology.optimization`` (``InternalStreamsBuilder.optimizeTopology``:
rewrites chosen when the topology is built, behind one setting) and Spark's partial aggregation
before an exchange. RIP-58 has none of them: with ``optimize=()`` a topology is RIP-58's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rstream.errors import RStreamError


@dataclass(frozen=True)
class Rewrite:
    """One speed path: its name (what ``optimize`` takes), and what it does, in words."""

    name: str
    does: str


#: A combine node before a shuffle sink sends one partial per key and source range instead of the
#: records (``rstream.shuffle.combine``): a count, a count over tumbling or sliding windows, and with
#: ``aggregate_emit="batch"`` sum, min, max, avg.
COMBINE = Rewrite("combine", "a COMBINE node sends one partial per key and source range before a shuffle")
#: A pipeline's pure stages (deserializer, map, flat_map, filter, key_by, select_timestamp) run over a
#: chunk of records at once, and shuffle sinks, counts and sinks take whole chunks
#: (``rstream.processors.chunk``).
CHUNKS = Rewrite("chunks", "pure stages run over chunks of records, as list operations")
#: A window writes the results it fires at one watermark straight into its sink, serialized at once,
#: where only pure stages stand between them.
FIRE_TO_SINK = Rewrite("fire to sink", "a window writes the results it fires at once into its sink")

#: On Spark, a batch's source tasks also run its shuffle side once all its source ranges are
#: committed, where a shuffle topic is written by sources only (one Spark job per batch instead of two;
#: ``rstream.runtime.shuffle_share``). The job property ``shuffle_in_source_job`` can still turn it off
#: for a run; the driver then starts the second job.
SHUFFLE_IN_SOURCE = Rewrite("shuffle in source", "the source tasks also run the shuffle side of their batch")

REWRITES = {r.name: r for r in (COMBINE, CHUNKS, FIRE_TO_SINK, SHUFFLE_IN_SOURCE)}
ALL = frozenset(REWRITES)


class RewriteError(RStreamError, ValueError):
    """``build(optimize=...)`` named a rewrite rstream does not have."""


def chosen(optimize: Iterable[str] | None, combine: bool = True) -> frozenset[str]:
    """The rewrites a build applies: ``optimize`` (None: every one), less ``combine`` when
    ``combine=False`` (the older switch of the combine rewrite alone)."""
    names = ALL if optimize is None else frozenset([optimize] if isinstance(optimize, str) else optimize)
    unknown = sorted(names - ALL)
    if unknown:
        raise RewriteError(f"no rewrite named {', '.join(map(repr, unknown))}; rstream has "
                           f"{', '.join(repr(n) for n in sorted(ALL))} (optimize=() for none: RIP-58's topology)")
    return names if combine else names - {COMBINE.name}


def describe(names: Iterable[str]) -> str:
    """A topology's rewrites in a few words: ``rewrites: chunks, combine``, or ``no rewrites`` (RIP-58's)."""
    names = sorted(names)
    return "rewrites: " + ", ".join(names) if names else "no rewrites"

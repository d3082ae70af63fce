"""``job.what_if(...)``: the job's own committed input run again, in scratch storage, with other settings or
another topology built from the same sources, and the two results side by side.

It is exact because a job's results are a function of its input, not of how a run cut it into batches
(``rstream.processors.ordered``): the committed source ranges are copied, queue by queue and in order
(keys, bodies, born times, headers), into an embedded broker in a temporary folder; the job's topology
and the changed one each run over the copy in this process (``InProcessJob``, no Spark), to the end of
input; their sinks and late records are compared key by key. Nothing is written to the job's broker.
Processing time is the one thing a re-run cannot give back (``time_type="processing_time"``, or
processing-time timers): a run again is a run now. RIP-58 has nothing of the kind; Beam's interactive
runner records a source and replays it, Spark 4's state data source reads state between batches; none
re-runs the same input with changed settings and shows the difference.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, fields
from html import escape
from pathlib import Path
from typing import Any

from rstream.broker.base import Broker
from rstream.broker.embedded import EmbeddedBroker
from rstream.errors import RStreamError
from rstream.graph.topology import Topology
from rstream.runtime.inprocess import InProcessJob
from rstream.runtime.topics import late_topic_name
from rstream.settings import JobProperties

#: The sink of late records in a result: ``late`` rows keyed by the record's key.
LATE = "late records"
#: Properties a run again cannot honour: where it runs, and idleness (processing time).
NOT_RERUN = frozenset({"idle_timeout_ms", "trigger_interval_ms", "data_dir", "job_dir", "tasks",
                       "shuffle_in_source_job", "consume_from"})


def _fields(properties: JobProperties) -> dict[str, Any]:
    return {f.name: getattr(properties, f.name) for f in fields(properties)}


class WhatIfError(RStreamError, ValueError):
    """``what_if`` was asked something it cannot run."""


@dataclass(frozen=True)
class WhatIf:
    """Two runs of the same input: ``before`` (the job as it is) and ``after`` (with the changes), each
    ``{sink topic: {key: [value, ...]}}`` (values as the sink wrote them, text; late records under
    ``LATE``). ``diff()`` lists what differs, key by key."""

    changes: dict[str, Any]
    records: int
    before: dict[str, dict[str, list[str]]]
    after: dict[str, dict[str, list[str]]]

    def diff(self) -> Any:
        """A DataFrame, one row per sink and key whose values differ: ``before`` and ``after`` (the
        key's values in each run, sorted) and ``change``: ``only before``, ``only after`` or ``differs``."""
        import pandas as pd

        rows = []
        for sink in sorted(set(self.before) | set(self.after)):
            x, y = self.before.get(sink, {}), self.after.get(sink, {})
            for key in sorted(set(x) | set(y)):
                a, b = sorted(x.get(key, [])), sorted(y.get(key, []))
                if a != b:
                    change = "only after" if not a else "only before" if not b else "differs"
                    rows.append({"sink": sink, "key": key, "before": a, "after": b, "change": change})
        return pd.DataFrame(rows, columns=["sink", "key", "before", "after", "change"])

    @property
    def same(self) -> bool:
        """Whether the changes changed nothing."""
        return self.diff().empty

    def _repr_html_(self) -> str:
        diff = self.diff()
        head = (f"<b>what if</b> {escape(json.dumps(self.changes, default=str))}: {self.records} input records "
                f"run again; {len(diff)} key(s) differ")
        table = diff.to_html(index=False, max_rows=40) if len(diff) else "<i>the same results</i>"
        return f'<div style="max-width:100%;overflow-x:auto"><div>{head}</div>{table}</div>'

    def __repr__(self) -> str:
        return f"WhatIf({self.changes}, {self.records} records, {len(self.diff())} key(s) differ)"


def what_if(topology: Topology, broker: Broker, properties: JobProperties, changes: Mapping[str, Any],
            changed: Topology | None = None, work: Path | None = None) -> WhatIf:
    """Run ``topology``'s committed source input again with ``changes`` to its properties (and
    ``changed`` instead of the topology, one built from the same source topics), and the job as it is,
    both in scratch storage under ``work`` (a temporary folder by default). See the module docstring."""
    new_topology = changed if changed is not None else topology
    missing = sorted(set(new_topology.source_topics) - set(topology.source_topics))
    if missing:
        raise WhatIfError(f"the changed topology reads {missing}, which job {topology.job_id!r} does not read: "
                          f"what_if runs the job's own input again ({topology.source_topics}); build the changed "
                          "job from the same source topics")
    fixed = sorted(set(changes) & NOT_RERUN)
    if fixed:
        raise WhatIfError(f"what_if cannot change {fixed}: a run again reads the committed input to its end, in "
                          "one process, with no idleness (processing time is the one thing it cannot give back); "
                          "change what decides results: allowed_lateness_ms, time_type, aggregate_emit, "
                          "max_records_per_queue, or the topology")
    new_props = JobProperties.of({**_fields(properties), **dict(changes)})  # JobError for an unknown property
    if work is not None:
        work.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="rstream-what-if-", dir=work))
    try:
        queues, rows = _committed_input(topology, broker)
        before = _run(topology, properties, queues, rows, folder / "before")
        after = _run(new_topology, new_props, queues, rows, folder / "after")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    shown = dict(changes)
    if changed is not None:
        shown["topology"] = changed.job_id
    return WhatIf(shown, sum(map(len, rows.values())), before, after)


def _committed_input(topology: Topology, broker: Broker) -> tuple[dict[str, int], dict[tuple[str, int], list[Any]]]:
    """The job's source topics' queue counts, and the committed records of each source queue, in order,
    as the source read them (keys, bodies, born times, headers), ready to append."""
    queues: dict[str, int] = {}
    rows: dict[tuple[str, int], list[Any]] = {}
    for topic in topology.source_topics:
        queues[topic] = broker.topic(topic).queues
        for queue in range(queues[topic]):
            last = broker.last_commit(topology.job_id, topic, queue)
            if last is not None:
                rows[(topic, queue)] = [(key, body, born, dict(headers) if headers else None, None)
                                        for _offset, key, body, born, _store, headers
                                        in broker.read_records(topic, queue, 0, last.end_offset)]
    return queues, {k: v for k, v in rows.items() if v}


def _run(topology: Topology, properties: JobProperties, queues: Mapping[str, int],
         rows: Mapping[tuple[str, int], list[Any]], folder: Path) -> dict[str, dict[str, list[str]]]:
    """``topology`` over a copy of the input in a broker of its own, to its end (the idle flush); its
    sinks and late records per key."""
    broker = EmbeddedBroker(folder / "broker")
    for topic, n in queues.items():
        broker.create_topic(topic, queues=n)
    if rows:
        broker.append(dict(rows))
    settings = JobProperties.of({**_fields(properties), "data_dir": str(folder), "job_dir": None,
                                 "idle_timeout_ms": 2**40})  # no idleness: the input's end is its only end
    InProcessJob(topology, broker, folder / "job", settings).run_until_idle()
    out: dict[str, dict[str, list[str]]] = {}
    for topic in topology.sink_topics:
        per_key: dict[str, list[str]] = {}
        for m in broker.read(topic) if broker.has_topic(topic) else []:
            key = m.key if isinstance(m.key, str) else repr(m.key)
            per_key.setdefault(key, []).append(m.body.decode("utf-8", "replace"))
        out[topic] = per_key
    late: dict[str, list[str]] = {}
    late_topic = late_topic_name(topology.job_id)
    for m in broker.read(late_topic) if broker.has_topic(late_topic) else []:
        row = json.loads(m.body)
        late.setdefault(str(row["key"]), []).append(f"{row['value']} at {row['data_time']}: {row['cause']} "
                                                    f"({row['operator']})")
    out[LATE] = late
    return out

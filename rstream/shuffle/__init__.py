"""The shuffle: how records of one key meet, whatever source queue they came from.

- ``wire``: every kind of record a shuffle topic holds, its headers, and ``decode()`` (the only
  module that knows the layout; the trace, the topic browser and the task ask it).
- ``sink``: the shuffle sink (RIP-58's shuffle: each record to its key's queue, watermark markers).
- ``combine``: the ``COMBINE`` node that ``build(combine=True)`` inserts before a shuffle sink, and
  its combiners (count, fold, window count): one partial per key and source range.
- ``source``: the shuffle source, the root of a shuffle topic's pipeline.

To add a shuffle record kind: ``wire`` (header, typed record, ``decode``), the writer (a combiner)
and the reader (``source``).
"""

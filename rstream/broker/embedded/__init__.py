"""The embedded broker: RocketMQ's model (topics, queues, offsets, broker time, compact topics,
consumer offsets) in one SQLite file in WAL mode, safe when several processes append at once.

Records are stored in *record batches* (one row holds many consecutive records and their base
offset), as Kafka and Pulsar do: one row per record is far too slow for shuffles. A batch holds its
records as columns, or packed in a format of the batch's own (``rstream.broker.batch``), and tasks
read them as column blocks (``read_blocks``).

- ``broker``: the API (``EmbeddedBroker``);
- ``sqlite``: the schema, connections, write transactions and the WAL checkpointer;
- ``format``: a stored batch's payload, written and read back as columns;
- ``compaction``: compact topics' log cleaner.
"""

from rstream.broker.embedded.broker import EmbeddedBroker, SendResults
from rstream.broker.embedded.format import BATCH_RECORDS
from rstream.broker.embedded.sqlite import CHECKPOINT_WAL_BYTES, checkpoint

__all__ = ["BATCH_RECORDS", "CHECKPOINT_WAL_BYTES", "EmbeddedBroker", "SendResults", "checkpoint"]

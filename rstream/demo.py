"""The main job: word count on the embedded broker, executed on Spark.

    python -m rstream.demo [--data-dir rstream-data/demo] [--sentences 2000]

It prints the logical graph (first build), the real topology (second build), runs the job, prints
the top counts (checked against a plain Python count) and writes both graphs as SVG next to the data.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

from rstream import EmbeddedBroker, RocketMQStream, StreamBuilder, TextDeserializer, TextSerializer, get_spark

WORDS = ("stream state topic queue shuffle broker window watermark spark rocket message offset replay "
         "count source sink notebook graph batch").split()


def sentences(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) for _ in range(n)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default="rstream-data/demo")
    parser.add_argument("--sentences", type=int, default=2000)
    args = parser.parse_args(argv)
    data = Path(args.data_dir)
    shutil.rmtree(data, ignore_errors=True)  # the demo starts from nothing each time

    broker = EmbeddedBroker(data / "broker")
    broker.create_topic("sentences", queues=4)
    text = sentences(args.sentences)
    broker.send_batch("sentences", text)
    print(f"produced {len(text)} sentences into topic 'sentences' (4 queues) of {broker!r}\n")

    builder = StreamBuilder("wordcount")
    (builder.source("sentences", TextDeserializer())
     .flat_map(str.split)
     .key_by(lambda word: word)
     .count()
     .to_rstream()
     .sink("word-counts", TextSerializer(with_key=True)))
    print(builder.graph.describe(), end="\n\n")
    topology = builder.build()
    print(topology.describe(), end="\n\n")

    began = time.perf_counter()
    spark = get_spark(tmp_dir=data / "spark-tmp", warm_up=False)  # its job starts at once: no time to warm up in
    job = RocketMQStream(topology, properties={"data_dir": str(data)}, broker=broker, spark=spark)
    print(f"Spark {spark.version} ready in {time.perf_counter() - began:.1f} s; running {job!r}")
    began = time.perf_counter()
    job.run_until_idle()
    took = time.perf_counter() - began
    words = sum(len(s.split()) for s in text)
    print(f"processed {words} words in {len(job.progress)} micro-batches, {took:.1f} s\n")

    counts: dict[str, int] = {}
    for message in broker.read("word-counts"):
        word, _, text_count = message.body.decode().rpartition(":")
        counts[word] = int(text_count)  # the last update per word is its count
    expected = Counter(w for s in text for w in s.split())
    print("top words (word: count):")
    for word, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10]:
        print(f"  {word:<10} {count}")
    for name, graph in (("logical", topology.logical_graph()), ("real", topology.real_graph())):
        path = data / f"{name}-topology.svg"
        path.write_bytes(graph.pipe(format="svg"))
        print(f"wrote {path}")
    spark.stop()
    if counts != dict(expected):
        print("MISMATCH: the job's counts differ from a plain Python count", file=sys.stderr)
        return 1
    print("\nall counts equal a plain Python count: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Bench data: generated sentences and clicks, as lists, text files and broker topics."""

from __future__ import annotations

import bisect
import itertools
import json
import os
import random
import time
from pathlib import Path
from typing import Any


def make_vocabulary(size: int, seed: int) -> list[str]:
    """``size`` distinct lower-case pseudo-words, 2..10 letters (rank 0 is the most frequent)."""
    rng = random.Random(seed * 7919 + 1)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    seen: set[str] = set()
    words: list[str] = []
    while len(words) < size:
        n = min(10, 2 + int(rng.expovariate(0.35)))
        w = "".join(rng.choice(letters) for _ in range(n))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


def make_sentences(words: int, vocab: int, zipf_s: float, sentence_len: int, seed: int) -> list[str]:
    """Exactly ``words`` words drawn from a Zipf(``zipf_s``) distribution over ``vocab`` words,
    in sentences of ``sentence_len`` +- 50% words, with a fixed seed."""
    vocabulary = make_vocabulary(vocab, seed)
    weights = [1.0 / (rank + 1) ** zipf_s for rank in range(vocab)]
    cum = list(itertools.accumulate(weights))
    total = cum[-1]
    rng = random.Random(seed)
    rand = rng.random
    drawn = [vocabulary[bisect.bisect_right(cum, rand() * total)] for _ in range(words)]
    lo, hi = max(1, sentence_len // 2), max(1, sentence_len + sentence_len // 2)
    sentences = []
    i = 0
    while i < words:
        n = rng.randint(lo, hi)
        sentences.append(" ".join(drawn[i:i + n]))
        i += n
    return sentences


def write_text_files(sentences: list[str], folder: Path, files: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    per = -(-len(sentences) // files)
    for i in range(files):
        chunk = sentences[i * per:(i + 1) * per]
        if chunk:
            (folder / f"part-{i:05d}.txt").write_text("\n".join(chunk) + "\n")


#: Epoch ms of the first click (a multiple of the window size, so windows start at round times).
T0 = 1_700_000_000_000


WINDOW_MS = 10_000


LATENESS_MS = 2_000


#: The record Spark's file source gets after the data, far in the future, so that its watermark
#: passes every window and append mode emits them all (what rstream's final idle tick does).
SENTINEL_PAGE = "__end__"


def make_clicks(n: int, pages: int, zipf_s: float, rate: float, seed: int) -> list[dict[str, Any]]:
    """``n`` clicks ``{"page", "ts"}``, ``rate`` clicks per second of event time, pages drawn from a
    Zipf(``zipf_s``) distribution over ``pages`` names, with a fixed seed. Each click is 0..199 ms
    behind its place in time; 5 % are 200..1 800 ms out of order (on time: within the 2 s
    lateness); 1 % are 2.5..30 s late and 0.1 % 1..10 min late (beyond it: late)."""
    names = [f"/page/{i:04d}" for i in range(pages)]
    weights = [1.0 / (rank + 1) ** zipf_s for rank in range(pages)]
    cum = list(itertools.accumulate(weights))
    total = cum[-1]
    rng = random.Random(seed * 31 + 7)
    rand, randrange, randint = rng.random, rng.randrange, rng.randint
    step = 1000.0 / rate
    out = []
    for i in range(n):
        t = T0 + int(i * step) - randrange(200)
        u = rand()
        if u < 0.001:
            t -= randint(60_000, 600_000)
        elif u < 0.011:
            t -= randint(2_500, 30_000)
        elif u < 0.061:
            t -= randint(200, 1_800)
        out.append({"page": names[bisect.bisect_right(cum, rand() * total)], "ts": t})
    return out


def write_click_files(bodies: list[str], folder: Path, files: int, sentinel_ts: int) -> list[list[str]]:
    """The bodies as JSON lines in ``files`` files in produce order, then one file holding only the
    sentinel; modification times increase, so one-file-per-batch reads them in this order.
    Returns the chunks (the batches of the one-file-per-batch run)."""
    folder.mkdir(parents=True, exist_ok=True)
    per = -(-len(bodies) // files)
    chunks = [bodies[i * per:(i + 1) * per] for i in range(files)]
    chunks = [c for c in chunks if c] + [[json.dumps({"page": SENTINEL_PAGE, "ts": sentinel_ts})]]
    base = time.time() - len(chunks) - 10
    for i, chunk in enumerate(chunks):
        path = folder / f"part-{i:05d}.json"
        path.write_text("\n".join(chunk) + "\n")
        os.utime(path, (base + i, base + i))
    return chunks


def produce(broker: Any, sentences: list[str], topic: str, queues: int) -> float:
    broker.create_topic(topic, queues=queues)
    t = time.perf_counter()
    for i in range(0, len(sentences), 50_000):
        broker.send_batch(topic, sentences[i:i + 50_000])
    return time.perf_counter() - t

"""One operator contract (``Processor`` in ``rstream/processors/base.py``): a newcomer's operator written
against ``open / process / on_watermark / flush`` only (``tests/support/bucket_max.py``) runs in the
in-process job with every rewrite and with none, at any batch cap, and gives what plain Python gives; and
no operator module imports another operator module (what several share lives in a neutral module)."""

from __future__ import annotations

import ast
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import rstream
from rstream import EmbeddedBroker, JsonDeserializer, JsonSerializer, StreamBuilder
from rstream.runtime.inprocess import InProcessJob
from tests.support import bucket_max as newcomer
from tests.support.batch_cuts import EXACT, LATENESS, inputs, write
from tests.support.reference import split_late

SIZE = 4000
PACKAGE = Path(rstream.__file__).parent


def _job(optimize: Any) -> Any:
    b = StreamBuilder("newcomer", shuffle_queues=2)
    a = b.source("a", JsonDeserializer()).select_timestamp(lambda r: r["ts"])
    both = a.union(b.source("b", JsonDeserializer()).select_timestamp(lambda r: r["ts"]))
    grouped = both.map(lambda r: r).key_by(lambda r: r["k"]).map(lambda r: r["v"])
    newcomer.bucket_max(grouped, SIZE).to_rstream().sink("out", JsonSerializer(with_key=True))
    return b.build(optimize=optimize)


def _reference(data: dict[str, list[list[Any]]]) -> dict[str, list[list[int]]]:
    """Per key, ``[start, largest value]`` of each span of ``SIZE`` ms, spans in order: on-time records
    only (RIP-58's per-source-queue watermark)."""
    queues = {(topic, q): records for topic, qs in data.items() for q, records in enumerate(qs)}
    on_time, _late = split_late(queues, lambda r: r["ts"], LATENESS)  # type: ignore[arg-type]
    best: dict[tuple[str, int], int] = {}
    for r in on_time:
        span = (r["k"], r["ts"] - r["ts"] % SIZE)
        best[span] = max(best.get(span, r["v"]), r["v"])
    out: dict[str, list[list[int]]] = defaultdict(list)
    for (key, start), value in sorted(best.items()):
        out[key].append([start, value])
    return dict(out)


@pytest.mark.parametrize("optimize", [None, ()], ids=["every rewrite", "no rewrite"])
@pytest.mark.parametrize("cap", [10**6, 7, 3])
def test_a_newcomer_s_operator_gives_the_plain_answer_at_every_cap(tmp_path: Path, cap: int, optimize: Any) -> None:
    data = inputs(seed=11, n=60)
    broker = EmbeddedBroker(tmp_path / "broker")
    write(broker, data)
    InProcessJob(_job(optimize), broker, tmp_path / "job", {**EXACT, "max_records_per_queue": cap}).run_until_idle()
    got: dict[str, list[Any]] = defaultdict(list)
    for m in sorted(broker.read("out"), key=lambda m: (m.queue_id, m.offset)):
        doc = json.loads(m.body)
        got[doc["key"]].append(doc["value"])
    want = _reference(data)
    assert sum(map(len, want.values())) > 10
    assert dict(got) == want


def test_the_newcomer_s_operator_implements_the_contract_and_nothing_else() -> None:
    tree = ast.parse(Path(newcomer.__file__).read_text())
    [cls] = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    methods = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    assert methods == {"__init__", "open", "process", "on_watermark", "flush"}
    assert [b.id for b in cls.bases if isinstance(b, ast.Name)] == ["Processor"]


def _operator_modules() -> dict[str, Path]:
    """The modules that declare an operator (they ``register`` an ``OperatorSpec``), by module name."""
    found = {}
    for path in [*sorted((PACKAGE / "processors").glob("*.py")), *sorted((PACKAGE / "shuffle").glob("*.py"))]:
        text = path.read_text()
        if "register(OperatorSpec(" in text:
            found[f"rstream.{path.parent.name}.{path.stem}"] = path
    return found


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_no_operator_module_imports_another_operator_module() -> None:
    operators = _operator_modules()
    assert {"rstream.processors.window", "rstream.processors.aggregate", "rstream.processors.join",
            "rstream.processors.interval_join", "rstream.shuffle.combine", "rstream.shuffle.sink"} <= set(operators)
    offenders = sorted(f"{module} imports {other}" for module, path in operators.items()
                       for other in _imported(path) & set(operators) if other != module)
    assert not offenders, offenders


def test_an_operator_declared_in_a_notebook_reaches_a_worker_that_never_saw_it(tmp_path: Path) -> None:
    """A notebook declares an operator (its spec and processor in ``__main__``) after Spark's workers
    started: a task carries the spec with its fields, which cloudpickle sends by value, and the worker
    declares it (``OperatorSpec.__reduce__``). Two fresh interpreters play the kernel and the worker."""
    import subprocess
    import sys

    blob = tmp_path / "task.pickle"
    kernel = f"""
from pyspark import cloudpickle
from rstream.processors.base import Processor
from rstream.processors.spec import STATEFUL_STYLE, OperatorSpec, Shuffle, register

class Doubler(Processor):
    def process(self, key, value, ts):
        self.forward(key, value * 2, ts)

def make(name, params, settings, sink_queues):
    return Doubler(name)

spec = register(OperatorSpec("doubler", STATEFUL_STYLE, make, shuffle=Shuffle.BY_KEY))
open({str(blob)!r}, "wb").write(cloudpickle.dumps(spec))
"""
    worker = f"""
import pickle
from rstream.processors.spec import spec_of
spec = pickle.load(open({str(blob)!r}, "rb"))
assert spec is spec_of("doubler"), "declared on the worker, and found by its kind from then on"
out = []
proc = spec.make("DOUBLER-2", {{}}, None, {{}})
proc.forward = lambda k, v, ts: out.append(v)
proc.process("k", 21, 0)
print(out)
"""
    subprocess.run([sys.executable, "-c", kernel], check=True, timeout=60)
    done = subprocess.run([sys.executable, "-c", worker], check=True, timeout=60, capture_output=True, text=True)
    assert done.stdout.strip() == "[42]"

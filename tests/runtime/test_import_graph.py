"""The shape of ``rstream.runtime`` (no Spark): its modules import each other without a circle, and
none but the package's ``__init__`` imports the facade (``rstream.runtime.job``): the job's parts
get what they need passed in. What travels to the executors (the task config) carries no part of
the driver."""

from __future__ import annotations

import ast
import base64
from pathlib import Path

import rstream.runtime
from rstream.broker.embedded import EmbeddedBroker
from rstream.dsl import StreamBuilder
from rstream.serde import TextDeserializer, TextSerializer

PACKAGE = "rstream.runtime"
FOLDER = Path(rstream.runtime.__file__).parent
MODULES = {f"{PACKAGE}.{path.stem}": path for path in sorted(FOLDER.glob("*.py")) if path.stem != "__init__"}
FACADE = f"{PACKAGE}.job"


def _imports(path: Path) -> set[str]:
    """The ``rstream.runtime`` modules ``path`` imports, at the top or inside a function alike
    (``TYPE_CHECKING`` blocks too: a circle there is still a circle to a reader)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package itself
                base = ".".join([PACKAGE, *filter(None, [base])])
            # ``from rstream.runtime import session`` imports the module ``session``
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        found.update(name for name in names if name in MODULES)
    return found


GRAPH = {module: _imports(path) for module, path in MODULES.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle of imports in ``graph``, as the modules along it; None if there is none."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        if module in path:
            return [*path[path.index(module):], module]
        if module in done:
            return None
        path.append(module)
        for target in sorted(graph[module]):
            found = visit(target)
            if found is not None:
                return found
        path.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        found = visit(module)
        if found is not None:
            return found
    return None


def test_the_graph_is_read_from_the_sources() -> None:
    assert FACADE in MODULES and GRAPH[FACADE] >= {f"{PACKAGE}.job_query", f"{PACKAGE}.job_state"}
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_runtime_module_imports_another_in_a_circle() -> None:
    cycle = _cycle(GRAPH)
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_no_runtime_module_imports_the_facade() -> None:
    assert [module for module, targets in GRAPH.items() if FACADE in targets] == []


def test_the_source_and_the_task_modules_import_their_planning_from_one_place() -> None:
    source = GRAPH[f"{PACKAGE}.source"]
    assert f"{PACKAGE}.planning" in source
    for module in ("queue_run", "commit", "shuffle_share", "config", "planning"):
        assert f"{PACKAGE}.source" not in GRAPH[f"{PACKAGE}.{module}"], module


def test_the_task_config_that_travels_holds_no_part_of_the_driver(tmp_path: Path) -> None:
    from rstream.runtime.config import config_from_blob, dump_blob
    from rstream.runtime.job_core import JobCore

    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("sentences", queues=2)
    builder = StreamBuilder("layout")
    (builder.source("sentences", TextDeserializer()).flat_map(str.split).key_by(lambda w: w).count()
     .to_rstream().sink("counts", TextSerializer(with_key=True)))
    core = JobCore.of(builder.build(), {"data_dir": str(tmp_path)}, broker)
    blob = dump_blob(core.task_config())
    cfg = config_from_blob(blob)
    assert cfg.job == "layout" and cfg.state_dir == str(core.state_dir)
    pickled = base64.b64decode(blob)
    for part in ("job", "job_core", "job_progress", "job_query", "job_state", "trace", "session"):
        assert f"{PACKAGE}.{part}".encode() not in pickled, part

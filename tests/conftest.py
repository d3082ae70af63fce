"""Shared fixtures: one local[2] SparkSession for the whole test session, a fresh broker per test, a
job maker; and the speed classes (``unit``, ``spark``, ``e2e``), one marker per test. Shared helpers
live in ``tests/support/``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

# The shared checks (``tests.support``'s ``assert_exact_counts`` and the like) report a failing assert
# with its values, as a test module's own asserts do: registered before anything imports them.
pytest.register_assert_rewrite("tests.support")

from rstream import EmbeddedBroker, StreamBuilder  # noqa: E402
from tests.support import without_pyspark  # noqa: E402
from tests.support.rocketmq import start_early, stop_early, stop_session_server  # noqa: E402

if TYPE_CHECKING:  # loaded by the fixtures that need Spark: the pure-Python tests never load pyspark
    from rstream import RocketMQStream

#: Fixtures shared across folders: ``local_rocketmq``, one real RocketMQ for the whole session (started on
#: first use).
pytest_plugins = ("tests.support.rocketmq",)


#: Speed classes, one per test: ``pytest -m unit`` (no Spark started), ``-m "not e2e"`` (also the jobs
#: on Spark), or everything. tests/processors and tests/time even run without pyspark installed
#: (tests/test_layout.py checks it).
MARKERS = {
    "unit": "starts no Spark: plain Python in this process (pytest -m unit)",
    "spark": "runs on Spark: the session's local[2] SparkSession (the spark fixture), or its own in a subprocess",
    "e2e": "end to end: starts a kernel, a browser, a cluster, RocketMQ or a fresh environment "
           "(tests/browser, tests/notebooks, tests/cluster, tests/binder, the local_rocketmq fixture); "
           "pytest -m 'not e2e' leaves them out",
}
#: Folders whose every test starts a Jupyter kernel, a browser, a Spark cluster or a Binder-like venv. A
#: module elsewhere that starts such a process says so itself (``pytestmark = pytest.mark.e2e``:
#: tests/runtime/test_session.py, whose tests each start a fresh interpreter with its own JVM).
E2E_FOLDERS = ("browser", "notebooks", "cluster", "binder")
#: Folders of Spark tests: the runtime's and the toolkit's (most run jobs; the rest import the runtime and
#: share their modules' fixtures). Elsewhere a test is a Spark test when it uses the ``spark`` fixture
#: (``make_job`` and the toolkit's job fixtures do).
SPARK_FOLDERS = ("runtime", "widgets")


def pytest_configure(config: pytest.Config) -> None:
    for name, meaning in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {meaning}")


def speed_class(item: pytest.Item) -> str:
    """The one marker of ``MARKERS`` a test gets: its own if it says, else by folder and fixtures."""
    own = [m.name for m in item.iter_markers() if m.name in MARKERS]
    if own:
        return own[0]
    folder = Path(str(item.fspath)).parent.name
    if folder in E2E_FOLDERS or "local_rocketmq" in getattr(item, "fixturenames", ()):
        return "e2e"
    if "spark" in getattr(item, "fixturenames", ()) or folder in SPARK_FOLDERS:
        return "spark"
    return "unit"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        cls = speed_class(item)
        for name in MARKERS:
            if name != cls and item.get_closest_marker(name) is not None:
                raise pytest.UsageError(f"{item.nodeid} is marked {name} and {cls}: one speed class per test")
        if item.get_closest_marker(cls) is None:
            item.add_marker(getattr(pytest.mark, cls))
    # The session's shared RocketMQ servers run last, their users together, each stopped after its last
    # user: an idle LocalRocketMQ's JVMs take about a third of a core, which every other test would pay for.
    # After them, the check that runs tests/processors without pyspark: its run starts in the background
    # when they begin (their time goes mostly to waiting on RocketMQ's JVMs), and the check collects it.
    items.sort(key=_place)
    LAST_USER.clear()
    FIRST_USER.clear()
    for item in items:
        if server_of(item):
            LAST_USER[server_of(item)] = item.nodeid
            FIRST_USER.setdefault("item", item.nodeid)
        if item.nodeid == without_pyspark.NODE:
            FIRST_USER["without_pyspark"] = item.nodeid


def _place(item: pytest.Item) -> int:
    if item.nodeid == without_pyspark.NODE:
        return len(SERVERS) + 1
    server = server_of(item)
    return SERVERS.index(server) + 1 if server else 0


def server_of(item: pytest.Item) -> str | None:
    """The session server (``SERVERS``) a test uses, directly, through another fixture, or as the
    conformance suite's broker kind (which asks for it on first use)."""
    names = set(getattr(item, "fixturenames", ()))
    callspec = getattr(item, "callspec", None)
    kind = callspec.params.get("broker_factory") if callspec is not None else None
    if "retention_rocketmq" in names:
        return "retention_rocketmq"
    if kind == "rocketmq-2" or "rocketmq_cluster" in names:
        return "rocketmq_cluster"
    if kind == "rocketmq" or "local_rocketmq" in names:
        return "local_rocketmq"
    return None


#: The session-scoped servers of ``tests/support/rocketmq.py``, in the order their users run, at the end.
#: ``retention_rocketmq`` starts in the background when the first of them begins (``start_early``): its
#: broker's first minute passes while the others' tests run.
SERVERS = ("rocketmq_cluster", "local_rocketmq", "retention_rocketmq")
#: Per server, the node id of the last test that uses it.
LAST_USER: dict[str, str] = {}
#: The node id of the first test that uses a session server (``item``), and of the check run without
#: pyspark when the session has it (``without_pyspark``).
FIRST_USER: dict[str, str] = {}


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.nodeid == FIRST_USER.get("item"):
        for name in LAST_USER:  # the servers the session uses
            start_early(name)
        if "without_pyspark" in FIRST_USER:
            without_pyspark.start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    stop_early()
    without_pyspark.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    yield
    for name, last in LAST_USER.items():
        if last == item.nodeid:
            stop_session_server(name)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from rstream import get_spark

    session = get_spark("local[2]", tmp_dir=tmp_path_factory.mktemp("spark-tmp"))
    yield session
    for query in session.streams.active:
        query.stop()


@pytest.fixture
def broker(tmp_path: Path) -> EmbeddedBroker:
    return EmbeddedBroker(tmp_path / "broker")


@pytest.fixture
def make_job(spark: Any, broker: EmbeddedBroker, tmp_path: Path) -> Any:
    """``make_job(builder_or_topology, **properties)`` -> a RocketMQStream on the test's broker."""
    from rstream import RocketMQStream

    made: list[RocketMQStream] = []

    def make(builder: Any, **props: Any) -> RocketMQStream:
        topology = builder.build() if isinstance(builder, StreamBuilder) else builder
        props.setdefault("data_dir", str(tmp_path / "data"))
        job = RocketMQStream(topology, properties=props, broker=broker, spark=spark)
        made.append(job)
        return job

    yield make
    for job in made:
        job.stop()



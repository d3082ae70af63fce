"""A real RocketMQ for the tests: ``local_rocketmq``, one LocalRocketMQ started once for the whole test
session (registered in tests/conftest.py, so any test may ask for it; it starts on first use, about
6 to 15 s on 2 shared cores, and stops at the session's end), and a few remoting requests to look into a
broker below RocketMQBroker (``rstream.rocketmq.remoting``). Without a JVM: the protocol's bytes as
RocketMQ writes them (``stored_message``, ``frame``) and a fake server that answers what a test says
(``ScriptedServer``), for the decoder's and the client's tests.

Tests that stop RocketMQ start their own LocalRocketMQ: the shared one must stay up. One test kills the
shared broker's JVM and starts it again at once (tests/rocketmq/test_jobs_on_rocketmq.py): a broker with
the history of the tests before it, whose deleted topics a crash recovery brings back
(tests/rocketmq/test_topic_incarnations.py).

``rocketmq_cluster``: a second one, of two brokers (``broker-a``, ``broker-b``, each its own JVM, and the
proxy in cluster mode), also started once on first use, for the tests of topics across brokers
(tests/rocketmq/test_cluster.py, the ``rocketmq-2`` kind of tests/broker/test_conformance.py). Its timer
wheel is off (a fifth of a core per broker; only the official client's consumer needs it, and these
tests only produce with it; Java's push consumer, ``push_consume``, pulls). A test that kills one of its
brokers asks for ``healthy_cluster`` too, which starts every broker that is down after it.

``retention_rocketmq``: a third, of one broker whose commit-log files are deleted seconds after they were
last written, for tests/rocketmq/test_retention.py; it starts in the background when the first test of a
shared server begins (``start_early``), so that RocketMQ's first minute without a clean service passes
while the other servers' tests run, and its tests run last.

``push_consume``: Java's push consumer (RocketMQ's own ``DefaultMQPushConsumer``, ``java/PushConsume.java``
compiled once a session) reading a topic whole, for what a consumer outside rstream sees; ``grpc_push_consume``
the same with the official gRPC Java client's ``PushConsumer`` (``java/GrpcPushConsume.java``), through the proxy.
"""

from __future__ import annotations

import base64
import functools
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import psutil
import pytest

from rstream.rocketmq.local import LocalRocketMQ
from rstream.rocketmq.remoting import Client
from tests.support.processes import processes_mentioning

#: The session's shared servers that are running, by fixture name (``stop_session_server``).
_RUNNING: dict[str, LocalRocketMQ] = {}


def stop_session_server(name: str) -> None:
    """Stop the session server of fixture ``name`` now, if it runs: ``tests/conftest.py`` does so after the
    last test that uses it (the tests run in an order that keeps its users together, at the end). Its
    store is thrown away: no need to wait the proxy's 12 s of clean shutdown."""
    mq = _RUNNING.pop(name, None)
    if mq is not None:
        mq.stop(grace=3.0)


@pytest.fixture(scope="session")
def local_rocketmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRocketMQ]:
    """One LocalRocketMQ (name server + proxy with its broker, 127.0.0.1) shared by the whole session."""
    mq = _RUNNING["local_rocketmq"] = LocalRocketMQ(tmp_path_factory.mktemp("rocketmq")).start()
    try:
        yield mq
    finally:
        stop_session_server("local_rocketmq")


@pytest.fixture(scope="session")
def rocketmq_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRocketMQ]:
    """One two-broker LocalRocketMQ (name server, broker-a, broker-b, proxy; 127.0.0.1) shared by the session."""
    mq = _RUNNING["rocketmq_cluster"] = LocalRocketMQ(tmp_path_factory.mktemp("rocketmq-cluster"), brokers=2,
                                                      broker_conf={"timerWheelEnable": "false"}).start()
    try:
        yield mq
    finally:
        stop_session_server("rocketmq_cluster")


#: The retention the ``retention_rocketmq`` broker emulates (s): RocketMQ's ``fileReservedTime`` is whole hours.
RETENTION_S = 6.0
#: Its broker: 2 MB commit-log files (1 GB by default) whose time is up every hour of the day (``deleteWhen``,
#: so the clean service deletes expired files on every round, every half second, not once a day at 4 am), a
#: file expired an hour after it was last written (``fileReservedTime``, the least it takes), and a file that
#: a reader still maps destroyed a second after it was deleted (two minutes by default).
RETENTION_CONF = {
    "mappedFileSizeCommitLog": str(2 << 20), "fileReservedTime": "1", "deleteWhen": ";".join(f"{h:02d}" for h in range(24)),
    "cleanResourceInterval": "500", "destroyMapedFileIntervalForcibly": "1000", "diskMaxUsedSpaceRatio": "95",
    "timerWheelEnable": "false",
}


class ShortRetention:
    """A retention of ``seconds`` on a LocalRocketMQ started with ``RETENTION_CONF``: a thread that turns a
    commit-log file's modification time back two hours once it was last written ``seconds`` ago, so the
    broker's clean service (which expires a file an hour after its modification time, read from the file
    system: ``DefaultMappedFile.getLastModifiedTimestamp``) deletes it within half a second, oldest first,
    never the file being written (nor the one made ready after it). What RocketMQ then does is its own: consume queues' first offsets move up,
    a pull below them answers from the first offset on."""

    def __init__(self, mq: LocalRocketMQ, seconds: float) -> None:
        self.folder = mq.store_dir / "commitlog"
        self.seconds = seconds
        self.expired: list[str] = []  # the files it aged, in order
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            # never the file being written, nor the next one RocketMQ made ready beside it (AllocateMappedFileService)
            files = sorted(self.folder.glob("[0-9]" * 20))[:-2]
            now = time.time()
            for path in files:
                try:
                    written = path.stat().st_mtime
                    if written < now - 3600 or now - written < self.seconds:
                        continue
                    os.utime(path, (now - 7200, now - 7200))
                    self.expired.append(path.name)
                except FileNotFoundError:
                    continue

    def deleted(self) -> int:
        """How many of the files it aged the broker deleted."""
        return sum(not (self.folder / name).exists() for name in self.expired)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


#: Servers started in the background ahead of their first user (``start_early``), by fixture name:
#: the thread, and what it started or the error it met.
_EARLY: dict[str, tuple[threading.Thread, dict[str, Any]]] = {}


def start_early(name: str) -> None:
    """Start the session server ``name`` in a background thread now, ahead of the first test that asks for it
    (tests/conftest.py does so when the section of shared servers begins). Only ``retention_rocketmq`` is
    worth it: RocketMQ's clean service begins a minute after its broker started
    (``DefaultMessageStore.addScheduleTask``), a minute its tests would otherwise wait out, while this one
    idles (timer wheel off) beside the other servers' tests. Started from a thread, its JVMs are not tied
    to this process's life (``rstream.owned``): the fixture stops them after its last user, ``stop_early``
    at the session's end if no test took them, and LocalRocketMQ's own handler at interpreter exit."""
    if name != "retention_rocketmq" or name in _EARLY or name in _RUNNING:
        return
    found: dict[str, Any] = {}

    def start() -> None:
        try:
            home = Path(tempfile.mkdtemp(prefix="rocketmq-retention-"))
            found["home"] = home
            found["mq"] = LocalRocketMQ(home, broker_conf=RETENTION_CONF).start()
        except BaseException as err:  # the fixture raises it, in the test that asks
            found["error"] = err

    thread = threading.Thread(target=start, name=f"start {name}", daemon=True)
    thread.start()
    _EARLY[name] = (thread, found)


def stop_early() -> None:
    """Stop what ``start_early`` started and no test took (a session cut short before its user ran)."""
    while _EARLY:
        _name, (thread, found) = _EARLY.popitem()
        thread.join(timeout=300)
        if found.get("home") is not None:
            LocalRocketMQ(found["home"]).stop(grace=3.0)
            shutil.rmtree(found["home"], ignore_errors=True)


@pytest.fixture(scope="session")
def retention_rocketmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalRocketMQ, ShortRetention]]:
    """A LocalRocketMQ of its own (one broker) whose commit-log files are deleted ``RETENTION_S`` seconds after
    they were last written (``ShortRetention``), for the tests of what outlives retention; started early when
    the session has other servers' tests to run first (``start_early``)."""
    early = _EARLY.pop("retention_rocketmq", None)
    home: Path | None = None
    if early is not None:
        thread, found = early
        thread.join(timeout=300)
        home = found.get("home")
        if "error" in found or "mq" not in found:
            if home is not None:
                LocalRocketMQ(home).stop()  # whatever a failed start left
            raise found.get("error") or RuntimeError("the retention RocketMQ did not start within 300 s")
        mq = found["mq"]
    else:
        mq = LocalRocketMQ(tmp_path_factory.mktemp("rocketmq-retention"), broker_conf=RETENTION_CONF).start()
    _RUNNING["retention_rocketmq"] = mq
    retention = ShortRetention(mq, RETENTION_S)
    try:
        yield mq, retention
    finally:
        retention.stop()
        stop_session_server("retention_rocketmq")
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def healthy_cluster(rocketmq_cluster: LocalRocketMQ) -> Iterator[LocalRocketMQ]:
    """The two-broker cluster, every broker of it started again after the test (one it killed)."""
    yield rocketmq_cluster
    for i in range(len(rocketmq_cluster.broker_names)):
        if not rocketmq_cluster.broker_alive(i):
            rocketmq_cluster.start_broker(i)


def listening(pid: int) -> set[tuple[str, int]]:
    """``(address, port)`` of every TCP socket process ``pid`` listens on."""
    return {(c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN}


def leftovers(home: Path) -> list[str]:
    """Every live process whose command line mentions ``home`` (a LocalRocketMQ's JVMs do)."""
    return processes_mentioning([str(home)])


def create_topic(broker_addr: str, topic: str, queues: int = 4) -> None:
    """Create ``topic`` on the broker at ``broker_addr`` (readable and writable, ``queues`` queues)."""
    Client("unused:0").create_topic(broker_addr, topic, queues)


def topics(broker_addr: str) -> dict[str, Any]:
    """The broker's topic table, by name."""
    return Client("unused:0").topic_configs(broker_addr)


def send(broker_addr: str, topic: str, queue_id: int, payload: bytes) -> int:
    """Write one message to a queue of ``topic``; its offset in that queue."""
    return Client("unused:0").send(broker_addr, topic, queue_id, payload, {}, int(time.time() * 1000))


def max_offset(broker_addr: str, topic: str, queue_id: int) -> int:
    """The offset after the last message of a queue (how many messages it holds, from 0)."""
    return Client("unused:0").max_offset(broker_addr, topic, queue_id)


def min_offset(broker_addr: str, topic: str, queue_id: int) -> int:
    """The first offset a queue still has: 0 until RocketMQ deleted its oldest messages (retention)."""
    return Client("unused:0").min_offset(broker_addr, topic, queue_id)


#: Java's push consumers: RocketMQ's own (remoting) and the official gRPC client's, compiled once a session.
PUSH_CONSUME = Path(__file__).with_name("java") / "PushConsume.java"
GRPC_PUSH_CONSUME = Path(__file__).with_name("java") / "GrpcPushConsume.java"


class Delivered(NamedTuple):
    """A message as a Java push consumer got it: where it was stored, its ``KEYS``, body, and whether RocketMQ
    stored it as a committed transactional message (property ``TRAN_MSG``; None: the client does not say)."""

    broker: str
    queue_id: int
    offset: int
    keys: str | None
    body: bytes
    transactional: bool | None


def push_consume(namesrv: str, topic: str, n: int, logs: Path, *, group: str | None = None, timeout: float = 60.0,
                 linger: float = 1.0) -> list[Delivered]:
    """Every delivery of ``topic`` to Java's ``DefaultMQPushConsumer`` (RocketMQ's own client, from the jars
    LocalRocketMQ runs), a new consumer group reading from the first offset, until ``n`` distinct messages came
    and ``linger`` seconds more (repeats included, so a test sees them). Its logs go to ``logs``. About 3 s of
    JVM start, and 2 to 3 s of compiling the first time."""
    from rstream.rocketmq.local import default_lib

    lib = default_lib()
    if not (lib / "rocketmq-client-5.3.3.jar").exists():
        pytest.skip(f"RocketMQ's Java client is not in {lib}: run bash setup.sh")
    return _java_consume(PUSH_CONSUME, f"{lib}/*", f"-Drocketmq.client.logRoot={logs}", namesrv, topic, n,
                         group or f"java-push-{os.getpid()}-{time.monotonic_ns()}", timeout, linger)


def grpc_push_consume(proxy: str, topic: str, n: int, logs: Path, *, group: str | None = None,
                      timeout: float = 60.0, linger: float = 1.0) -> list[Delivered]:
    """As ``push_consume``, with the official gRPC Java client's ``PushConsumer`` (``rocketmq-client-java``,
    fetched by ``bash setup.sh``, else now) through the proxy at ``proxy`` (``LocalRocketMQ.proxy``), a new
    consumer group; ``transactional`` is None (its ``MessageView`` does not say). About 6 s with compiling."""
    from rstream.rocketmq.local import fetch_client_java

    return _java_consume(GRPC_PUSH_CONSUME, str(fetch_client_java()), f"-Drocketmq.log.root={logs}", proxy, topic,
                         n, group or f"grpc-push-{os.getpid()}-{time.monotonic_ns()}", timeout, linger)


def _java_consume(source: Path, classpath: str, log_root: str, endpoint: str, topic: str, n: int, group: str,
                  timeout: float, linger: float) -> list[Delivered]:
    """Run the consumer of ``source`` (compiled against ``classpath``); its ``MSG`` lines, each a delivery."""
    from rstream.rocketmq.local import find_java

    done = subprocess.run(
        [find_java(), "-Xmx128m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", log_root,
         "-cp", f"{_compiled(source, classpath)}:{classpath}", source.stem, endpoint, topic, group, str(n),
         str(int(timeout * 1000)), str(int(linger * 1000))], capture_output=True, text=True,
        timeout=timeout + linger + 60)
    got = [Delivered(b, int(q), int(o), None if k == "null" else k, base64.b64decode(body),
                     None if t == "?" else t == "true")
           for _msg, b, q, o, k, body, t in (line.split("\t") for line in done.stdout.splitlines()
                                              if line.startswith("MSG\t"))]
    assert done.returncode == 0, (f"{source.stem} got {len({(d.broker, d.queue_id, d.offset) for d in got})} of "
                                  f"{n} messages of {topic} within {timeout:g} s: {done.stderr[-3000:]}")
    return got


@functools.cache
def _compiled(source: Path, classpath: str) -> Path:
    """``source`` compiled once a test session (2 to 6 s), into a folder of its own."""
    from rstream.rocketmq.local import find_java

    out = Path(tempfile.mkdtemp(prefix="rstream-java-"))
    javac = Path(find_java()).resolve().with_name("javac")
    assert javac.is_file(), f"no javac beside {find_java()}: install a JDK 17 (bash setup.sh installs openjdk-17-jdk-headless)"
    subprocess.run([str(javac), "-nowarn", "-cp", classpath, "-d", str(out), str(source)], check=True, timeout=120)
    return out


def route(namesrv: str, topic: str) -> dict[str, Any] | None:
    """The name server's route of ``topic``, None while no live broker serves it."""
    return Client(namesrv).route(topic)


# -- the remoting protocol's bytes, written as RocketMQ writes them ---------------------------------
#: ``MessageDecoder.MESSAGE_MAGIC_CODE`` (a topic's length in one byte) and ``MESSAGE_MAGIC_CODE_V2`` (a short).
MAGIC_V1, MAGIC_V2 = -626843481, -626843477


def stored_message(queue: int, offset: int, body: bytes, properties: str = "", *, topic: str = "t",
                   born: int = 1, store: int = 2, v2: bool = False, ipv6: bool = False,
                   compressed: bool = False) -> bytes:
    """One stored message as a pull returns it (``MessageDecoder.encode``'s layout, read in 5.3.3):
    total size, magic, body CRC, queue, flag, queue offset, physical offset, system flag, born time,
    born host, store time, store host, reconsume times, prepared offset, body, topic, properties.
    ``compressed``: the body zlib-compressed with the system flag saying so (as a Java producer
    compresses a body above 4 KB)."""
    import struct
    import zlib

    sysflag = (0x10 | 0x20 if ipv6 else 0) | (0x1 | 0x3 << 8 if compressed else 0)
    stored = zlib.compress(body) if compressed else body
    host = bytes(16 if ipv6 else 4) + struct.pack(">i", 10911)
    name, text = topic.encode(), properties.encode()
    tail = (host + struct.pack(">q", store) + host + struct.pack(">iq", 0, 0)
            + struct.pack(">i", len(stored)) + stored
            + (struct.pack(">h", len(name)) if v2 else bytes([len(name)])) + name
            + struct.pack(">h", len(text)) + text)
    size = 48 + len(tail)
    return struct.pack(">iiIiiqqiq", size, MAGIC_V2 if v2 else MAGIC_V1, zlib.crc32(stored), queue, 0, offset,
                       0, sysflag, born) + tail


def frame(header: dict[str, Any] | bytes, body: bytes = b"") -> bytes:
    """A remoting frame (``RemotingCommand.encode``): length, serialize type and header length, header
    JSON, body. ``header`` as a dict is written as JSON; as bytes, sent as it is."""
    import json
    import struct

    data = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack(">II", 4 + len(data) + len(body), len(data)) + data + body


class ScriptedServer:
    """A fake RocketMQ server on 127.0.0.1 (a thread): per connection, reads each request frame and
    answers it with ``answer(header)``'s bytes (``frame(...)`` for a well-formed one), sent in pieces
    of ``chunk`` bytes ``pause`` seconds apart; ``None`` closes the connection. ``tls``: a server
    ``ssl.SSLContext`` every connection is wrapped in. ``connections`` counts the connections."""

    def __init__(self, answer: Any, chunk: int = 1 << 20, pause: float = 0.0, tls: Any = None) -> None:
        import socket
        import threading

        self.answer, self.chunk, self.pause, self.tls = answer, chunk, pause, tls
        self.requests: list[dict[str, Any]] = []
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: Any) -> None:
        import json
        import struct

        if self.tls is not None:
            try:
                conn = self.tls.wrap_socket(conn, server_side=True)
            except OSError:  # a client that did not trust the certificate
                conn.close()
                return
        with conn:
            while True:
                head = _recv_all(conn, 8)
                if len(head) < 8:
                    return
                length, header_length = struct.unpack(">II", head)
                rest = _recv_all(conn, length - 4)
                header = json.loads(rest[:header_length])
                self.requests.append(header)
                data = self.answer(header)
                if data is None:
                    return
                try:
                    for at in range(0, len(data), self.chunk):
                        conn.sendall(data[at:at + self.chunk])
                        time.sleep(self.pause)
                except OSError:
                    return

    def close(self) -> None:
        self._listener.close()


def _recv_all(conn: Any, n: int) -> bytes:
    """Up to ``n`` bytes from ``conn`` (fewer only at its end); a TLS socket takes no MSG_WAITALL."""
    parts, left = [], n
    while left:
        try:
            chunk = conn.recv(left)
        except OSError:
            break
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)

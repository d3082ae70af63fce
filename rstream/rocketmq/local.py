"""A real Apache RocketMQ on this machine: a name server and a broker, for notebooks, demos and tests.

    from rstream.rocketmq import LocalRocketMQ

    with LocalRocketMQ() as mq:     # two JVMs on 127.0.0.1 only, ready when this returns (15 to 25 s)
        mq.namesrv                  # "127.0.0.1:<port>": what RocketMQ clients (and RocketMQBroker) connect to
        broker = mq.broker()        # RocketMQBroker(mq.namesrv), the rstream.broker.Broker contract
        mq.kill_broker()            # SIGKILL the JVM that holds the broker's store, as a crashed machine would
        mq.start_broker()           # the same store, the same ports

Two JVMs: the name server (``NamesrvStartup``) and the gRPC proxy in local mode (``ProxyStartup -pm
local``), which runs the broker inside its own JVM. ``LocalRocketMQ(brokers=2)`` runs a cluster instead:
the name server, a JVM per broker (``BrokerStartup``; ``broker-a``, ``broker-b``, ..., each with its own
store and ports) and the proxy in cluster mode in a JVM of its own; ``kill_broker(i)`` / ``start_broker(i)``
act on one broker. They come from pinned Maven Central jars
(``rocketmq/pom.xml``, RocketMQ ``ROCKETMQ_VERSION``) that ``bash setup.sh`` copies once into a cache
outside the repository (``~/.cache/rstream/rocketmq-<version>/lib``; the environment variable
``RSTREAM_ROCKETMQ_LIB`` points elsewhere). Without them ``start()`` fetches them with Maven into
the default cache.

Every port listens on ``host`` (127.0.0.1) only: RocketMQ is told so where it can be (``bindAddress``)
and a small ``LD_PRELOAD`` shim (``bind_host.c``, compiled once into the cache) turns the wildcard
binds RocketMQ cannot be told about (the proxy's gRPC server, the broker's HA port) into binds on
``host``. Everything the JVMs write lives under ``home`` (default ``./rstream-data/rocketmq``):
``conf/``, ``store/`` (the broker's commit log, queues, topics and offsets, kept across starts; with
several brokers ``store/broker-a``, ...), ``logs/`` (``namesrv.out``, ``proxy.out``, ``broker-a.out``:
each JVM's console; ``rocketmqlogs/``: RocketMQ's own logs, a broker of a cluster's in
``brokers/<name>/logs/rocketmqlogs/``), ``pids/``. One LocalRocketMQ per ``home``: ``start()`` first stops what an earlier run (a kernel that
died) left running there.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import psutil

from rstream.owned import ended_with_this_process
from rstream.rocketmq.errors import RocketMQError
from rstream.rocketmq.local_security import LocalSecurity
from rstream.rocketmq.remoting import (
    GET_BROKER_CLUSTER_INFO,
    UPDATE_BROKER_CONFIG,
    Connection,
    Credentials,
    RemotingError,
)

if TYPE_CHECKING:
    from rstream.rocketmq.broker import RocketMQBroker

ROCKETMQ_VERSION = "5.3.3"
"""The RocketMQ release LocalRocketMQ runs (``rocketmq.version`` in ``rocketmq/pom.xml``)."""
CLIENT_JAVA_VERSION = "5.0.7"
"""The official gRPC Java client the tests consume with (``rocketmq-client-java.version`` in ``rocketmq/pom.xml``)."""
LIB_ENV = "RSTREAM_ROCKETMQ_LIB"
"""Environment variable naming the folder of RocketMQ's jars (default: a cache in ``~/.cache/rstream``)."""
BIND_HOST_ENV = "RSTREAM_BIND_HOST"
"""Environment variable telling the bind shim which IPv4 address a wildcard bind becomes."""
MIN_JAVA = 17
DISK_FULL_RATIO = 0.90
"""RocketMQ's broker refuses writes once its disk is fuller than this (``diskSpaceWarningLevelRatio``)."""

POM = Path(__file__).resolve().parents[2] / "rocketmq" / "pom.xml"
_SHIM_SOURCE = Path(__file__).with_name("bind_host.c")
# The jars that must be in the lib folder: the three servers; Maven copies their dependencies beside them.
_MAIN_JARS = tuple(f"rocketmq-{name}-{ROCKETMQ_VERSION}.jar" for name in ("namesrv", "broker", "proxy"))
_NAMESRV_CLASS = "org.apache.rocketmq.namesrv.NamesrvStartup"
_PROXY_CLASS = "org.apache.rocketmq.proxy.ProxyStartup"
_BROKER_CLASS = "org.apache.rocketmq.broker.BrokerStartup"
_NAMESRV_READY = "The Name Server boot success"
_BROKER_READY = "boot success. serializeType="
_PROXY_READY = "rocketmq-proxy startup successfully"
# Small JVMs (as rstream.cluster's daemons): serial GC, the client compiler only, a small code cache;
# one Netty buffer arena each (Netty's and gRPC's shaded copy; by default two per core, each holding
# chunks of its own): a local broker has a handful of connections, and this keeps about 30 MB of the
# two JVMs' memory (measured: proxy 276 -> 258 MB PSS, name server 122 -> 107, after 900 messages).
_JAVA_OPTS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:ReservedCodeCacheSize=32m",
              "-XX:-OmitStackTraceInFastThrow",
              *(f"-D{netty}.allocator.{arenas}=1" for netty in ("io.netty", "io.grpc.netty.shaded.io.netty")
                for arenas in ("numDirectArenas", "numHeapArenas")))
# The name server allocates little: an 8 MB young generation keeps the rest of its eden untouched. With a
# 16 MB first heap for both: the name server 106 -> 95 MB PSS, the proxy 257 -> 248 (the 900 messages above).
_YOUNG = {"namesrv": ("-Xmn8m",)}
# JDK 17 closes the JDK's internals; RocketMQ's store reaches into them (DefaultMappedFile casts its
# mapped buffers to sun.nio.ch.DirectBuffer and opens MappedByteBuffer.isLoaded0), Netty into java.nio.
_OPENS = tuple(f"--add-opens=java.base/{package}=ALL-UNNAMED"
               for package in ("java.lang", "java.nio", "sun.nio.ch", "java.util"))
_CLUSTER = "DefaultCluster"
_MAX_BROKERS = 26  # broker-a .. broker-z
_MEMORY = re.compile(r"^\d+[kmg]$")
_MANAGED_BROKER_KEYS = {"brokerClusterName", "brokerName", "brokerId", "namesrvAddr", "brokerIP1", "brokerIP2",
                        "listenPort", "bindAddress", "storePathRootDir", "storePathCommitLog"}


# ---------------------------------------------------------------------------------------- the jars


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/rstream`` (default ``~/.cache/rstream``): the jars and the bind shim."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rstream"


def default_lib() -> Path:
    """Where RocketMQ's jars are: ``$RSTREAM_ROCKETMQ_LIB``, else ``<cache>/rocketmq-<version>/lib``."""
    override = os.environ.get(LIB_ENV)
    if override:
        return Path(override).expanduser().absolute()
    return cache_dir() / f"rocketmq-{ROCKETMQ_VERSION}" / "lib"


def _fetch_command(lib: Path) -> list[str]:
    return ["mvn", "-q", "-B", "-f", str(POM), "dependency:copy-dependencies", f"-DoutputDirectory={lib}"]


def _has_jars(lib: Path) -> bool:
    return all((lib / jar).is_file() for jar in _MAIN_JARS)


def fetch_jars(lib: str | os.PathLike[str] | None = None) -> Path:
    """Copy RocketMQ's jars (``rocketmq/pom.xml``) from Maven Central into ``lib`` unless already there.

    ``lib`` defaults to ``default_lib()``. Returns the folder. Needs Maven (``mvn``) and the repository's
    ``rocketmq/pom.xml``; raises ``RocketMQError`` saying what to install or run when either is missing.
    """
    folder = Path(lib).expanduser().absolute() if lib is not None else default_lib()
    return _fetch(folder, _fetch_command, _has_jars, "RocketMQ's jars are", f"RocketMQ {ROCKETMQ_VERSION}'s jars")


def client_java_jar() -> Path:
    """The official gRPC Java client's shaded jar (``rocketmq-client-java``), in a cache folder of its own.

    Not beside the servers' jars: it bundles RocketMQ's gRPC protocol classes (on shaded protobuf), which on
    the proxy's classpath would shadow the proxy's own. Only the tests use it (Java's gRPC ``PushConsumer``).
    """
    name = f"rocketmq-client-java-{CLIENT_JAVA_VERSION}"
    return cache_dir() / name / f"{name}.jar"


def _client_java_command(folder: Path) -> list[str]:
    return ["mvn", "-q", "-B", "-f", str(POM), "dependency:copy@client-java", f"-DoutputDirectory={folder}"]


def fetch_client_java() -> Path:
    """Copy the official gRPC Java client's jar (``client_java_jar()``) from Maven Central unless already there.

    Returns the jar. Needs what ``fetch_jars`` needs; raises ``RocketMQError`` as it does.
    """
    jar = client_java_jar()
    _fetch(jar.parent, _client_java_command, lambda folder: (folder / jar.name).is_file(),
           "the official gRPC Java client's jar is", f"rocketmq-client-java {CLIENT_JAVA_VERSION}")
    return jar


def _fetch(folder: Path, command: Callable[[Path], list[str]], complete: Callable[[Path], bool], what: str,
           pinned: str) -> Path:
    """Run Maven's ``command`` into a new folder beside ``folder``, renamed ``folder`` once ``complete``.

    ``what``: "<the jars> are" (what is missing), ``pinned``: what Maven could not fetch (with its version).
    """
    if complete(folder):
        return folder
    if not POM.is_file():
        raise RocketMQError(f"{what} not in {folder}, and {POM} (the pom that fetches them) is missing: install "
                            "rstream from its git repository (pip install -e .) and run `bash setup.sh` there")
    if shutil.which("mvn") is None:
        raise RocketMQError(f"{what} not in {folder}, and fetching needs Maven (mvn), which is not "
                            "installed: run `bash setup.sh` (it installs Maven), or `sudo apt-get install maven`, "
                            "then try again")
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        done = subprocess.run(command(partial), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=900)
        if done.returncode != 0 or not complete(partial):
            output = "\n".join("    " + line for line in (done.stdout + done.stderr).splitlines()[-20:])
            raise RocketMQError(f"Maven could not fetch {pinned} (exit code {done.returncode}); is Maven Central "
                                f"reachable? Run it yourself to see why:\n    {' '.join(command(folder))}\n{output}")
        if folder.exists() and not complete(folder):
            shutil.rmtree(folder)  # an incomplete copy made by hand
        try:
            partial.rename(folder)
        except OSError:
            if not complete(folder):  # not another process that fetched them at the same time
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return folder


def bind_shim() -> Path:
    """The bind shim (``bind_host.c``) compiled into the cache, built now if missing; its path.

    Raises ``RocketMQError`` if there is no C compiler (``cc``) to build it.
    """
    source = _SHIM_SOURCE.read_bytes()
    shim = cache_dir() / f"libbindhost-{hashlib.sha256(source).hexdigest()[:12]}.so"
    if shim.is_file():
        return shim
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RocketMQError(f"building {shim.name} (which keeps RocketMQ's ports on one address) needs a C "
                            "compiler, and there is none (cc): run `bash setup.sh`, or "
                            "`sudo apt-get install gcc libc6-dev`, then try again")
    shim.parent.mkdir(parents=True, exist_ok=True)
    built = shim.with_name(f".{shim.name}.{os.getpid()}")
    done = subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(built), str(_SHIM_SOURCE), "-ldl"],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        built.unlink(missing_ok=True)
        raise RocketMQError(f"{compiler} could not build {shim.name} from {_SHIM_SOURCE}:\n{done.stderr[-2000:]}")
    os.replace(built, shim)
    return shim


def prepare() -> tuple[Path, Path]:
    """Fetch the jars and build the bind shim where missing (what ``bash setup.sh`` runs); ``(lib, shim)``."""
    return fetch_jars(), bind_shim()


# ------------------------------------------------------------------------------- the machine


def find_java() -> str:
    """The ``java`` to run: ``$JAVA_HOME/bin/java``, else the one on ``PATH``; checked to be 17 or newer."""
    java_home = os.environ.get("JAVA_HOME")
    candidate = Path(java_home) / "bin" / "java" if java_home else None
    java = str(candidate) if candidate is not None and candidate.is_file() else shutil.which("java")
    if java is None:
        where = f"JAVA_HOME={java_home} has no bin/java and " if java_home else ""
        raise RocketMQError(f"Java was not found ({where}no java on PATH): RocketMQ needs Java {MIN_JAVA} or "
                            "newer; run `bash setup.sh` (it installs it), or `sudo apt-get install "
                            "openjdk-17-jre-headless`, or set JAVA_HOME to a JDK 17+")
    version = java_version(java)
    if version < MIN_JAVA:
        raise RocketMQError(f"{java} is Java {version}; RocketMQ {ROCKETMQ_VERSION} here needs Java {MIN_JAVA} or "
                            "newer: install it (`sudo apt-get install openjdk-17-jre-headless`) and put it first "
                            "on PATH or set JAVA_HOME to it")
    return java


def java_version(java: str) -> int:
    """The major version of ``java`` (8 for ``1.8.0_x``, 17 for ``17.0.x``); raises if it cannot say."""
    try:
        done = subprocess.run([java, "-version"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=60)
    except OSError as exc:
        raise RocketMQError(f"cannot run {java} ({exc}): install Java {MIN_JAVA}+ or set JAVA_HOME") from exc
    match = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if match is None:
        raise RocketMQError(f"cannot tell the version of {java} (`java -version` said "
                            f"{(done.stderr + done.stdout).strip()[:200]!r}): install Java {MIN_JAVA}+")
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def check_disk(folder: Path) -> None:
    """Raise ``RocketMQError`` if the disk holding ``folder`` is more than 90 % full (the broker would refuse writes)."""
    usage = shutil.disk_usage(folder)
    ratio = usage.used / usage.total if usage.total else 0.0
    if ratio > DISK_FULL_RATIO:
        raise RocketMQError(f"the disk holding {folder} is {ratio:.0%} full ({usage.free / 2**30:.1f} GiB free); "
                            f"RocketMQ's broker refuses every write above {DISK_FULL_RATIO:.0%}: free some space "
                            "or give LocalRocketMQ(home=...) a folder on another disk")


def _bindable(host: str, port: int) -> bool:
    # As the JVMs bind (SO_REUSEADDR): a port only in TIME_WAIT counts as free, a listening one does not.
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def _holder(port: int) -> str:
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
                return f" (listening: pid {conn.pid}, {psutil.Process(conn.pid).name()})"
    except (psutil.Error, OSError):
        pass
    return ""


def _listening(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (looked up, never connected to: a connection to the
    broker's HA port would count as a slave)."""
    try:
        return {c.laddr.port for c in psutil.Process(pid).net_connections(kind="tcp")
                if c.status == psutil.CONN_LISTEN and c.laddr}
    except psutil.Error:
        return set()


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "    (no log)"
    return "\n".join("    " + line for line in text[-lines:]) or "    (empty)"


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# ------------------------------------------------------------------------------- LocalRocketMQ


class LocalRocketMQ:
    """A RocketMQ name server and broker (inside the gRPC proxy, local mode) on ``host`` only.

    ``start()`` returns once both JVMs are ready: their start lines printed, every port listening and
    the broker registered with the name server (6 to 8 s on 2 quiet cores: RocketMQ 5.3.3's broker often
    skips its registration at start, its connection to the name server not being up yet, and would
    register on its first scheduled round 10 s later; ``start()`` asks it to register at once,
    ``_nudge_registration``); ``stop()`` ends both (SIGTERM, then SIGKILL
    after a grace period) and checks none is left; it also runs at interpreter exit. Both are
    idempotent; ``with LocalRocketMQ() as mq:`` works. The JVMs also stop when the process that started
    them dies without exiting (a kernel that JupyterLab's shut-down SIGKILLs after 5 s, while the proxy
    takes about 12 s to stop): ``rstream.owned``.

    Ports are free ones picked at ``start()`` unless given: ``namesrv_port``, ``broker_port`` (the
    broker also listens on ``broker_port - 2``, its fast remoting port, and ``broker_port + 1``, its
    HA port), ``proxy_port`` (gRPC) and ``proxy_remoting_port``. A given port that is taken raises
    ``RocketMQError`` before anything starts. ``kill_broker()`` / ``start_broker()`` keep them.

    ``brokers``: how many brokers (``broker-a``, ``broker-b``, ...; up to 26). One (the default) runs it
    inside the proxy's JVM as above; more run each in a JVM of its own (``broker_heap`` each, free ports:
    ``broker_port`` is for one broker only) and the proxy in cluster mode, started once they registered
    (about 20 s on 2 shared cores; four JVMs of about 670 MB resident together, 500 MB with the timer
    wheel off). ``kill_broker(i)``, ``stop_broker(i)`` and ``start_broker(i)`` act on broker ``i``.

    Heaps are JVM sizes (``"128m"``, ``"1g"``). The two JVMs take about 320 MB resident after the start
    and a quarter of a core when idle, most of it RocketMQ's timer wheel (delayed messages; the official client's
    ``SimpleConsumer`` receives by pop, which a broker refuses without it). ``broker_conf`` adds broker
    settings (RocketMQ's ``broker.conf`` keys, e.g. ``{"flushDiskType": "SYNC_FLUSH"}``) to rstream's
    (``autoCreateTopicEnable=false``, pulls of up to 8192 messages, a half message's check-back every 2 s
    once due, at most 150 times, its end marked within 0.2 s): ``{"timerWheelEnable": "false"}``
    saves most of that CPU and memory (about 250 MB, and 10 % of a core with a job watching; ``bench/RESULTS.md`` rows 34
    and 36) where no official consumer reads.
    ``acl=True``: authentication and authorization on (RocketMQ 5.3's ACL 2.0), with a super user
    (``admin_credentials``) and the user ``broker()`` signs with (``credentials``: ``rstream``, allowed
    what rstream needs); ``add_user`` makes more, allowed less. ``tls=True``: every port speaks TLS only
    (enforcing mode), with a certificate signed by a CA made for this home (``tls_ca``, which
    ``broker()`` checks it against). ``rstream.rocketmq.local_security`` says which settings.
    ``start()`` raises ``RocketMQError`` saying what to do when Java 17+ is missing, the jars are
    missing and cannot be fetched, a port is taken, the disk is more than 90 % full, or a JVM exits
    or is not ready within ``start_timeout`` seconds (with the end of its log).
    """

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        *,
        host: str = "127.0.0.1",
        namesrv_port: int | None = None,
        broker_port: int | None = None,
        proxy_port: int | None = None,
        proxy_remoting_port: int | None = None,
        namesrv_heap: str = "128m",
        proxy_heap: str = "256m",
        broker_conf: dict[str, str] | None = None,
        start_timeout: float = 120.0,
        brokers: int = 1,
        broker_heap: str = "256m",
        acl: bool = False,
        tls: bool = False,
    ) -> None:
        try:
            socket.inet_aton(host)
        except OSError:
            raise RocketMQError(f"host={host!r} is not an IPv4 address: give the address to listen on, "
                                "e.g. '127.0.0.1'") from None
        if not isinstance(brokers, int) or not 1 <= brokers <= _MAX_BROKERS:
            raise RocketMQError(f"brokers={brokers!r}: give a number of brokers from 1 to {_MAX_BROKERS}")
        if brokers > 1 and broker_port is not None:
            raise RocketMQError(f"broker_port={broker_port} names one broker's port, and brokers={brokers} start "
                                "several: leave broker_port out (each broker gets free ports), or start one broker")
        for name, heap in (("namesrv_heap", namesrv_heap), ("proxy_heap", proxy_heap), ("broker_heap", broker_heap)):
            if not _MEMORY.match(heap.lower()) or _megabytes(heap.lower()) < 32:
                raise RocketMQError(f"{name}={heap!r} is not a JVM heap size it can use: write it as '256m' or "
                                    "'1g' (32m at least)")
        self.broker_names = [f"broker-{chr(ord('a') + i)}" for i in range(brokers)]
        """The brokers' names (``brokerName``): ``broker-a``, ``broker-b``, ..."""
        self._wanted = {"namesrv": namesrv_port, "broker": broker_port, "proxy": proxy_port,
                        "proxy_remoting": proxy_remoting_port, **{_port_key(i): None for i in range(1, brokers)}}
        for name, port in self._wanted.items():
            low = 3 if name.startswith("broker") else 1  # the broker's fast remoting port is broker_port - 2
            if port is not None and not low <= port <= 65534:
                raise RocketMQError(f"{name}_port={port} is not a port it can use: give {low}..65534, or None "
                                    "for a free one")
        given = [p for p in self._wanted.values() if p is not None]
        if len(set(given)) != len(given):
            raise RocketMQError(f"the ports given repeat one another ({self._wanted}): give different ports")
        managed = sorted(set(broker_conf or {}) & _MANAGED_BROKER_KEYS)
        if managed:
            raise RocketMQError(f"broker_conf sets {', '.join(managed)}, which LocalRocketMQ sets itself: give the "
                                "ports and host as LocalRocketMQ's arguments, and home= for the store")
        self.host = host
        self.broker_conf = {str(key): str(value) for key, value in (broker_conf or {}).items()}
        self.namesrv_heap = namesrv_heap.lower()
        self.proxy_heap = proxy_heap.lower()
        self.broker_heap = broker_heap.lower()
        self.start_timeout = start_timeout
        self._home = Path(home if home is not None else Path("rstream-data") / "rocketmq")
        self._home = self._home.expanduser().absolute().resolve()
        self._security = LocalSecurity(self._home, host, acl, tls)
        self._ports: dict[str, int] = {}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._java: str | None = None
        self._lib: Path | None = None
        self._shim: Path | None = None
        self._at_exit = False
        self._started = False
        self.start_seconds: float | None = None
        """How long the last ``start()`` took, in seconds."""
        self.broker_start_seconds: float | None = None
        """How long the last ``start_broker()`` took, in seconds."""
        self.leftovers_stopped: list[int] = []
        """Pids of JVMs an earlier run left in ``home`` that the last ``start()`` stopped."""

    # ------------------------------------------------------------------ where it is

    @property
    def home(self) -> Path:
        """The folder holding everything the JVMs write: ``conf/``, ``store/``, ``logs/``, ``pids/``."""
        return self._home

    @property
    def log_dir(self) -> Path:
        """``namesrv.out`` and ``proxy.out`` (each JVM's console) and ``rocketmqlogs/`` (RocketMQ's logs)."""
        return self._home / "logs"

    @property
    def store_dir(self) -> Path:
        """The broker's store: commit log, consume queues, ``config/`` (topics, offsets, groups); with
        several brokers, one folder per broker in it (``store/broker-a``, ...)."""
        return self._home / "store"

    @property
    def clustered(self) -> bool:
        """Whether the brokers run in JVMs of their own, the proxy in cluster mode (``brokers > 1``)."""
        return len(self.broker_names) > 1

    def _broker_index(self, i: int) -> int:
        if not isinstance(i, int) or not 0 <= i < len(self.broker_names):
            raise RocketMQError(f"there is no broker {i!r}: this LocalRocketMQ runs brokers 0..{len(self.broker_names) - 1} "
                                f"({', '.join(self.broker_names)})")
        return i

    def _broker_process(self, i: int) -> str:
        """The name of the JVM that holds broker ``i``: the proxy (one broker, local mode) or its own."""
        return self.broker_names[self._broker_index(i)] if self.clustered else "proxy"

    def _address(self, name: str) -> str:
        if name not in self._ports:
            raise RocketMQError("LocalRocketMQ is not running: call start() first")
        return f"{self.host}:{self._ports[name]}"

    @property
    def namesrv(self) -> str:
        """``"127.0.0.1:<port>"``: the name server, what RocketMQ clients and ``RocketMQBroker`` connect to."""
        return self._address("namesrv")

    @property
    def proxy(self) -> str:
        """``"127.0.0.1:<port>"``: the proxy's gRPC endpoint (RocketMQ 5 gRPC clients)."""
        return self._address("proxy")

    @property
    def proxy_remoting(self) -> str:
        """``"127.0.0.1:<port>"``: the proxy's remoting endpoint (RocketMQ 4 clients through the proxy)."""
        return self._address("proxy_remoting")

    @property
    def broker_addr(self) -> str:
        """``"127.0.0.1:<port>"``: the (first) broker's remoting port, the address it registers with the name server."""
        return self._address("broker")

    @property
    def broker_addrs(self) -> list[str]:
        """Every broker's remoting address, in the order of ``broker_names``."""
        return [self._address(_port_key(i)) for i in range(len(self.broker_names))]

    @property
    def ports(self) -> dict[str, int]:
        """Every port the JVMs listen on, by use (the broker's fast remoting and HA ports included; with
        several brokers the second's are ``broker1``, ``broker1_fast``, ``broker1_ha``, and so on)."""
        if not self._ports:
            raise RocketMQError("LocalRocketMQ is not running: call start() first")
        out = {"namesrv": self._ports["namesrv"]}
        for i in range(len(self.broker_names)):
            key = _port_key(i)
            broker = self._ports[key]
            out.update({key: broker, f"{key}_fast": broker - 2, f"{key}_ha": broker + 1})
        out.update({"proxy": self._ports["proxy"], "proxy_remoting": self._ports["proxy_remoting"]})
        return out

    @property
    def running(self) -> bool:
        """Whether this object started RocketMQ, has not stopped it, and the name server is alive."""
        proc = self._procs.get("namesrv")
        return bool(self._ports) and proc is not None and proc.poll() is None

    @property
    def broker_running(self) -> bool:
        """Whether the (first) broker's JVM is alive: False after ``kill_broker()``."""
        return self.broker_alive(0)

    def broker_alive(self, i: int = 0) -> bool:
        """Whether broker ``i``'s JVM is alive: False after ``kill_broker(i)``."""
        proc = self._procs.get(self._broker_process(i))
        return proc is not None and proc.poll() is None

    @property
    def pids(self) -> dict[str, int]:
        """The live JVMs' pids: ``{"namesrv": ..., "proxy": ...}`` (one broker: the proxy holds it), and
        ``"broker-a"``, ``"broker-b"``, ... with several."""
        return {name: proc.pid for name, proc in self._procs.items() if proc.poll() is None}

    def rss_bytes(self) -> int:
        """Resident memory of the live JVMs together, in bytes."""
        total = 0
        for pid in self.pids.values():
            try:
                total += psutil.Process(pid).memory_info().rss
            except psutil.Error:
                pass
        return total

    def broker(self) -> RocketMQBroker:
        """A ``RocketMQBroker`` on this RocketMQ (``RocketMQBroker(self.namesrv)``)."""
        from rstream.rocketmq.broker import RocketMQBroker

        user = self._security.credentials
        return RocketMQBroker(self.namesrv, access_key=user.access_key if user else None,
                              secret_key=user.secret_key if user else None, tls=self._security.ca or False)

    @property
    def credentials(self) -> Credentials | None:
        """With ``acl=True``: the access and secret key of user ``rstream``, which ``broker()`` signs with."""
        return self._security.credentials

    @property
    def admin_credentials(self) -> Credentials:
        """With ``acl=True``: the super user's access and secret key (it may do anything, make users)."""
        return self._security.admin_credentials

    @property
    def tls_ca(self) -> str | None:
        """With ``tls=True``: the CA file that signed the servers' certificate (``RocketMQBroker(tls=...)``)."""
        return self._security.ca

    def add_user(self, username: str, secret_key: str, allow: dict[str, list[str]]) -> Credentials:
        """With ``acl=True``: a user allowed ``allow``, resource -> actions, e.g. ``{"Topic:*": ["Sub",
        "Get"], "Group:*": ["Sub"]}`` (RocketMQ's resources: ``Topic:<name>``, ``Group:<name>``, a name
        ending in ``*`` for a prefix; actions ``Pub``, ``Sub``, ``Create``, ``Update``, ``Delete``, ``Get``,
        ``List``, ``All``); its credentials."""
        return self._security.add_user(self.broker_addrs, username, secret_key, allow)

    def __repr__(self) -> str:
        where = f"namesrv={self.namesrv}, proxy={self.proxy}" if self._ports else "stopped"
        return f"LocalRocketMQ({where}, home={str(self._home)!r})"

    # ------------------------------------------------------------------ start / stop

    def start(self, fresh_store: bool = False) -> LocalRocketMQ:
        """Start the name server, then the proxy with its broker; return once both are ready (``self``).

        Stops what an earlier run left in ``home`` first. With ``fresh_store``, the broker then starts on
        an empty store: the topics, messages and consumer offsets of earlier runs in ``home`` are removed
        (a notebook run again from the top). Without it they are kept, as a restarted broker keeps them;
        deleting a topic does not shrink RocketMQ's commit log, which every start reads back (the proxy
        of notebook 07 grew by about 70 MB over ten runs on one store). Raises ``RocketMQError`` (saying
        what to do) if something needed is missing or a JVM does not get ready; then nothing it started
        is left.
        """
        if self._ports:
            return self
        self._started = True
        began = time.monotonic()
        self._java = find_java()
        self._lib = self._jars()
        self._shim = bind_shim()
        for sub in ("conf", "logs", "pids", "store", "tmp"):
            (self._home / sub).mkdir(parents=True, exist_ok=True)
        check_disk(self._home)
        self.leftovers_stopped = self._stop_leftovers()
        if fresh_store:  # only now: a JVM of an earlier run could still have been writing to it
            shutil.rmtree(self.store_dir)
            self.store_dir.mkdir()
        if not self._at_exit:
            atexit.register(self._stop_at_exit)
            self._at_exit = True
        try:
            for attempt in range(3):
                self._ports = self._pick_ports()
                self._write_conf()
                deadline = time.monotonic() + self.start_timeout
                try:
                    self._start_namesrv(deadline)
                    if self.clustered:
                        self._start_cluster(deadline)
                    else:
                        self._start_proxy(deadline)
                    self._security.create_users(self.broker_addrs, timeout=10.0)
                    break
                except _PortRace:
                    self._stop_processes(grace=5.0)
                    if attempt == 2:
                        raise
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began
        return self

    def stop(self, grace: float = 30.0) -> None:
        """Stop both JVMs: SIGTERM, then SIGKILL what is left after ``grace`` s (the proxy takes about 12 s).

        Safe to call twice. An object that was never started stops whatever an earlier run left in its
        ``home`` (a clean-up by hand); a started one only what it started, so a stale object from an
        earlier notebook cell cannot stop a newer RocketMQ. Raises ``RocketMQError`` if a JVM survives SIGKILL.
        """
        if not self._started:
            self._stop_leftovers()
            return
        self._stop_processes(grace)
        self._ports = {}
        if self._at_exit:
            atexit.unregister(self._stop_at_exit)
            self._at_exit = False

    def _stop_at_exit(self) -> None:
        try:
            self._stop_processes(grace=5.0)
        except Exception as exc:  # an exiting interpreter has nobody to tell but stderr
            print(f"rstream.rocketmq: {exc}", file=sys.stderr)

    def __enter__(self) -> LocalRocketMQ:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # ------------------------------------------------------------------ the broker, for fault demos

    def kill_broker(self, i: int = 0, timeout: float = 30.0) -> int:
        """SIGKILL the JVM holding broker ``i``'s store, as a crashed machine would; its pid. With one
        broker that JVM is the proxy's (local mode); with several, the broker's own.

        Returns once the process is gone. The name server stays up and drops the broker once it sees
        the connection close. Does nothing (returns 0) if the broker is already down.
        """
        if not self._ports:
            raise RocketMQError("LocalRocketMQ is not running: call start() first")
        proc = self._procs.get(self._broker_process(i))
        if proc is None or proc.poll() is not None:
            return 0
        proc.kill()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RocketMQError(f"the JVM of {self.broker_names[i]} (pid {proc.pid}) is still there {timeout:.0f} s "
                                "after SIGKILL: end it by hand (kill -9 <pid>)") from None
        return proc.pid

    def stop_broker(self, i: int = 0, grace: float = 30.0) -> None:
        """Stop broker ``i``'s JVM cleanly (SIGTERM; SIGKILL after ``grace`` s), as an operator's shutdown
        would: the broker unregisters from the name server and flushes its store. ``start_broker(i)`` starts it again."""
        if not self._ports:
            raise RocketMQError("LocalRocketMQ is not running: call start() first")
        self._end(self._broker_process(i), grace)

    def start_broker(self, i: int = 0) -> LocalRocketMQ:
        """Start broker ``i``'s JVM again after ``kill_broker(i)``, on the same store and ports; return once ready.

        The broker recovers its store (the commit log written before the kill, topics, offsets) and
        registers with the name server again. Does nothing if it is running.
        """
        if not self._ports:
            raise RocketMQError("LocalRocketMQ is not running: call start() first")
        if self.broker_alive(i):
            return self
        began = time.monotonic()
        check_disk(self._home)
        ports = self._broker_ports(i) if self.clustered else self._proxy_ports()
        taken = [f"{port}{_holder(port)}" for port in ports if not _bindable(self.host, port)]
        if taken:
            raise RocketMQError(f"the ports of {self.broker_names[i]} on {self.host} are taken now: {', '.join(taken)}; "
                                "stop what holds them, or stop() and start() again for new ports")
        name = self._broker_process(i)
        try:
            deadline = time.monotonic() + self.start_timeout
            if self.clustered:
                self._wait_broker(i, self._launch_broker(i), deadline)
            else:
                self._start_proxy(deadline)
        except _PortRace as exc:
            raise RocketMQError(str(exc)) from None
        except BaseException:
            self._end(name, grace=5.0)
            raise
        self.broker_start_seconds = time.monotonic() - began
        return self

    # ------------------------------------------------------------------ internals

    def _jars(self) -> Path:
        lib = default_lib()
        if _has_jars(lib):
            return lib
        if os.environ.get(LIB_ENV):
            missing = ", ".join(jar for jar in _MAIN_JARS if not (lib / jar).is_file())
            raise RocketMQError(f"RocketMQ {ROCKETMQ_VERSION}'s jars are not in {lib} (from {LIB_ENV}; missing "
                                f"{missing}): fetch them there with\n    {' '.join(_fetch_command(lib))}\n"
                                f"or unset {LIB_ENV} and run `bash setup.sh`, which caches them")
        return fetch_jars(lib)

    def _proxy_ports(self) -> list[int]:
        own = [self._ports["proxy"], self._ports["proxy_remoting"]]
        return own if self.clustered else self._broker_ports(0) + own

    def _broker_ports(self, i: int) -> list[int]:
        broker = self._ports[_port_key(i)]
        return [broker - 2, broker, broker + 1]

    def _pick_ports(self) -> dict[str, int]:
        """The ports to use: the given ones (checked free), free ones for the rest."""
        derived = {name: [-2, 0, 1] if name.startswith("broker") else [0] for name in self._wanted}
        roles = {-2: " (the broker's fast remoting port, broker_port - 2)", 1: " (the broker's HA port, "
                 "broker_port + 1)", 0: ""}
        ports: dict[str, int] = {}
        used: set[int] = set()
        for name, port in self._wanted.items():
            if port is None:
                continue
            for offset in derived[name]:
                if not _bindable(self.host, port + offset):
                    raise RocketMQError(
                        f"port {port + offset} on {self.host}{roles[offset]} is taken{_holder(port + offset)}: "
                        f"give {name}_port another port, or None for a free one")
            ports[name] = port
            used.update(port + offset for offset in derived[name])
        for name in self._wanted:
            if name in ports:
                continue
            for _ in range(200):
                candidate = _ephemeral_port(self.host)
                wanted = [candidate + offset for offset in derived[name]]
                if all(p > 1024 and p not in used and _bindable(self.host, p) for p in wanted):
                    ports[name] = candidate
                    used.update(wanted)
                    break
            else:
                raise RocketMQError(f"found no free port for the {name} on {self.host} in 200 tries")
        return ports

    def _write_conf(self) -> None:
        conf, host, ports = self._home / "conf", self.host, self._ports
        namesrv = f"{host}:{ports['namesrv']}"
        self._security.prepare(self.store_dir)
        (conf / "namesrv.conf").write_text(f"listenPort={ports['namesrv']}\nbindAddress={host}\n")
        for i, name in enumerate(self.broker_names):
            # one broker: its store is store/ (as before there were several); several: store/<name>
            store = self.store_dir / name if self.clustered else self.store_dir
            conf_file = conf / (f"{name}.conf" if self.clustered else "broker.conf")
            conf_file.write_text(self._broker_conf(name, ports[_port_key(i)], namesrv, store))
        (conf / "proxy.json").write_text(json.dumps({
            "rocketMQClusterName": _CLUSTER, "namesrvAddr": namesrv, "localServeAddr": host,
            "grpcServerPort": ports["proxy"], "remotingListenPort": ports["proxy_remoting"],
            **self._security.proxy_conf(),
        }, indent=2) + "\n")

    def _broker_conf(self, name: str, port: int, namesrv: str, store: Path) -> str:
        host = self.host
        return "\n".join([
            f"brokerClusterName={_CLUSTER}", f"brokerName={name}", "brokerId=0",
            f"namesrvAddr={namesrv}", f"brokerIP1={host}", f"brokerIP2={host}",
            f"listenPort={port}", f"bindAddress={host}",
            f"storePathRootDir={store}", f"storePathCommitLog={store / 'commitlog'}",
            "autoCreateTopicEnable=false",
            # RocketMQ's timer wheel (delayed messages, and pop, which the official SimpleConsumer receives by)
            # stays on, as RocketMQ's default: about a fifth of a core on an idle broker.
            # broker_conf={"timerWheelEnable": "false"} turns it off.
            # A pull returns up to 32 messages (256 KB) by default; rstream reads ranges of thousands.
            "maxTransferCountOnMessageInMemory=8192", "maxTransferBytesOnMessageInMemory=8388608",
            "maxTransferCountOnMessageInDisk=8192", "maxTransferBytesOnMessageInDisk=8388608",
            # Half messages (a sink's visible="on_commit") that their writer did not end are asked about every
            # 2 s (RocketMQ: 30 s) once past their check immunity (RocketMQBroker(check_after_s=...)), so a
            # writer that died shows its committed records within seconds of that. A message ended is marked
            # so 0.2 s later (RocketMQ: 3 s); a check before its mark would end it again: the marks must come
            # well within a check interval. rstream aborts an attempt in its log before the broker would discard
            # its half messages (after transactionCheckMax checks): 150 keep them about 5 minutes.
            "transactionTimeOut=3000", "transactionCheckInterval=2000", "transactionOpBatchInterval=200",
            "transactionCheckMax=150",
            *self._security.broker_conf(),
            *(f"{key}={value}" for key, value in self.broker_conf.items()), "",
        ])

    def _start_namesrv(self, deadline: float) -> None:
        proc = self._launch("namesrv", _NAMESRV_CLASS, self.namesrv_heap,
                            ["-c", str(self._home / "conf" / "namesrv.conf")])
        self._wait("namesrv", proc, _NAMESRV_READY, [self._ports["namesrv"]], deadline)

    def _start_proxy(self, deadline: float) -> None:
        conf = self._home / "conf"
        proc = self._launch("proxy", _PROXY_CLASS, self.proxy_heap,
                            ["-pm", "local", "-bc", str(conf / "broker.conf"), "-pc", str(conf / "proxy.json")])
        self._wait("proxy", proc, _PROXY_READY, self._proxy_ports(), deadline,
                   lambda: self._broker_registered(0), lambda: self._nudge_registration(0))

    def _start_cluster(self, deadline: float) -> None:
        """Several brokers, each in a JVM of its own, started at once (each asked to register once ready),
        then the proxy in cluster mode (it makes a topic of its own on the cluster's brokers as it starts,
        and exits if none is registered); return once every one is ready."""
        conf = self._home / "conf"
        launched = [self._launch_broker(i) for i in range(len(self.broker_names))]
        for i, proc in enumerate(launched):
            self._wait_broker(i, proc, deadline)
        proxy = self._launch("proxy", _PROXY_CLASS, self.proxy_heap, ["-pm", "cluster", "-pc", str(conf / "proxy.json")])
        self._wait("proxy", proxy, _PROXY_READY, self._proxy_ports(), deadline)

    def _launch_broker(self, i: int) -> subprocess.Popen[bytes]:
        name = self.broker_names[i]
        return self._launch(name, _BROKER_CLASS, self.broker_heap, ["-c", str(self._home / "conf" / f"{name}.conf")],
                            logback="broker", user_home=self._home / "brokers" / name)

    def _wait_broker(self, i: int, proc: subprocess.Popen[bytes], deadline: float) -> None:
        self._wait(self.broker_names[i], proc, _BROKER_READY, self._broker_ports(i), deadline,
                   lambda: self._broker_registered(i), lambda: self._nudge_registration(i))

    def _broker_registered(self, i: int) -> bool:
        conn = Connection(self.namesrv, timeout=3.0, reconnect_s=0.0, tls=self._security.ca)
        try:
            reply = conn.request(GET_BROKER_CLUSTER_INFO)
        except (RemotingError, ValueError):
            return False
        finally:
            conn.close()
        return reply.code == 0 and f'"{self._address(_port_key(i))}"'.encode() in reply.body

    def _nudge_registration(self, i: int) -> None:
        """Ask broker ``i`` to register with the name server now rather than on its first scheduled round,
        10 s after its start (``BrokerController.start``): RocketMQ's admin request ``UPDATE_BROKER_CONFIG``
        with the broker's own ``brokerPermission`` registers at once (``AdminBrokerProcessor.updateBrokerConfig``).
        The broker then rewrites its configuration file with every setting it has: put back as it was. A
        refusal is left alone: the scheduled round registers it anyway."""
        conf = self._home / "conf" / (f"{self.broker_names[i]}.conf" if self.clustered else "broker.conf")
        written = conf.read_text()
        permission = self.broker_conf.get("brokerPermission", "6")  # PermName: read and write
        conn = Connection(self._address(_port_key(i)), timeout=3.0, reconnect_s=0.0, tls=self._security.ca,
                          credentials=self._security.admin_credentials if self._security.acl else None)
        try:
            conn.request(UPDATE_BROKER_CONFIG, body=f"brokerPermission={permission}\n".encode())
        except (RemotingError, ValueError, OSError):
            pass
        finally:
            conn.close()
            if conf.read_text() != written:
                conf.write_text(written)

    def _launch(self, name: str, main_class: str, heap: str, args: list[str], logback: str | None = None,
                user_home: Path | None = None) -> subprocess.Popen[bytes]:
        assert self._java is not None and self._lib is not None and self._shim is not None
        home = self._home
        if user_home is not None:
            user_home.mkdir(parents=True, exist_ok=True)
        command = [
            self._java, "-Xms16m", f"-Xmx{heap}", *_YOUNG.get(name, ()), *_JAVA_OPTS, *_OPENS,
            *self._security.java_options(),
            f"-Drocketmq.home.dir={home}", f"-Duser.home={user_home or home}", f"-Djava.io.tmpdir={home / 'tmp'}",
            # a resource in the jar of each server; RocketMQ's logs go to <user.home>/logs/rocketmqlogs
            f"-Drmq.logback.configurationFile=rmq.{logback or name}.logback.xml",
            "-cp", f"{self._lib}{os.sep}*", main_class, *args,
        ]
        env = {key: value for key, value in os.environ.items()
               if key not in ("NAMESRV_ADDR", "ROCKETMQ_HOME", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS")}
        preload = " ".join(filter(None, [str(self._shim), os.environ.get("LD_PRELOAD")]))
        env.update({"LD_PRELOAD": preload, BIND_HOST_ENV: self.host, "ROCKETMQ_HOME": str(home)})
        with open(self.log_dir / f"{name}.out", "wb") as log:
            proc = subprocess.Popen(ended_with_this_process(command), stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, env=env, cwd=home, start_new_session=True)
        self._procs[name] = proc
        try:
            created = psutil.Process(proc.pid).create_time()
        except psutil.Error:
            created = 0.0
        (home / "pids" / f"{name}.json").write_text(json.dumps({"pid": proc.pid, "create_time": created}))
        return proc

    def _wait(self, name: str, proc: subprocess.Popen[bytes], ready_line: str, ports: list[int],
              deadline: float, registered: Callable[[], bool] | None = None,
              nudge: Callable[[], None] | None = None) -> None:
        """Until ``proc`` printed ``ready_line``, listens on ``ports`` and is ``registered``; once ready but
        not registered for a second, ``nudge`` it (again every 3 s)."""
        out = self.log_dir / f"{name}.out"
        nudged_at: float | None = None
        ready_at: float | None = None
        what = {"namesrv": "name server", "proxy": "proxy" if self.clustered else "proxy (with the broker)"}.get(
            name, f"broker {name}")
        while True:
            if proc.poll() is not None:
                raise self._failed(name, f"the RocketMQ {what} exited with code {proc.returncode} while starting")
            try:
                printed = ready_line in out.read_text(errors="replace")
            except OSError:
                printed = False
            listening = _listening(proc.pid) if printed else set()
            if printed and listening.issuperset(ports):
                if registered is None or registered():
                    return
                now = time.monotonic()
                ready_at = ready_at or now
                if nudge is not None and now - ready_at >= 1.0 and (nudged_at is None or now - nudged_at >= 3.0):
                    nudge()
                    nudged_at = now
            if time.monotonic() > deadline:
                waiting = [f"{ready_line!r} in {out.name}"] if not printed else []
                waiting += [f"port {p}" for p in ports if p not in listening]
                if printed and registered is not None and not registered():
                    waiting.append("the broker registered with the name server")
                raise self._failed(name, f"the RocketMQ {what} was not ready within {self.start_timeout:.0f} s "
                                         f"(waiting for {', '.join(waiting) or 'nothing: it just got ready'}); "
                                         "a busy machine may need LocalRocketMQ(start_timeout=...) larger")
            time.sleep(0.2)

    def _failed(self, name: str, what: str) -> RocketMQError:
        out = self.log_dir / f"{name}.out"
        text = _tail(out)
        if ("Address already in use" in text or "BindException" in text) and any(
                port is None for port in self._wanted.values()):
            return _PortRace(f"{what}: a port was taken meanwhile; see {out}:\n{text}")
        logs = (self._home / "brokers" / name / "logs" if name in self.broker_names and self.clustered
                else self.log_dir) / "rocketmqlogs"
        detail = logs / {"namesrv": "namesrv.log", "proxy": "proxy.log" if self.clustered else "broker.log"}.get(
            name, "broker.log")
        return RocketMQError(f"{what}. The end of {out}:\n{text}\nRocketMQ's own logs are in "
                             f"{logs}; the end of {detail.name}:\n{_tail(detail, 10)}")

    def _end(self, name: str, grace: float) -> None:
        proc = self._procs.get(name)
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    raise RocketMQError(f"the RocketMQ {name} JVM (pid {proc.pid}) survived SIGKILL: end it by "
                                        "hand (kill -9 <pid>) before starting again") from None
        del self._procs[name]
        (self._home / "pids" / f"{name}.json").unlink(missing_ok=True)

    def _stop_processes(self, grace: float) -> None:
        for proc in self._procs.values():  # together: the proxy alone takes about 12 s to stop cleanly
            if proc.poll() is None:
                proc.terminate()
        for name in list(self._procs):
            self._end(name, grace)

    def _stop_leftovers(self) -> list[int]:
        """Stop JVMs that an earlier run in this ``home`` left running (found by pid file, checked by command line)."""
        found = []
        if not (self._home / "pids").is_dir():
            return []
        for pid_file in (self._home / "pids").glob("*.json"):
            try:
                entry = json.loads(pid_file.read_text())
                proc = psutil.Process(int(entry["pid"]))
                same = abs(proc.create_time() - float(entry["create_time"])) < 1.0
                if same and f"-Drocketmq.home.dir={self._home}" in proc.cmdline() and _alive(proc):
                    found.append(proc)
            except (OSError, ValueError, KeyError, psutil.Error):
                pass
            pid_file.unlink(missing_ok=True)
        for proc in found:
            try:
                proc.terminate()
            except psutil.Error:
                pass
        _gone, alive = psutil.wait_procs(found, timeout=15)
        for proc in alive:
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=30)
        return [proc.pid for proc in found]


def _port_key(i: int) -> str:
    """The key of broker ``i``'s port in ``LocalRocketMQ.ports``: ``broker``, ``broker1``, ``broker2``, ..."""
    return "broker" if i == 0 else f"broker{i}"


class _PortRace(RocketMQError):
    """A free port picked at start was taken before the JVM bound it: start again with new ports."""


def _ephemeral_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def _megabytes(size: str) -> int:
    number, unit = int(size[:-1]), size[-1]
    return number * {"k": 1, "m": 1024, "g": 1024 * 1024}[unit] // 1024


if __name__ == "__main__":  # what `bash setup.sh` runs: python -m rstream.rocketmq.local
    lib, shim = prepare()
    print(f"RocketMQ {ROCKETMQ_VERSION}: jars in {lib}\nbind shim: {shim}")
    print(f"the official gRPC Java client, for the tests: {fetch_client_java()}")

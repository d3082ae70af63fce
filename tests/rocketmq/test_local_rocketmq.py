"""LocalRocketMQ: a real name server and broker (in the gRPC proxy) on one address, the broker killed and
started again on its store, nothing left after stop, and errors that say what to do.

The e2e tests start RocketMQ (about 10 to 25 s each start on 2 shared cores); the others stop at a
check made before any JVM starts.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from rstream.errors import RStreamError
from rstream.rocketmq import LocalRocketMQ
from rstream.rocketmq import local as local_module
from rstream.rocketmq.errors import RocketMQError
from rstream.rocketmq.local import CLIENT_JAVA_VERSION, LIB_ENV, POM, ROCKETMQ_VERSION
from rstream.rocketmq.remoting import Client, Connection
from tests.support.processes import child_env, gone_within, running
from tests.support.rocketmq import (
    create_topic,
    leftovers,
    listening,
    max_offset,
    route,
    send,
    topics,
)

GIB = 2**30
#: RocketMQ's request code by which a name server forgets a broker (``RequestCode.UNREGISTER_BROKER``).
UNREGISTER_BROKER = 104


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A socket listening on a port of 127.0.0.1, as another program holding it would, whose
    neighbours (port - 3 to port + 2: the broker's other ports in the test) are free. Below the
    kernel's ephemeral range: a port the kernel gives out (bind to 0, every outgoing connection)
    has neighbours that the machine's other connections take and free at any moment."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for port in random.Random(os.getpid()).sample(range(max(1030, low - 12_000), low - 3), 200):
        if all(_free(p) for p in range(port - 3, port + 3)):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", port))
            s.listen()
            yield s
            s.close()
            return
    pytest.fail("no port with six free neighbours below the ephemeral range of 127.0.0.1")


def _java_home() -> Path:
    java = shutil.which("java")
    assert java is not None
    return Path(os.path.realpath(java)).parents[1]


# ------------------------------------------------------------------ the bind shim, on Python's sockets

_BINDS = textwrap.dedent("""
    import json, socket
    out = []
    for family, wildcard in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        s = socket.socket(family, socket.SOCK_STREAM)
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # dual stack, as Java's sockets
        s.bind((wildcard, 0))
        out.append(s.getsockname()[0])
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))  # an explicit address is left alone
    out.append(s.getsockname()[0])
    print(json.dumps(out))
""")


@pytest.mark.parametrize("host", [None, "127.0.0.3"])
def test_the_bind_shim_turns_wildcard_binds_into_binds_on_one_host(host: str | None) -> None:
    env = dict(os.environ, LD_PRELOAD=str(local_module.bind_shim()))
    env.pop(local_module.BIND_HOST_ENV, None)
    if host is not None:
        env[local_module.BIND_HOST_ENV] = host
    done = subprocess.run([sys.executable, "-c", _BINDS], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    expected = host or "127.0.0.1"
    assert json.loads(done.stdout) == [expected, f"::ffff:{expected}", "127.0.0.1"]


# ------------------------------------------------------------------ errors, before any JVM starts


def test_the_pom_pins_the_version_local_py_runs() -> None:
    pom = POM.read_text()
    assert re.search(r"<rocketmq.version>(.*)</rocketmq.version>", pom).group(1) == ROCKETMQ_VERSION  # type: ignore[union-attr]
    for server in ("namesrv", "broker", "proxy"):
        assert f"<artifactId>rocketmq-{server}</artifactId>" in pom
    # the tests' gRPC Java client, copied alone by execution client-java into client_java_jar()'s folder
    assert re.search(r"<rocketmq-client-java.version>(.*)</rocketmq-client-java.version>", pom).group(1) == \
        CLIENT_JAVA_VERSION  # type: ignore[union-attr]
    assert "<id>client-java</id>" in pom


def test_a_taken_port_given_explicitly_is_refused_before_anything_starts(tmp_path: Path,
                                                                         listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    with pytest.raises(RocketMQError, match=rf"port {port} on 127\.0\.0\.1 is taken .*pid {os.getpid()}.*namesrv_port"):
        LocalRocketMQ(tmp_path, namesrv_port=port).start()
    # the broker also needs broker_port - 2 and broker_port + 1
    with pytest.raises(RocketMQError, match=rf"port {port} .*fast remoting port, broker_port - 2\) is taken"):
        LocalRocketMQ(tmp_path, broker_port=port + 2).start()
    with pytest.raises(RocketMQError, match=rf"port {port} .*HA port, broker_port \+ 1\) is taken"):
        LocalRocketMQ(tmp_path, broker_port=port - 1).start()
    assert leftovers(tmp_path) == []


def test_missing_jars_say_how_to_fetch_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LIB_ENV, str(tmp_path / "no-jars"))
    with pytest.raises(RocketMQError) as raised:
        LocalRocketMQ(tmp_path / "home").start()
    message = str(raised.value)
    assert str(tmp_path / "no-jars") in message and LIB_ENV in message
    assert "mvn -q -B -f" in message and "dependency:copy-dependencies" in message and "bash setup.sh" in message
    assert not (tmp_path / "no-jars").exists()  # an explicit folder is never fetched into behind one's back


def test_jars_to_fetch_without_maven_say_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LIB_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # an empty cache: the jars must be fetched
    monkeypatch.setenv("JAVA_HOME", str(_java_home()))
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no mvn on it
    with pytest.raises(RocketMQError, match=r"needs Maven \(mvn\), which is not installed: run `bash setup.sh`"):
        LocalRocketMQ(tmp_path / "home").start()


def test_missing_java_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(RocketMQError, match=r"Java was not found .*Java 17 or newer.*bash setup.sh"):
        LocalRocketMQ(tmp_path / "home").start()


def test_java_older_than_17_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text('#!/bin/sh\necho \'openjdk version "11.0.22" 2024-01-16\' >&2\n')
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(java.parent))
    with pytest.raises(RocketMQError, match=r"is Java 11; .* needs Java 17 or newer"):
        LocalRocketMQ(tmp_path / "home").start()


def test_a_disk_more_than_90_percent_full_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_module.shutil, "disk_usage",
                        lambda path: shutil._ntuple_diskusage(100 * GIB, 95 * GIB, 5 * GIB))  # type: ignore[attr-defined]
    with pytest.raises(RocketMQError, match=r"is 95% full \(5\.0 GiB free\); RocketMQ's broker refuses every write "
                                            r"above 90%"):
        LocalRocketMQ(tmp_path / "home").start()
    assert leftovers(tmp_path) == []


def test_bad_settings_say_what_to_do(tmp_path: Path) -> None:
    assert issubclass(RocketMQError, RStreamError)
    with pytest.raises(RocketMQError, match="not an IPv4 address"):
        LocalRocketMQ(tmp_path, host="localhost")
    with pytest.raises(RocketMQError, match="proxy_heap='lots' is not a JVM heap size"):
        LocalRocketMQ(tmp_path, proxy_heap="lots")
    with pytest.raises(RocketMQError, match="repeat one another"):
        LocalRocketMQ(tmp_path, namesrv_port=20001, proxy_port=20001)
    with pytest.raises(RocketMQError, match="broker_port=2 is not a port"):
        LocalRocketMQ(tmp_path, broker_port=2)
    with pytest.raises(RocketMQError, match="broker_conf sets listenPort, storePathRootDir, which LocalRocketMQ sets"):
        LocalRocketMQ(tmp_path, broker_conf={"storePathRootDir": "/x", "listenPort": "1", "flushDiskType": "SYNC_FLUSH"})
    mq = LocalRocketMQ(tmp_path)
    with pytest.raises(RocketMQError, match=r"not running: call start\(\) first"):
        _ = mq.namesrv
    mq.stop()  # never started: nothing to do


# ------------------------------------------------------------------ a real RocketMQ


@pytest.mark.e2e
def test_start_listens_on_its_host_only_and_the_broker_is_registered(local_rocketmq: LocalRocketMQ) -> None:
    mq = local_rocketmq
    assert mq.running and mq.broker_running and set(mq.pids) == {"namesrv", "proxy"}
    for address in (mq.namesrv, mq.proxy, mq.broker_addr):
        assert re.fullmatch(r"127\.0\.0\.1:\d+", address)
    # every port of both JVMs, on 127.0.0.1 only (Java's dual-stack sockets show it v4-mapped)
    found = listening(mq.pids["namesrv"]) | listening(mq.pids["proxy"])
    assert {ip for ip, _port in found} <= {"127.0.0.1", "::ffff:127.0.0.1"}, found
    assert {port for _ip, port in found} == set(mq.ports.values())
    assert listening(mq.pids["namesrv"]) == {("::ffff:127.0.0.1", mq.ports["namesrv"])}
    brokers = Client(mq.namesrv).cluster_info()["brokerAddrTable"]
    assert [data["brokerAddrs"]["0"] for data in brokers.values()] == [mq.broker_addr]
    assert mq.home.is_dir() and (mq.store_dir / "commitlog").is_dir()
    assert mq.start_seconds is not None and mq.start_seconds < mq.start_timeout
    rss = mq.rss_bytes()
    assert 100 * 2**20 < rss < 1.5 * GIB
    print(f"\nLocalRocketMQ started in {mq.start_seconds:.1f} s; {rss / 2**20:.0f} MB resident "
          f"({', '.join(f'{n} {psutil.Process(p).memory_info().rss / 2**20:.0f} MB' for n, p in mq.pids.items())})")


@pytest.mark.e2e
def test_a_broker_asked_to_register_does_so_at_once_and_its_conf_stays_as_written(local_rocketmq: LocalRocketMQ) -> None:
    """``start()`` asks a broker that skipped its registration at start to register now (its own next round
    is up to 30 s away): taken off the name server by hand, the broker is back on it within a few seconds
    of the request, and its ``broker.conf`` (which RocketMQ rewrites on a config update) is as written."""
    mq = local_rocketmq
    conf = mq.home / "conf" / "broker.conf"
    written = conf.read_text()
    name = mq.broker_names[0]
    conn = Connection(mq.namesrv)
    try:
        gone = conn.request(UNREGISTER_BROKER, {"brokerAddr": mq.broker_addr, "clusterName": local_module._CLUSTER,
                                                "brokerName": name, "brokerId": "0"})
        assert gone.code == 0, gone
    finally:
        conn.close()
    assert name not in Client(mq.namesrv).cluster_info().get("brokerAddrTable", {})
    mq._nudge_registration(0)
    deadline = time.monotonic() + 8
    while name not in Client(mq.namesrv).cluster_info().get("brokerAddrTable", {}):
        assert time.monotonic() < deadline, "the broker did not register when asked"
        time.sleep(0.2)
    assert conf.read_text() == written


@pytest.mark.e2e
def test_a_killed_broker_starts_again_on_its_store_and_stop_leaves_nothing(tmp_path: Path) -> None:
    home = tmp_path / "mq"
    # 127.0.0.2 (loopback too): host= decides every address, those RocketMQ is told and the shim's
    with LocalRocketMQ(home, host="127.0.0.2") as mq:
        namesrv_pid, proxy_pid, ports = mq.pids["namesrv"], mq.pids["proxy"], mq.ports
        found = listening(namesrv_pid) | listening(proxy_pid)
        assert {ip for ip, _port in found} <= {"127.0.0.2", "::ffff:127.0.0.2"}, found
        create_topic(mq.broker_addr, "before-the-crash")
        offsets = [send(mq.broker_addr, "before-the-crash", 1, f"m{i}".encode()) for i in range(3)]
        assert offsets == [0, 1, 2]

        assert mq.kill_broker() == proxy_pid
        assert not psutil.pid_exists(proxy_pid) and not mq.broker_running
        assert mq.pids == {"namesrv": namesrv_pid}  # the name server lives on
        with pytest.raises(ConnectionRefusedError):  # nobody listens on the broker's port any more
            socket.create_connection(("127.0.0.2", ports["broker"]), timeout=5).close()
        assert (home / "store" / "commitlog").is_dir() and any((home / "store" / "commitlog").iterdir())
        assert b"before-the-crash" in (home / "store" / "config" / "topics.json").read_bytes()
        assert mq.kill_broker() == 0  # already down

        mq.start_broker()
        assert mq.ports == ports and mq.pids["namesrv"] == namesrv_pid and mq.pids["proxy"] != proxy_pid
        assert "before-the-crash" in topics(mq.broker_addr)
        assert max_offset(mq.broker_addr, "before-the-crash", 1) == 3  # the messages written before the kill
        routed = route(mq.namesrv, "before-the-crash")
        assert routed is not None and mq.broker_addr in str(routed["brokerDatas"])
        assert mq.broker_start_seconds is not None
        print(f"\nbroker started again in {mq.broker_start_seconds:.1f} s")
        pids = list(mq.pids.values())
    assert mq.pids == {} and not mq.running
    assert not any(running(pid) for pid in pids)
    assert leftovers(home) == []
    with pytest.raises(RocketMQError, match="not running"):
        _ = mq.namesrv
    mq.stop()  # twice: nothing to do


# A notebook kernel in a subprocess: starts RocketMQ in a home (from a helper thread with "thread":
# then its JVMs are not tied to the kernel's life, rstream.owned; on an empty store with "exit", as a
# notebook run again from the top does), makes a topic with 3 messages in queue 1 if the store has none,
# prints what it started and found, then either hangs (to be SIGKILLed: a kernel that died) or exits
# without stop() (atexit must stop the JVMs).
_KERNEL = textwrap.dedent("""
    import json, sys, threading, time
    from rstream.rocketmq import LocalRocketMQ
    from rstream.rocketmq.remoting import Client

    mq = LocalRocketMQ(sys.argv[1])
    if sys.argv[2] == "thread":
        helper = threading.Thread(target=mq.start)
        helper.start()
        helper.join()
    else:
        mq.start(fresh_store=sys.argv[2] == "exit")
    client = Client(mq.namesrv)
    found = "before-the-crash" in client.topic_configs(mq.broker_addr)
    if not found:
        client.create_topic(mq.broker_addr, "before-the-crash", 4)
        for i in range(3):
            client.send(mq.broker_addr, "before-the-crash", 1, b"m", {}, int(time.time() * 1000))
    ends = client.max_offset(mq.broker_addr, "before-the-crash", 1)
    deadline = time.monotonic() + 30
    while ends < 3 and time.monotonic() < deadline:  # the consume queue follows the commit log (reput), a moment later
        time.sleep(0.1)
        ends = client.max_offset(mq.broker_addr, "before-the-crash", 1)
    client.close()
    print(json.dumps({"pids": mq.pids, "stopped": mq.leftovers_stopped, "found": found, "ends": ends}), flush=True)
    if sys.argv[2] in ("hang", "thread"):
        time.sleep(3600)
""")


def _kernel(home: Path, how: str) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    proc = subprocess.Popen([sys.executable, "-c", _KERNEL, str(home), how], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env(), start_new_session=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=60)
        raise AssertionError(f"the kernel did not start RocketMQ ({proc.returncode}):\n{proc.stderr.read()[-3000:]}")
    return proc, json.loads(line)


@pytest.mark.e2e
def test_a_killed_kernel_s_jvms_stop_with_it(tmp_path: Path) -> None:
    """JupyterLab's "Shut Down Kernel" SIGKILLs a kernel that has not exited after 5 s: its JVMs, in
    sessions of their own, get SIGTERM from the kernel then (rstream.owned) and stop."""
    home = tmp_path / "mq"
    try:
        dead, first = _kernel(home, "hang")
        os.kill(dead.pid, signal.SIGKILL)
        dead.wait(timeout=30)
        assert gone_within(list(first["pids"].values()), 60)
        assert leftovers(home) == []
    finally:
        LocalRocketMQ(home).stop()


@pytest.mark.e2e
def test_a_dead_kernel_s_jvms_are_stopped_by_the_next_start_and_exit_stops_them_too(tmp_path: Path) -> None:
    home = tmp_path / "mq"
    try:
        dead, first = _kernel(home, "thread")
        os.kill(dead.pid, signal.SIGKILL)  # the kernel only: JVMs started from a thread run on
        dead.wait(timeout=30)
        assert all(psutil.pid_exists(pid) for pid in first["pids"].values())

        exiting, second = _kernel(home, "exit")  # start(fresh_store=True): a notebook run again from the top
        assert sorted(second["stopped"]) == sorted(first["pids"].values())
        assert not first["found"] and first["ends"] == 3
        assert not second["found"] and second["ends"] == 3  # an empty store, the commit log included
        assert exiting.wait(timeout=120) == 0, exiting.stderr.read() if exiting.stderr else ""
        assert leftovers(home) == []  # atexit stopped what the second kernel started
    finally:
        LocalRocketMQ(home).stop()  # never started: stops whatever a failed run left in home

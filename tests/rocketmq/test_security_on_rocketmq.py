"""rstream on a real RocketMQ 5.3.3 with authentication and authorization on (ACL 2.0) and on one that
speaks TLS only: two LocalRocketMQ of this module (one JVM start each, about 10 to 25 s), the first
also refusing to create consumer groups on first use (``autoCreateSubscriptionGroup=false``).

The user rstream signs with is allowed only what the README says rstream needs; another user lacks a
permission and is told which, on which topic or group; a wrong key is told so. A job's executors sign
too (the credentials travel with the broker object). The official client passes credentials, and
over TLS trusts a private CA named by ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``. Real pull replies, cut
and garbled, decode or fail with a ``ProtocolError``."""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rstream.broker.batch import OnCommitRecords
from rstream.rocketmq import LocalRocketMQ
from rstream.rocketmq.broker import READER_GROUP, RocketMQBroker, progress_group
from rstream.rocketmq.local_security import RSTREAM_NEEDS
from rstream.rocketmq.official import OfficialClientError, consume, produce
from rstream.rocketmq.remoting import (
    PULL_MESSAGE,
    SUBSCRIPTION_GROUP_NOT_EXIST,
    Client,
    CredentialsRefusedError,
    PermissionDeniedError,
    ProtocolError,
    RemotingError,
    _encode,
    _read_exact,
    decode_frame,
    decode_messages,
)
from tests.support.jobs import assert_exact_counts, job_id, wordcount

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def acl_mq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRocketMQ]:
    """A RocketMQ with authentication and authorization on, that creates no consumer group by itself."""
    mq = LocalRocketMQ(tmp_path_factory.mktemp("rocketmq-acl"), acl=True,
                       broker_conf={"autoCreateSubscriptionGroup": "false"}).start()
    yield mq
    mq.stop(grace=1.0)  # its store is thrown away: no need to wait for a clean stop


@pytest.fixture(scope="module")
def tls_mq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRocketMQ]:
    """A RocketMQ whose every port speaks TLS only, with a certificate of a CA made for it."""
    mq = LocalRocketMQ(tmp_path_factory.mktemp("rocketmq-tls"), tls=True,
                       broker_conf={"timerWheelEnable": "false"}).start()
    yield mq
    mq.stop(grace=1.0)


def _admin(mq: LocalRocketMQ) -> Client:
    return Client(mq.namesrv, credentials=mq.admin_credentials)


def test_rstream_does_all_it_does_with_only_the_permissions_the_readme_lists(acl_mq: LocalRocketMQ) -> None:
    from rstream.broker.base import CommitTag

    assert RSTREAM_NEEDS == {"Topic:*": ["Create", "Delete", "Pub", "Sub", "Get", "List"],
                             "Group:*": ["Create", "Sub", "Get", "Update"]}
    broker = acl_mq.broker()
    admin = _admin(acl_mq)
    # the broker creates no group by itself: a pull by a group it does not know is refused
    with pytest.raises(RemotingError) as unknown:
        admin.pull(acl_mq.broker_addr, "TBW102", 0, 0, 1, group="nobody-made-me")
    assert unknown.value.code == SUBSCRIPTION_GROUP_NOT_EXIST
    broker.create_topic("acl-orders", queues=2)
    broker.send_batch("acl-orders", ["a", "b", "c"], keys=["k1", "k2", "k1"])
    tag = CommitTag("acl-job", "acl-orders", 0, 0, 2)
    assert broker.append({("acl-orders", 1): [("k3", b"d", 1, {"h": "v"}, None)]}, tag)
    assert broker.find_commit("acl-job", "acl-orders", 0, 0) is not None
    assert sorted(m.body for m in broker.read("acl-orders")) == [b"a", b"b", b"c", b"d"]
    assert sum(broker.end_offsets("acl-orders")) == 4
    assert broker._client.consume_stats(acl_mq.broker_addr, progress_group("acl-job"))[("acl-orders", 0)][1] == 2
    assert broker.search_offset("acl-orders", 0, 0) == 0
    # a sink visible on commit: half messages, committed from the decision log; the job's progress mirrored
    before = [m.body for m in broker.read("acl-orders", 0)]
    visible = OnCommitRecords()
    visible.append(("k4", b"e", 2, None, None))
    assert broker.append({("acl-orders", 0): visible}, CommitTag("acl-job", "acl-orders", 0, 2, 3))
    assert [m.body for m in broker.read("acl-orders", 0)] == [*before, b"e"]
    assert broker._client.consume_stats(acl_mq.broker_addr, progress_group("acl-job"))[("acl-orders", 0)][1] == 3
    # and one whose writer never ends its half messages (as if it died just after its commit): RocketMQ's
    # check-back, answered by this process (a producer of rstream-txn, signing as user rstream), commits it
    user = acl_mq.credentials
    assert user is not None
    silent = RocketMQBroker(acl_mq.namesrv, access_key=user.access_key, secret_key=user.secret_key, check_after_s=2)
    silent._end_halves = lambda *args, **kwargs: None  # type: ignore[method-assign]
    late = OnCommitRecords()
    late.append(("k5", b"f", 3, None, None))
    assert silent.append({("acl-orders", 0): late}, CommitTag("acl-job", "acl-orders", 0, 3, 4))
    deadline = time.monotonic() + 30
    while [m.body for m in broker.read("acl-orders", 0)] != [*before, b"e", b"f"]:
        assert time.monotonic() < deadline, "the check-back committed the half message within 30 s"
        time.sleep(0.2)
    silent.close()
    broker.commit_offset("acl-group", "acl-orders", 0, 1)
    assert broker.committed_offset("acl-group", "acl-orders", 0) == 1
    assert "acl-orders" in {t.name for t in broker.topics()}
    # rstream made the group it pulls with: it exists now for any pull
    assert admin.pull(acl_mq.broker_addr, "acl-orders", 1, 0, 8, group=READER_GROUP)[0][-1].body == b"d"
    broker.delete_topic("acl-orders")
    assert not broker.has_topic("acl-orders")
    broker.close()
    admin.close()


def test_no_key_or_a_wrong_key_is_refused_saying_what_to_check(acl_mq: LocalRocketMQ) -> None:
    user = acl_mq.credentials
    assert user is not None
    with pytest.raises(CredentialsRefusedError, match="without credentials.*give RocketMQBroker"):
        RocketMQBroker(acl_mq.namesrv).topics()
    with pytest.raises(CredentialsRefusedError, match="user 'rstream' .*check signature failed.*check access_key"):
        RocketMQBroker(acl_mq.namesrv, access_key=user.access_key, secret_key="not its secret").topics()
    with pytest.raises(CredentialsRefusedError, match="User:ghost is not found"):
        RocketMQBroker(acl_mq.namesrv, access_key="ghost", secret_key=user.secret_key).topics()


def test_a_missing_permission_names_the_topic_or_group_and_the_permission(acl_mq: LocalRocketMQ) -> None:
    broker = acl_mq.broker()
    broker.create_topic("acl-prices", queues=1)
    broker.send("acl-prices", "p1")
    reader = acl_mq.add_user("reader", "reader-secret", {"Topic:*": ["Sub", "Get"], "Group:*": ["Sub", "Get"]})
    as_reader = RocketMQBroker(acl_mq.namesrv, access_key=reader.access_key, secret_key=reader.secret_key)
    assert [m.body for m in as_reader.read("acl-prices")] == [b"p1"]
    with pytest.raises(PermissionDeniedError, match="user 'reader' permission PUB on topic 'acl-prices'") as pub:
        as_reader.send("acl-prices", "p2")
    assert (pub.value.resource, pub.value.permission) == ("topic 'acl-prices'", "PUB")
    assert "mqadmin updateAcl" in str(pub.value) and "-r Topic:acl-prices -a Pub" in str(pub.value)
    no_group = acl_mq.add_user("no-group", "no-group-secret", {"Topic:*": ["Sub", "Get"]})
    as_no_group = RocketMQBroker(acl_mq.namesrv, access_key=no_group.access_key, secret_key=no_group.secret_key)
    with pytest.raises(PermissionDeniedError, match=f"permission SUB on group '{READER_GROUP}'") as sub:
        as_no_group.read("acl-prices")
    assert (sub.value.resource, sub.value.permission) == (f"group '{READER_GROUP}'", "SUB")
    broker.delete_topic("acl-prices")
    for made in (broker, as_reader, as_no_group):
        made.close()


def test_a_jobs_executors_sign_their_requests(acl_mq: LocalRocketMQ, spark: Any, tmp_path: Path) -> None:
    from rstream import RocketMQStream

    broker = acl_mq.broker()
    text = [f"w{i % 5} w{i % 3}" for i in range(60)]
    broker.create_topic("sentences", queues=2)
    broker.send_batch("sentences", text)
    job = RocketMQStream(wordcount(job_id("aclwc")).build(), broker=broker, spark=spark,
                         properties={"data_dir": str(tmp_path / "data")})
    try:
        job.run_until_idle()
    finally:
        job.stop()
    assert_exact_counts(broker, "counts", text)
    broker.close()


def test_the_official_client_passes_the_credentials(acl_mq: LocalRocketMQ) -> None:
    user = acl_mq.credentials
    assert user is not None
    broker = acl_mq.broker()
    broker.create_topic("acl-official", queues=1)
    admin = _admin(acl_mq)
    admin.create_group(acl_mq.broker_addr, "acl-app")  # no group is made on first use here
    admin.close()
    produce(acl_mq.proxy, "acl-official", ["x", "y"], access_key=user.access_key, secret_key=user.secret_key)
    got = consume(acl_mq.proxy, "acl-official", "acl-app", 2, access_key=user.access_key, secret_key=user.secret_key)
    assert sorted(m.body for m in got) == [b"x", b"y"]
    with pytest.raises(OfficialClientError, match="refused the credentials of user 'rstream'.*check signature failed"):
        produce(acl_mq.proxy, "acl-official", ["z"], access_key=user.access_key, secret_key="not its secret")
    with pytest.raises(OfficialClientError, match="refused the credentials of a client without credentials"):
        produce(acl_mq.proxy, "acl-official", ["z"])
    broker.delete_topic("acl-official")
    broker.close()


def test_real_pull_replies_cut_or_garbled_decode_or_fail_as_protocol_errors(acl_mq: LocalRocketMQ) -> None:
    """A pull reply's frame as the broker sent it, read off the socket, then cut at every byte and
    garbled at random: each decodes or raises ``ProtocolError``, at once."""
    broker = acl_mq.broker()
    broker.create_topic("acl-frames", queues=1)
    broker.send_batch("acl-frames", [f"body {i}" * (i + 1) for i in range(4)], keys=["k0", "k1", None, "k3"],
                      headers={"h": "v"})
    broker.read("acl-frames")  # rstream's group exists on the broker
    host, port = acl_mq.broker_addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(_encode(PULL_MESSAGE, {
            "consumerGroup": READER_GROUP, "topic": "acl-frames", "queueId": 0, "queueOffset": 0, "maxMsgNums": 32,
            "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0,
            "expressionType": "TAG"}, b"", 1, acl_mq.credentials))
        head = _read_exact(sock, 4, time.monotonic() + 10)
        real = head + _read_exact(sock, int.from_bytes(head, "big"), time.monotonic() + 10)
    reply = decode_frame(real[4:])
    messages = decode_messages(reply.body)
    assert [m.body for m in messages] == [f"body {i}".encode() * (i + 1) for i in range(4)]
    assert [m.properties.get("KEYS") for m in messages] == ["k0", "k1", None, "k3"]
    began = time.monotonic()
    outcomes = {"decoded": 0, "refused": 0}

    def attempt(data: bytes) -> None:
        try:
            decode_messages(decode_frame(data).body)
            outcomes["decoded"] += 1
        except ProtocolError:
            outcomes["refused"] += 1

    for cut in range(4, len(real)):
        attempt(real[4:cut])
    rng = random.Random(48)
    for _ in range(3000):
        garbled = bytearray(real[4:])
        for _ in range(rng.randint(1, 4)):
            garbled[rng.randrange(len(garbled))] = rng.randrange(256)
        attempt(bytes(garbled))
    assert outcomes["decoded"] and outcomes["refused"]
    assert time.monotonic() - began < 30
    broker.delete_topic("acl-frames")
    broker.close()


def test_rstream_over_tls_and_what_a_client_without_it_is_told(tls_mq: LocalRocketMQ) -> None:
    from rstream.broker.base import CommitTag

    assert tls_mq.tls_ca is not None and Path(tls_mq.tls_ca).is_file()
    broker = tls_mq.broker()
    broker.create_topic("tls-orders", queues=2)
    broker.send_batch("tls-orders", ["a", "b"])
    assert broker.append({("tls-orders", 0): [(None, b"c", 1, None, None)]}, CommitTag("tls-job", "tls-orders", 0, 0, 1))
    assert sorted(m.body for m in broker.read("tls-orders")) == [b"a", b"b", b"c"]
    began = time.monotonic()
    with pytest.raises(RemotingError, match="TLS enforcing mode.*connect with TLS"):
        RocketMQBroker(tls_mq.namesrv).topics()
    assert time.monotonic() - began < 5  # not after reconnect_s (60 s)
    with pytest.raises(RemotingError, match="certificate of RocketMQ .* is not trusted.*tls_ca"):
        RocketMQBroker(tls_mq.namesrv, tls=True).topics()  # the system's CAs never signed it
    broker.delete_topic("tls-orders")
    broker.close()


def test_the_official_client_over_tls_with_the_clusters_ca(tls_mq: LocalRocketMQ) -> None:
    """gRPC reads its roots once per process: each try runs in a fresh interpreter."""
    import os
    import subprocess
    import sys

    broker = tls_mq.broker()
    broker.create_topic("tls-official", queues=1)
    code = ("from rstream.rocketmq.official import OfficialClientError, produce\n"
            "try:\n"
            f"    print(len(produce({tls_mq.proxy!r}, 'tls-official', ['x', 'y'], tls=True)))\n"
            "except OfficialClientError as exc:\n"
            "    print(exc)\n")

    def run(**env: str) -> str:
        done = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True,
                              text=True, timeout=120, cwd=Path(__file__).parents[2])
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.strip()

    untrusted = run()
    assert "certificate of the proxy" in untrusted and "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH" in untrusted
    assert run(GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=str(tls_mq.tls_ca)) == "2"
    assert [m.body for m in broker.read("tls-official")] == [b"x", b"y"]
    broker.delete_topic("tls-official")
    broker.close()

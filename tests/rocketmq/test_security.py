"""Signed requests, TLS options and refusals, without a JVM: the signature against vectors of RocketMQ
5.3.3's own unit tests, the errors a refused request raises (remarks as 5.3.3's broker writes them),
what travels to Spark's executors, and a server that closes connections unheard. On a real RocketMQ
with authentication and TLS on: tests/rocketmq/test_security_on_rocketmq.py."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import pickle
import socket
import ssl
import threading
import time
from pathlib import Path

import pytest

from rstream.broker.base import BrokerError
from rstream.rocketmq.broker import RocketMQBroker
from rstream.rocketmq.local_security import LocalSecurity
from rstream.rocketmq.remoting import (
    GET_MAX_OFFSET,
    NO_PERMISSION,
    PULL_MESSAGE,
    SEND_BATCH_MESSAGE,
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
    Client,
    Command,
    Connection,
    Credentials,
    CredentialsRefusedError,
    PermissionDeniedError,
    RemotingError,
    _encode,
    refused,
    sign,
    tls_context,
)
from tests.support.rocketmq import ScriptedServer, frame

pytestmark = pytest.mark.unit


def test_the_signature_of_rocketmqs_signer_test() -> None:
    """client/.../AclSignerTest.calSignatureTest: "RocketMQ" signed with "12345678". A request with no
    fields but its access key signs exactly that key's text."""
    assert sign({}, b"", Credentials("RocketMQ", "12345678"))["Signature"] == "IUc8rrO/0gDch8CjObLQsW2rsiA="


def test_the_signature_rocketmqs_authentication_accepts() -> None:
    """auth/.../AuthenticationEvaluatorTest.evaluate1: user "test" (password "test") is authenticated
    by the signature "DJRRXBXlCVuKh6ULoN87847QX+Y=" of the content "test"."""
    assert sign({}, b"", Credentials("test", "test")) == {"AccessKey": "test",
                                                           "Signature": "DJRRXBXlCVuKh6ULoN87847QX+Y="}


def test_the_content_signed_is_what_the_broker_rebuilds_from_a_request() -> None:
    """auth/.../DefaultAuthenticationContextBuilderTest.build2: a send whose fields are topic, queueId,
    bornTimestamp and bname, with AccessKey "abc", is checked against the content
    "abcbrokerName-11170367864413300topic-test" (values in key order, Signature left out), then the body."""
    ext = {"topic": "topic-test", "queueId": "0", "bornTimestamp": "117036786441330", "bname": "brokerName-1",
           "Signature": "a stale one"}
    body = b"the body"
    signed = sign(ext, body, Credentials("abc", "secret"))
    content = b"abcbrokerName-11170367864413300topic-test" + body
    expected = base64.b64encode(hmac.new(b"secret", content, hashlib.sha1).digest()).decode()
    assert signed == {**ext, "AccessKey": "abc", "Signature": expected}
    assert sign(ext, b"another body", Credentials("abc", "secret"))["Signature"] != expected
    token = sign(ext, body, Credentials("abc", "secret", security_token="tok"))
    assert token["SecurityToken"] == "tok" and token["Signature"] != expected


def test_a_request_carries_its_signed_fields_in_its_header() -> None:
    frame = _encode(GET_MAX_OFFSET, {"topic": "t", "queueId": 3, "flag": True, "none": None}, b"", 7,
                    Credentials("ak", "sk"))
    header = json.loads(frame[8:8 + int.from_bytes(frame[4:8], "big")])
    fields = {"topic": "t", "queueId": "3", "flag": "true"}
    assert header["extFields"] == sign(fields, b"", Credentials("ak", "sk"))
    unsigned = _encode(GET_MAX_OFFSET, {"topic": "t"}, b"", 7)
    assert json.loads(unsigned[8:])["extFields"] == {"topic": "t"}


def _refusal(remark: str) -> Command:
    return Command(NO_PERMISSION, {}, b"", remark, 1, 1)


@pytest.mark.parametrize("remark", ["check signature failed.", "User:ghost is not found.",
                                    "username cannot be null.", "User:rstream is disabled."])
def test_a_refused_credential_is_its_own_error_saying_what_to_check(remark: str) -> None:
    error = refused("h:1", SEND_BATCH_MESSAGE, {"b": "orders"}, _refusal(remark), Credentials("ghost", "x"))
    assert isinstance(error, CredentialsRefusedError) and isinstance(error, BrokerError)
    assert remark in str(error) and "check access_key and secret_key" in str(error)
    anonymous = refused("h:1", SEND_BATCH_MESSAGE, {"b": "orders"}, _refusal(remark), None)
    assert "give RocketMQBroker(namesrv, access_key=..., secret_key=...)" in str(anonymous)


@pytest.mark.parametrize("code, ext, remark, resource, permission", [
    (SEND_BATCH_MESSAGE, {"a": "rstream-writer", "b": "orders"},
     "User:reader has no permission to access Topic:orders from 127.0.0.1, no matched policies.",
     "topic 'orders'", "PUB"),
    (PULL_MESSAGE, {"consumerGroup": "rstream-reader", "topic": "orders"},
     "User:reader has no permission to access Group:rstream-reader from 127.0.0.1, the decision is deny.",
     "group 'rstream-reader'", "SUB"),
    (PULL_MESSAGE, {"consumerGroup": "rstream-reader", "topic": "orders"},
     "the topic[orders] pulling message is forbidden", "topic 'orders'", "SUB"),
    (PULL_MESSAGE, {"consumerGroup": "rstream-reader", "topic": "orders"},
     "subscription group no permission, rstream-reader", "group 'rstream-reader'", "SUB"),
])
def test_a_missing_permission_names_the_resource_and_the_permission(
        code: int, ext: dict[str, str], remark: str, resource: str, permission: str) -> None:
    error = refused("h:1", code, ext, _refusal(remark), Credentials("reader", "x"))
    assert isinstance(error, PermissionDeniedError) and isinstance(error, BrokerError)
    assert (error.resource, error.permission) == (resource, permission)
    assert f"permission {permission} on {resource}" in str(error) and remark in str(error)
    # an ACL's refusal says how to grant it; a topic's or group's own permission is not an ACL's
    assert ("mqadmin updateAcl -b h:1 -s User:reader" in str(error)) == ("has no permission" in remark)


def test_a_refused_group_creation_names_the_group() -> None:
    body = json.dumps({"groupName": "orders-app", "consumeEnable": True}).encode()
    error = refused("h:1", UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, _refusal("forbidden"), Credentials("u", "x"), body)
    assert isinstance(error, PermissionDeniedError)
    assert (error.resource, error.permission) == ("group 'orders-app'", "CREATE")


def test_tls_options() -> None:
    assert tls_context(False) is None and tls_context(None) is None
    context = tls_context(True)
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    own = ssl.create_default_context()
    assert tls_context(own) is own
    with pytest.raises(RemotingError, match="not a CA certificate file"):
        tls_context(__file__)
    with pytest.raises(RemotingError, match="not a CA certificate file"):
        RocketMQBroker("h:1", tls="/nonexistent/ca.pem")


def test_credentials_and_tls_travel_to_executors_but_not_an_ssl_context() -> None:
    broker = RocketMQBroker("h:1", access_key="ak", secret_key="s3cr3t", tls=True)
    copy = pickle.loads(pickle.dumps(broker))
    assert copy._client.credentials == Credentials("ak", "s3cr3t") and copy.tls is True
    assert "s3cr3t" not in repr(broker) + repr(copy._client.credentials)
    plain = pickle.loads(pickle.dumps(RocketMQBroker("h:1")))
    assert plain._client.credentials is None and not plain.tls
    with pytest.raises(RemotingError, match="cannot travel to another process"):
        pickle.dumps(RocketMQBroker("h:1", tls=ssl.create_default_context()))
    with pytest.raises(BrokerError, match="give access_key and secret_key together"):
        RocketMQBroker("h:1", access_key="ak")


def test_a_server_that_closes_every_connection_unheard_is_named_as_a_tls_mismatch_at_once() -> None:
    """What a RocketMQ server in TLS enforcing mode does to a plain connection (NettyRemotingServer's
    TlsModeHandler closes it): an error within a second, not after reconnect_s (60 s)."""
    server = ScriptedServer(lambda header: None)
    try:
        client = Client("unused:0")
        began = time.monotonic()
        with pytest.raises(RemotingError, match="TLS enforcing mode.*connect with TLS"):
            client.max_offset(server.addr, "t", 0)
        assert time.monotonic() - began < 2 and len(server.requests) == 3
        client.close()
    finally:
        server.close()


def test_a_plain_server_that_closes_tls_connections_is_named_too() -> None:
    """What a RocketMQ server with TLS disabled does to a TLS client hello: close."""
    listener = socket.create_server(("127.0.0.1", 0))
    addr = f"127.0.0.1:{listener.getsockname()[1]}"

    def close_each() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.recv(1)
            conn.close()

    threading.Thread(target=close_each, daemon=True).start()
    try:
        conn = Connection(addr, timeout=2.0, reconnect_s=30.0, tls=True)
        began = time.monotonic()
        with pytest.raises(RemotingError, match="closes every TLS connection.*tls=False"):
            conn.request(GET_MAX_OFFSET, {"topic": "t", "queueId": 0})
        assert time.monotonic() - began < 3
    finally:
        listener.close()


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> LocalSecurity:
    """The CA and server certificate LocalRocketMQ(tls=True) makes (with openssl), for 127.0.0.1."""
    home = tmp_path_factory.mktemp("tls-home")
    made = LocalSecurity(home, "127.0.0.1", acl=False, tls=True)
    made.prepare(home / "store")
    return made


def _tls_server(certificates: LocalSecurity) -> ScriptedServer:
    folder = Path(certificates.ca or "").parent
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "server.pem", folder / "server.key")
    return ScriptedServer(lambda h: frame({"code": 0, "opaque": h["opaque"], "flag": 1, "extFields": {"offset": "5"}}),
                          tls=context)


def test_requests_over_tls_reuse_their_connection(certificates: LocalSecurity) -> None:
    """Over TLS, as over TCP, the next request goes on the same connection (a TLS socket takes no
    ``MSG_PEEK``: the check for a connection the server closed reads it its own way), and the
    certificate LocalRocketMQ makes passes Python's strict checks."""
    server = _tls_server(certificates)
    try:
        client = Client("unused:0", tls=certificates.ca)
        for _ in range(3):
            assert client.max_offset(server.addr, "t", 0) == 5
            time.sleep(0.05)
        assert server.connections == 1 and len(server.requests) == 3
        strict = ssl.create_default_context(cafile=certificates.ca)
        strict.verify_flags |= ssl.VERIFY_X509_STRICT  # what Python 3.13 checks by default
        assert Client("unused:0", tls=strict).max_offset(server.addr, "t", 0) == 5
        client.close()
    finally:
        server.close()


def test_a_certificate_the_client_does_not_trust_is_said_at_once(certificates: LocalSecurity) -> None:
    server = _tls_server(certificates)
    try:
        began = time.monotonic()
        with pytest.raises(RemotingError, match="is not trusted .*give tls= the file of the CA"):
            Client("unused:0", tls=True).max_offset(server.addr, "t", 0)
        assert time.monotonic() - began < 2
    finally:
        server.close()

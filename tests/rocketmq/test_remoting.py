"""The remoting client against a fake RocketMQ server (a thread on 127.0.0.1 speaking the frame format):
a request the server refused as busy (RocketMQ's flow control) is sent again, for a while."""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from rstream.rocketmq.remoting import SEND_BATCH_MESSAGE, SUCCESS, SYSTEM_BUSY, Client, RemotingError

pytestmark = pytest.mark.unit


class FakeServer:
    """Answers every request: ``busy`` times SYSTEM_BUSY, then SUCCESS with ``queueOffset`` 7."""

    def __init__(self, busy: int) -> None:
        self.busy = busy
        self.requests: list[int] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self._listener.accept()
        with conn:
            while True:
                head = conn.recv(8, socket.MSG_WAITALL)
                if len(head) < 8:
                    return
                length, header_length = struct.unpack(">II", head)
                rest = conn.recv(length - 4, socket.MSG_WAITALL)
                header = json.loads(rest[:header_length])
                self.requests.append(header["code"])
                code = SYSTEM_BUSY if len(self.requests) <= self.busy else SUCCESS
                reply = {"code": code, "opaque": header["opaque"], "flag": 1, "extFields": {"queueOffset": "7"},
                         "remark": "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while"}
                data = json.dumps(reply).encode()
                conn.sendall(struct.pack(">II", 4 + len(data), len(data)) + data)

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def server(request: Any) -> Iterator[FakeServer]:
    fake = FakeServer(request.param)
    yield fake
    fake.close()


@pytest.mark.parametrize("server", [3], indirect=True)
def test_a_send_refused_as_busy_is_sent_again(server: FakeServer) -> None:
    client = Client("unused:0")
    assert client.send_batch(server.addr, "t", 0, [(b"body", {})], 1) == 7
    assert server.requests == [SEND_BATCH_MESSAGE] * 4
    client.close()


@pytest.mark.parametrize("server", [10**6], indirect=True)
def test_a_server_busy_for_too_long_is_an_error(server: FakeServer) -> None:
    client = Client("unused:0")
    client.conn(server.addr).reconnect_s = 0.3
    with pytest.raises(RemotingError, match="broker busy") as caught:
        client.send_batch(server.addr, "t", 0, [(b"body", {})], 1)
    assert caught.value.code == SYSTEM_BUSY and len(server.requests) > 1
    client.close()


def test_an_idle_connection_above_descriptor_1023_is_seen_open_then_closed() -> None:
    """A kernel that ran many jobs has more than 1024 files open; ``select.select`` refuses such a
    descriptor (the check once took every idle connection there for closed, and a zygote failed to start)."""
    import os

    from rstream.rocketmq.remoting import _closed_by_peer

    ours, peer = socket.socketpair()
    high = os.dup2(ours.fileno(), 1500)
    ours.close()
    sock = socket.socket(fileno=high)
    try:
        assert not _closed_by_peer(sock)
        peer.close()
        assert _closed_by_peer(sock)
    finally:
        sock.close()

"""The remoting client distrusts the server: whatever bytes come back, a frame or a pull's messages
decode, or fail with ``ProtocolError`` (a ``RemotingError``), at once, without allocating much more
than they hold. No JVM: the bytes are written here as RocketMQ writes them (tests/support/rocketmq.py,
after ``MessageDecoder`` and ``RemotingCommand`` in 5.3.3), then cut and garbled."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rstream.rocketmq.remoting import (
    MAX_FRAME,
    SUCCESS,
    Client,
    Connection,
    ProtocolError,
    PulledMessage,
    RemotingError,
    _read_frame,
    decode_frame,
    decode_messages,
    properties_string,
)
from tests.support.rocketmq import ScriptedServer, frame, stored_message

pytestmark = pytest.mark.unit

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_names = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1, max_size=8)
_message = st.fixed_dictionaries({
    "queue": st.integers(0, 2**31 - 1), "offset": st.integers(0, 2**63 - 1),
    "body": st.binary(max_size=200), "properties": st.dictionaries(_names, _names, max_size=4),
    "topic": st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=40),
    "born": st.integers(0, 2**62), "store": st.integers(0, 2**62),
    "v2": st.booleans(), "ipv6": st.booleans(), "compressed": st.booleans(),
})


def _encode(m: dict[str, Any]) -> bytes:
    return stored_message(m["queue"], m["offset"], m["body"], properties_string(m["properties"]), topic=m["topic"],
                          born=m["born"], store=m["store"], v2=m["v2"], ipv6=m["ipv6"], compressed=m["compressed"])


def _expected(m: dict[str, Any]) -> PulledMessage:
    return PulledMessage(m["queue"], m["offset"], m["born"], m["store"], m["body"], properties_string(m["properties"]))


def _decodes_or_refuses(data: bytes, max_inflated: int = 1 << 16) -> list[PulledMessage] | None:
    """What ``decode_messages`` makes of ``data``: its messages, or None when it refused them with a
    ``RemotingError``; either way within the bound on what it may allocate."""
    try:
        got = decode_messages(data, max_inflated)
    except RemotingError:
        return None
    assert sum(len(m.body) + len(m.properties_text) for m in got) <= 2 * len(data) + max_inflated
    return got


@FUZZ
@given(st.lists(_message, max_size=6))
def test_stored_messages_decode_as_rocketmq_wrote_them(messages: list[dict[str, Any]]) -> None:
    data = b"".join(_encode(m) for m in messages)
    assert decode_messages(data) == [_expected(m) for m in messages]


@FUZZ
@given(st.lists(_message, min_size=1, max_size=4), st.data())
def test_a_pull_cut_anywhere_is_the_messages_before_the_cut_or_a_protocol_error(
        messages: list[dict[str, Any]], data: st.DataObject) -> None:
    encoded = [_encode(m) for m in messages]
    whole = b"".join(encoded)
    cut = data.draw(st.integers(0, len(whole) - 1))
    ends = {sum(len(e) for e in encoded[:i]): i for i in range(len(encoded))}
    if cut in ends:  # between two messages: those before it
        assert decode_messages(whole[:cut]) == [_expected(m) for m in messages[:ends[cut]]]
    else:
        with pytest.raises(ProtocolError, match="cut short|says it takes"):
            decode_messages(whole[:cut])


@FUZZ
@given(st.lists(_message, min_size=1, max_size=4), st.lists(st.tuples(st.integers(0), st.integers(0, 255)),
                                                              min_size=1, max_size=8))
def test_a_garbled_pull_decodes_or_is_refused_never_loops_nor_allocates_much(
        messages: list[dict[str, Any]], flips: list[tuple[int, int]]) -> None:
    data = bytearray(b"".join(_encode(m) for m in messages))
    for where, value in flips:
        data[where % len(data)] = value
    _decodes_or_refuses(bytes(data))


@FUZZ
@given(st.binary(max_size=600))
def test_arbitrary_bytes_as_a_pull_decode_or_are_refused(data: bytes) -> None:
    _decodes_or_refuses(data)


@pytest.mark.timeout(10)  # the decoder once stayed on a message of size 0 forever
@pytest.mark.parametrize("size", [0, -1, -(2**31), 1, 90, 10**6])
def test_a_message_whose_size_is_zero_negative_or_beyond_the_reply_is_refused(size: int) -> None:
    real = stored_message(0, 7, b"body", "KEYS\x01k\x02")
    garbled = struct.pack(">i", size) + real[4:]
    with pytest.raises(ProtocolError, match=f"says it takes {size} bytes"):
        decode_messages(real + garbled)


def test_a_negative_topic_length_is_refused() -> None:
    real = stored_message(0, 7, b"body", "", topic="t", v2=True)
    at = len(real) - 2 - 1 - 2  # the topic's length, before the topic ("t") and the properties' length
    assert real[at:at + 2] == b"\x00\x01"
    with pytest.raises(ProtocolError, match="says its topic takes -1 bytes"):
        decode_messages(real[:at] + b"\xff\xff" + real[at + 2:])


def _zeros_deflated(megabytes: int) -> bytes:
    """``megabytes`` MB of zeros, zlib-compressed (about a thousandth of that), made without holding them."""
    deflater, block = zlib.compressobj(9), bytes(1 << 20)
    return b"".join(deflater.compress(block) for _ in range(megabytes)) + deflater.flush()


def _compressed_message(deflated: bytes, offset: int = 0) -> bytes:
    """A stored message flagged zlib-compressed whose body is ``deflated`` as it is."""
    plain = stored_message(0, offset, b"x" * len(deflated), "", compressed=False)
    message = bytearray(plain.replace(b"x" * len(deflated), deflated))
    struct.pack_into(">i", message, 36, 0x1 | 0x3 << 8)  # the system flag: compressed, with zlib
    return bytes(message)


def test_a_body_that_inflates_past_the_bound_is_refused_without_inflating_it() -> None:
    bomb = _compressed_message(_zeros_deflated(64))  # 64 MB of zeros in about 64 KB
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError, match="inflate to more than 1048576 bytes"):
            decode_messages(bomb, max_inflated=1 << 20)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20


def test_the_inflation_bound_is_for_a_whole_reply() -> None:
    one = _compressed_message(_zeros_deflated(1))
    assert [len(m.body) for m in decode_messages(one * 2, max_inflated=2 << 20)] == [1 << 20] * 2
    with pytest.raises(ProtocolError, match="inflate to more than"):
        decode_messages(one * 3, max_inflated=2 << 20)


def test_a_compressed_body_that_does_not_inflate_is_refused() -> None:
    deflated = zlib.compress(b"a body that compresses " * 40)
    with pytest.raises(ProtocolError, match="does not inflate"):
        decode_messages(_compressed_message(b"\x00" + deflated[1:]))
    with pytest.raises(ProtocolError, match="cut short"):
        decode_messages(_compressed_message(deflated[:-6]))


# -- frames -------------------------------------------------------------------------------------------
_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                     max_leaves=12)
_header = st.fixed_dictionaries({}, optional={
    "code": st.integers(-5, 500) | _json, "opaque": st.integers() | _json, "flag": st.integers(0, 3) | _json,
    "remark": st.text(max_size=20) | _json, "extFields": st.dictionaries(st.text(max_size=8), st.text(max_size=8)) | _json,
})


@FUZZ
@given(_header, st.binary(max_size=40))
def test_any_json_header_decodes_to_a_command_of_the_right_types_or_is_refused(header: dict[str, Any],
                                                                              body: bytes) -> None:
    try:
        command = decode_frame(frame(header, body)[4:])
    except ProtocolError:
        assert not (type(header.get("code")) is int and type(header.get("opaque", 0)) is int
                    and type(header.get("flag", 0)) is int and isinstance(header.get("extFields") or {}, dict)
                    and all(isinstance(v, str) for v in (header.get("extFields") or {}).values())
                    and isinstance(header.get("remark", ""), (str, type(None))))
        return
    assert command.code == header["code"] and command.body == body
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in command.ext.items())


@FUZZ
@given(st.binary(max_size=200))
def test_arbitrary_bytes_as_a_frame_decode_or_are_refused(data: bytes) -> None:
    try:
        decode_frame(data)
    except ProtocolError:
        pass


def test_a_header_nested_past_pythons_recursion_limit_is_refused() -> None:
    with pytest.raises(ProtocolError, match="not JSON"):
        decode_frame(frame(b"[" * 100_000 + b"]" * 100_000)[4:])


@pytest.mark.parametrize("data, why", [
    (struct.pack(">I", 50) + b"{}", "says its header takes 50"),
    (struct.pack(">I", 1 << 24 | 2) + b"{}", "serialize type 1"),
    (b"\x00\x00", "no header length"),
    (struct.pack(">I", 2) + b"[]", "JSON list, not an object"),
])
def test_a_frame_whose_header_does_not_fit_or_is_not_json_is_refused(data: bytes, why: str) -> None:
    with pytest.raises(ProtocolError, match=why):
        decode_frame(data)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    yield ours, theirs
    ours.close()
    theirs.close()


@pytest.mark.parametrize("head, why", [
    (struct.pack(">I", MAX_FRAME - 3), "at most 16777212"),
    (struct.pack(">I", 2**32 - 1), "at most 16777212"),
    (bytes.fromhex("15030300"), "answered in TLS"),  # a TLS alert record: what a TLS server says to plain TCP
    (struct.pack(">I", 3), "too short"),
])
def test_a_frame_length_beyond_rocketmqs_bound_is_refused_before_reading_it(
        pair: tuple[socket.socket, socket.socket], head: bytes, why: str) -> None:
    ours, theirs = pair
    theirs.sendall(head)  # and nothing more: reading the frame would wait until the deadline
    began = time.monotonic()
    with pytest.raises(ProtocolError, match=why):
        _read_frame(ours, time.monotonic() + 30)
    assert time.monotonic() - began < 5


def test_the_largest_frame_rocketmq_sends_is_read(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    header = b'{"code":0}'
    body = bytes(MAX_FRAME - 4 - 4 - len(header))  # the length and the header length included: 16 MB in all
    data = frame(header, body)
    assert len(data) == MAX_FRAME
    sender = threading.Thread(target=theirs.sendall, args=(data,))
    sender.start()
    got = _read_frame(ours, time.monotonic() + 30)
    sender.join()
    assert got.code == 0 and len(got.body) == len(body)


def _answer(header: dict[str, Any], **fields: Any) -> bytes:
    return frame({"code": SUCCESS, "opaque": header["opaque"], "flag": 1, **fields})


def test_a_server_answering_garbage_is_a_protocol_error_and_the_next_request_connects_anew() -> None:
    answers = iter([lambda h: frame(b"{garbage"),
                    lambda h: _answer(h, extFields={"offset": "42"})])
    server = ScriptedServer(lambda header: next(answers)(header))
    try:
        client = Client("unused:0")
        with pytest.raises(ProtocolError, match=f"RocketMQ at {server.addr}, answering request 30: .*header"):
            client.max_offset(server.addr, "t", 0)
        assert client.max_offset(server.addr, "t", 0) == 42
        assert len(server.requests) == 2
        client.close()
    finally:
        server.close()


def test_a_reply_without_the_field_a_call_reads_is_a_protocol_error_naming_it() -> None:
    server = ScriptedServer(lambda header: _answer(header, extFields={"queueOffset": "soon"}))
    try:
        client = Client("unused:0")
        with pytest.raises(ProtocolError, match="header field 'queueOffset' = 'soon', not a number"):
            client.send(server.addr, "t", 0, b"body", {}, 1)
        client.close()
    finally:
        server.close()


def test_a_reply_trickled_slower_than_the_timeout_is_given_up_on() -> None:
    """A byte every 0.2 s keeps every single read within a 1 s timeout: the whole answer is bounded."""
    server = ScriptedServer(lambda header: _answer(header, extFields={"offset": "1"}), chunk=1, pause=0.2)
    try:
        conn = Connection(server.addr, timeout=1.0, reconnect_s=2.0)
        began = time.monotonic()
        with pytest.raises(RemotingError, match="cannot reach"):
            conn.request(30, {"topic": "t", "queueId": 0})
        assert time.monotonic() - began < 8
        conn.close()
    finally:
        server.close()


def test_frames_that_never_answer_the_request_are_given_up_on() -> None:
    """A server may send a client requests of its own; one that sends nothing else never answers."""
    def chatter(header: dict[str, Any]) -> bytes:
        notice = frame({"code": 40, "opaque": 10**6, "flag": 0})
        return notice * 400  # 0.01 s apart: 4 s of them, past the 1 s timeout

    server = ScriptedServer(chatter, chunk=len(frame({"code": 40, "opaque": 10**6, "flag": 0})), pause=0.01)
    try:
        conn = Connection(server.addr, timeout=1.0, reconnect_s=0.0)
        began = time.monotonic()
        with pytest.raises(RemotingError, match="cannot reach"):
            conn.request(30, {"topic": "t", "queueId": 0})
        assert time.monotonic() - began < 4
        conn.close()
    finally:
        server.close()


def test_json_bodies_that_are_not_json_are_protocol_errors() -> None:
    server = ScriptedServer(lambda header: frame({"code": SUCCESS, "opaque": header["opaque"], "flag": 1},
                                                 b"\xff{not json"))
    try:
        client = Client(server.addr)
        with pytest.raises(ProtocolError, match="body is not JSON"):
            client.cluster_info()
        with pytest.raises(ProtocolError, match="stats with what rstream cannot read"):
            client.topic_offsets(server.addr, "t")
        client.close()
    finally:
        server.close()


def test_the_header_json_of_a_real_reply_decodes() -> None:
    header = {"code": 0, "extFields": {"queueOffset": "3", "msgId": "7F00"}, "flag": 1, "language": "JAVA",
              "opaque": 9, "serializeTypeCurrentRPC": "JSON", "version": 475}
    command = decode_frame(frame(json.dumps(header).encode())[4:])
    assert (command.code, command.opaque, command.flag, command.int_field("queueOffset")) == (0, 9, 1, 3)


@pytest.mark.parametrize("properties", ["RSTREAM_KEY\x01b:not base64!\x02", "RSTREAM_KEY\x01s://8=\x02",
                                        "RSTREAM_BORN\x01yesterday\x02"])
def test_rstreams_own_properties_garbled_are_protocol_errors(properties: str) -> None:
    from rstream.rocketmq.broker import _unpack

    message = decode_messages(stored_message(0, 0, b"body", properties))[0]
    with pytest.raises(ProtocolError, match="not what rstream writes there"):
        _unpack(message)
    assert _unpack(decode_messages(stored_message(0, 0, b"b", "RSTREAM_KEY\x01b:AAE=\x02RSTREAM_BORN\x017\x02"))[0])[:2] \
        == (b"\x00\x01", 7)

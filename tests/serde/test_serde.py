from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rstream import (
    JsonDeserializer,
    JsonSerializer,
    RawSerializer,
    SerdeError,
    TextDeserializer,
    TextSerializer,
)
from rstream.serde import as_deserializer, as_serializer
from rstream.serde.codec import decode, encode, stable_queue
from rstream.time.windows import WindowKey

KEYS = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(), st.binary(), st.floats(allow_nan=False)),
    lambda inner: st.tuples(inner, inner), max_leaves=6,
)


@given(KEYS)
def test_codec_round_trips_and_is_deterministic(key: object) -> None:
    assert decode(encode(key)) == key
    assert encode(key) == encode(decode(encode(key)))


def test_codec_falls_back_to_pickle_for_other_types() -> None:
    day = datetime.date(2024, 2, 29)
    assert decode(encode(day)) == day and encode(day)[0] == 0x80


def test_stable_queue_is_the_same_in_every_process() -> None:
    # crc32 of the marshal bytes, unlike Python's hash(), which is salted per process
    import os
    import subprocess
    import sys
    keys = "('apple', 'kiwi', ('user', 7), 12345, None)"
    script = f"from rstream.serde.codec import encode, stable_queue; print([stable_queue(encode(k), 8) for k in {keys}])"
    outs = {
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                       env=dict(os.environ, PYTHONHASHSEED=seed)).stdout.strip()
        for seed in ("1", "2", "random")
    }
    assert outs == {str([stable_queue(encode(k), 8) for k in eval(keys)])}


def test_builtin_serdes() -> None:
    assert TextDeserializer().deserialize("héllo".encode()) == (None, "héllo")
    assert TextSerializer(with_key=True).serialize("k", 3) == b"k:3"
    assert JsonDeserializer().deserialize(b'{"a": 1}') == (None, {"a": 1})
    assert JsonSerializer(with_key=True).serialize("k", [1]) == b'{"key":"k","value":[1]}'
    with pytest.raises(SerdeError, match="needs bytes"):
        RawSerializer().serialize(None, "text")
    assert as_serializer(lambda k, v: b"x")(1, 2) == b"x"
    with pytest.raises(SerdeError, match="not a serializer"):
        as_serializer(3)
    assert as_deserializer(None)(b"a") == (None, "a")


JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text()),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(), inner, max_size=4)),
    max_leaves=10,
)


def _same(a: object, b: object) -> bool:
    """Equal, with NaN equal to NaN and the same types (an int read as a float is not the same)."""
    if isinstance(a, float) and isinstance(b, float) and a != a:
        return b != b
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))  # type: ignore[arg-type]
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)  # type: ignore[attr-defined,index]
    return a == b


@given(JSON_VALUES, st.booleans())
def test_json_deserializer_reads_exactly_what_json_loads_reads(value: object, ascii_only: bool) -> None:
    import json

    body = json.dumps(value, ensure_ascii=ascii_only).encode()  # NaN, Infinity and big ints included
    assert _same(JsonDeserializer().deserialize(body)[1], json.loads(body))


@pytest.mark.parametrize("body", [b'{"n": 123456789012345678901234567890}', b"[-9223372036854775809]",
                                  b'"\\ud800"', b"[NaN, -Infinity]", b"[1e400]"])
def test_json_deserializer_edge_cases_match_json(body: bytes) -> None:
    import json

    assert _same(JsonDeserializer().deserialize(body)[1], json.loads(body))


@pytest.mark.parametrize("body", [b"{not json", b"", b'{"a": 1} x', b"\xff"])
def test_json_deserializer_raises_what_json_raises(body: bytes) -> None:
    import json
    import pickle

    with pytest.raises((json.JSONDecodeError, UnicodeDecodeError)) as ours:
        JsonDeserializer().deserialize(body)
    with pytest.raises(type(ours.value)) as theirs:
        json.loads(body.decode())
    assert str(ours.value) == str(theirs.value)
    assert pickle.loads(pickle.dumps(JsonDeserializer())).deserialize(b"[1]") == (None, [1])


EDGE_BODIES = [b'{"n": 123456789012345678901234567890}', b"[-9223372036854775809]", b'"\\ud800"', b"[NaN, -Infinity]",
               b"[1e400]", b'{"id": "12345678901234567890"}', b"1234567890", b"123456789"]


@given(st.lists(st.one_of(JSON_VALUES.map(lambda v: __import__("json").dumps(v).encode()),
                          st.sampled_from(EDGE_BODIES)), max_size=8))
def test_deserializers_read_a_chunk_as_they_read_each_body(bodies: list[bytes]) -> None:
    """``deserialize_many`` (a chunk's bodies at once) gives what ``deserialize`` gives body by body,
    also next to bodies with long numbers, and with digits at the end of one body and the start of
    the next ("1234567890" then "123456789": no long number)."""
    json_de = JsonDeserializer()
    keys, values = json_de.deserialize_many(bodies)
    assert keys == [None] * len(bodies)
    assert len(values) == len(bodies) and all(_same(v, json_de.deserialize(b)[1]) for v, b in zip(values, bodies))
    text = TextDeserializer()
    assert text.deserialize_many(bodies) == ([None] * len(bodies), [text.deserialize(b)[1] for b in bodies])


def test_a_chunk_with_a_body_that_is_not_json_raises_as_that_body_does() -> None:
    import json

    with pytest.raises(json.JSONDecodeError, match="Expecting property name"):
        JsonDeserializer().deserialize_many([b"[1]", b"{not json", b"[2]"])


def test_serializers_write_a_chunk_as_they_write_each_record() -> None:
    keys, values = ["a", 1, None, ("t", 2), "é"], [1, "x", [1.5, None], {"k": "v"}, "café"]
    for ser in (TextSerializer(), TextSerializer(with_key=True, separator="\t"), TextSerializer(encoding="latin-1"),
                TextSerializer(with_key=True, encoding="UTF_8"), TextSerializer(with_key=True, encoding="utf-16"),
                JsonSerializer(), JsonSerializer(with_key=True)):
        assert ser.serialize_many(keys, values) == [ser.serialize(k, v) for k, v in zip(keys, values)]


class _Opaque:  # not JSON: JsonSerializer writes str() of it
    def __str__(self) -> str:
        return "opaque é"


JSON_OUT = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**80, max_value=2**80), st.floats(), st.text(),
              st.builds(_Opaque), st.builds(WindowKey, st.text(max_size=4), st.integers(), st.integers())),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.tuples(inner, inner),
                            st.dictionaries(st.one_of(st.text(max_size=3), st.integers(), st.floats(), st.none(),
                                                      st.booleans()), inner, max_size=3)),
    max_leaves=8,
)


@given(st.lists(st.tuples(JSON_OUT, JSON_OUT), max_size=6))
def test_json_serializer_writes_a_chunk_byte_for_byte_as_each_record(pairs: list[tuple[object, object]]) -> None:
    """``serialize_many`` (one encoder for the chunk) writes exactly what ``serialize`` writes: floats
    (NaN, 1e+16), non-ASCII, dict keys that are not str, tuples and window keys as lists, and what is
    not JSON as its str()."""
    keys, values = [k for k, _ in pairs], [v for _, v in pairs]
    for ser in (JsonSerializer(), JsonSerializer(with_key=True)):
        assert ser.serialize_many(keys, values) == [ser.serialize(k, v) for k, v in zip(keys, values)]


def test_json_serializer_chunk_raises_on_a_circular_value_and_writes_the_next_chunk() -> None:
    ser = JsonSerializer()
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        ser.serialize_many([None, None], [[1], loop])
    assert ser.serialize_many([None, None], [[1], [[1]]]) == [b"[1]", b"[[1]]"]


FLAT = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                 st.text(st.characters(max_codepoint=0x80), max_size=6), st.sampled_from(["a", "{}", "/p/1", "x y", 'say "hi"', "C:\\dir"]))


@given(st.lists(st.tuples(st.one_of(FLAT, st.builds(WindowKey, FLAT, FLAT, FLAT)), FLAT), min_size=1, max_size=6))
def test_json_serializer_writes_flat_chunks_byte_for_byte(pairs: list[tuple[object, object]]) -> None:
    """Chunks of flat values (str, int, bool, None; keys of those or window keys of those), which
    ``serialize_many`` writes without ``json``'s encoder where it can (ints, plain str): the same
    bytes as ``serialize``, also next to quotes, backslashes, braces, control characters, DEL, a
    non-ASCII character, bools and Nones."""
    keys, values = [k for k, _ in pairs], [v for _, v in pairs]
    for ser in (JsonSerializer(), JsonSerializer(with_key=True)):
        assert ser.serialize_many(keys, values) == [ser.serialize(k, v) for k, v in zip(keys, values)]


def test_json_serializer_writes_window_counts_without_jsons_encoder() -> None:
    ser = JsonSerializer(with_key=True)
    keys = [WindowKey("/page/1", 0, 10_000), WindowKey("/page/2", 10_000, 20_000)]
    assert ser._flat_many(keys, [3, 4]) == [b'{"key":["/page/1",0,10000],"value":3}',
                                            b'{"key":["/page/2",10000,20000],"value":4}']
    assert ser._flat_many(keys, [3, 4.5]) is None  # a float: json's own encoder writes the chunk
    assert ser._flat_many([WindowKey('a"b', 0, 1)], [1]) is None  # a quote to escape: the same

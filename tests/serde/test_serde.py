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

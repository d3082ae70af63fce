"""The batch-format registry: a stored format name makes a reader import only rstream's own modules."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rstream.broker.base import BrokerError
from rstream.broker.batch import unpack


def test_a_format_of_another_module_is_refused_without_importing_it() -> None:
    assert "this" not in sys.modules  # (importing it prints; a broker file must never make a reader do so)
    with pytest.raises(BrokerError, match="only rstream's modules"):
        unpack("this:anything", b"")
    assert "this" not in sys.modules


def test_an_rstream_format_is_found_in_a_fresh_process_that_never_imported_it() -> None:
    code = ("import sys\nfrom rstream.broker.batch import unpack\nfrom rstream.broker.base import BrokerError\n"
            "assert 'rstream.shuffle.batches' not in sys.modules\n"
            "try:\n    unpack('rstream.shuffle.batches:no-such-format', b'')\nexcept BrokerError as e:\n"
            "    assert 'does not register it' in str(e), e\n"
            "assert 'rstream.shuffle.batches' in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_batch_stored_under_its_format_s_older_module_is_read_in_a_fresh_process() -> None:
    """The shuffle's batch formats moved from ``rstream.serde.batches`` to ``rstream.shuffle.batches``: a
    broker file written before holds the older names, and a reader that never imported either reads it."""
    code = ("import marshal, sys\nfrom rstream.broker.batch import unpack\n"
            "assert 'rstream.shuffle.batches' not in sys.modules\n"
            "payload = marshal.dumps((None, ['a', 1], [5, 6], None, 2), 2)\n"
            "cols = unpack('rstream.serde.batches:items', payload)\n"
            "assert list(cols.items) == ['a', 1], cols.items\n")
    subprocess.run([sys.executable, "-c", code], check=True)

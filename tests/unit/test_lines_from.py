"""`lines_from` (the timing reader's shortcut past the dispatch rows) against the plain
line reader on generated logs: it yields a suffix of `text_lines` over the files, and no
line before that suffix holds the needle, so `first_timing_object` answers the same.

Catches: an offset one byte off (a cut first line, or the previous line's tail), a needle
split across two read blocks missed, a file after the first holding one dropped, a line cut
at max_line read from its middle. Mutants tried by hand: `+ 1` dropped from the line start
-> fails (the first line gains the previous line's ending); `tail` kept empty -> fails on a
needle across the 8-byte blocks."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.api.backend import TIMING_TAG, first_timing_object
from harness.io.boundary import logs
from harness.io.boundary.logs import lines_from, text_lines

TAG = TIMING_TAG.encode()
PIECES = st.sampled_from([TAG, b" {\"a\": 1", b"}", b" {\"median_ms\": 2.5}", b"\n", b"\r\n",
                          b"\xff\xfe", b"[MOE_DROP_DEBUG][dispatch] iter=1", b"x" * 40,
                          TAG[:5], TAG[5:], b"\n[EPCAP_"])
FILES = st.lists(st.lists(PIECES, max_size=14).map(b"".join), min_size=1, max_size=4)


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(logs, "_CHUNK", 2)      # 8-byte search blocks: needles across them


@settings(max_examples=400, deadline=None)
@given(files=FILES, max_line=st.sampled_from([8, 20, 64, 1 << 20]))
def test_lines_from_is_the_suffix_from_the_first_line_holding_the_tag(files, max_line):
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, data in enumerate(files):
            paths.append(Path(tmp) / f"rank{i}.log")
            paths[-1].write_bytes(data)
        every = [t for p in paths for _, t in text_lines(p, max_line)]
        got = list(lines_from(paths, TAG, max_line))
        assert len(got) <= len(every)
        assert got == every[len(every) - len(got):]
        before = every[:len(every) - len(got)]
        assert not any(TIMING_TAG in t for t in before)
        if not any(TAG in d for d in files):
            assert got == []
        else:                                   # it starts at the line holding the needle
            assert got
        assert first_timing_object(iter(got)) == first_timing_object(iter(every))


def test_the_first_line_starts_where_its_line_starts(tmp_path):
    """A fixed case: the needle mid-line, after lines of rows; the line comes whole."""
    log = tmp_path / "rank0.log"
    log.write_bytes(b"row 1\nrow 2\nprefix " + TAG + b' {"median_ms": 1.5}\nafter\n')
    assert list(lines_from([log], TAG)) == [f'prefix {TIMING_TAG} {{"median_ms": 1.5}}', "after"]
    assert first_timing_object(lines_from([log], TAG)) == {"median_ms": 1.5}


def test_a_native_timing_reader_is_given_every_line(tmp_path):
    """Backend.timing_of: the shortcut only for the SPEC's reader; a backend overriding
    parse_timing (a native format without the tag) sees every line of every log."""
    from harness.api.backend import Backend

    class Native:
        def parse_timing(self, lines):
            return {"lines": list(lines)}

    class Spec:
        parse_timing = Backend.parse_timing

    a, b = tmp_path / "rank0.log", tmp_path / "rank1.log"
    a.write_bytes(b"native 1\nnative 2\n")
    b.write_bytes(b"row\n" + TAG + b' {"median_ms": 3}\n')
    assert Backend.timing_of(Native(), [a, b]) == {
        "lines": ["native 1", "native 2", "row", f'{TIMING_TAG} {{"median_ms": 3}}']}
    assert Backend.timing_of(Spec(), [a, b]) == {"median_ms": 3}
    assert Backend.timing_of(Spec(), [a]) is None

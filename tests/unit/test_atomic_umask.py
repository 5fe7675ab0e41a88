"""Atomic writes honour the umask: a results file gets the mode a plain open() would give
(docs/spec.md: results layout; a results directory is shared with analysts and auditors)."""

from __future__ import annotations

import os
import stat
from contextlib import contextmanager

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.io.atomic import current_umask, write_text_atomic
from harness.results.tables import write_table_atomic


@contextmanager
def umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@settings(max_examples=40, deadline=None)
@given(mask=st.integers(min_value=0, max_value=0o777))
def test_atomic_file_mode_equals_plain_open(tmp_path_factory, mask):
    folder = tmp_path_factory.mktemp("u")
    with umask(mask):
        assert current_umask() == mask
        with open(folder / "plain.txt", "w") as fh:
            fh.write("x")
        write_text_atomic(folder / "atomic.txt", "x")
        write_table_atomic(folder / "t.tsv", ["a"], [{"a": "1"}])
    assert mode(folder / "atomic.txt") == mode(folder / "plain.txt")
    assert mode(folder / "t.tsv") == mode(folder / "plain.txt")


def test_shared_umask_makes_results_group_readable(tmp_path):
    with umask(0o022):
        write_text_atomic(tmp_path / "r.tsv", "a\n")
    assert mode(tmp_path / "r.tsv") == 0o644


def test_with_mkstemps_mode_the_check_fails(tmp_path, monkeypatch):
    """The guard: a temp file created 0600 (mkstemp's mode) gives 0600 -- the mode
    test_shared_umask_makes_results_group_readable rejects."""
    from harness.io import outdir
    real_open = os.open
    monkeypatch.setattr(outdir.os, "open",
                        lambda p, flags, mode=0o777, **kw: real_open(
                            p, flags, 0o600 if flags & os.O_CREAT else mode, **kw))
    with umask(0o022):
        write_text_atomic(tmp_path / "r.tsv", "a\n")
    assert mode(tmp_path / "r.tsv") == 0o600

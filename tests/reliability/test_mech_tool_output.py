"""Mechanism: a tool's output is checked for its shape before it is stored
(harness.io.boundary.tools: both pipes read within OUTPUT_MAX_BYTES, commit_problem; and
harness.results.provenance.git_facts): a `git` on PATH that answers anything but a commit id
and an ISO date, or floods stdout, gives `git-refused PATH (why)` in provenance, never its
output."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.io.boundary.tools import COMMIT, OUTPUT_MAX_BYTES, run_tool
from harness.results.provenance import repo_line

# a fake git: `git -C REPO log ...` prints the file $FAKE_GIT_OUT; status and rev-parse
# answer as a clean checkout on main would
FAKE_GIT = """#!/bin/sh
case "$3" in
  log) cat "$FAKE_GIT_OUT" ;;
  status) echo "## main" ;;
  rev-parse) echo .git ;;
esac
"""
HEX = "0123456789abcdef"
SHAS = st.one_of(
    st.text(HEX, min_size=0, max_size=70),                        # wrong lengths, and right
    st.text(HEX + "ABCDEFg", min_size=40, max_size=40),          # upper case, a non-hex
    st.text(min_size=1, max_size=80).filter(lambda s: " " not in s and "\n" not in s),
    st.sampled_from(["a" * 40, "b" * 64, "a" * 39 + "\x1b", "A" * 40, "0" * 41]))
DATES = st.sampled_from(["2026-12-05T17:01:58+00:00", "yesterday", "", "2026-13-45T00:00:00Z",
                         "2026-12-05T17:01:58+00:00\x1b[2J"])


def fake_git(tmp: Path, monkeypatch, out: bytes) -> Path:
    """PATH led by a fake git answering `out` to `git log`; returns the answer's file."""
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "git").write_text(FAKE_GIT)
    (bindir / "git").chmod(0o755)
    answer = tmp / "answer"
    answer.write_bytes(out)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GIT_OUT", str(answer))
    return answer


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sha=SHAS, date=DATES)
@example(sha="a" * 40, date="2026-12-05T17:01:58+00:00")
@example(sha="f" * 64, date="2026-12-05T17:01:58+00:00")
def test_provenance_stores_only_a_commit_id_and_a_date(tmp_path, monkeypatch, sha, date):
    """Catches a provenance line that stores whatever git printed (the fourth round stored a
    flood as a commit). A 40- or 64-digit lowercase id and an ISO date are stored as given;
    everything else is `git-refused`. Mutant tried by hand: git_facts without the shape
    check -> the generated garbage appears in the line."""
    fake_git(tmp_path, monkeypatch, f"{sha} {date}\n".encode("utf-8", "surrogateescape"))
    line = repo_line(tmp_path)
    good = COMMIT.fullmatch(sha) and date and "\x1b" not in date and date != "yesterday" \
        and not date.startswith("2026-13")
    if good:
        assert line == f"{sha} {date} main dirty=false"
    else:
        assert line.startswith(f"git-refused {tmp_path} ("), line
        assert not re.search(r"[\x00-\x1f\x7f]", line), "a control character was stored"
        assert len(line) < 300 + len(str(tmp_path))


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(extra=st.integers(1, 3 * OUTPUT_MAX_BYTES))
def test_a_git_that_floods_stdout_is_refused(tmp_path, monkeypatch, extra):
    """A git answering OUTPUT_MAX_BYTES + a generated number of bytes: refused within a
    bounded time and memory (the old capture_output read it all, then stored a commit cut
    from it)."""
    fake_git(tmp_path, monkeypatch, b"a" * 40 + b" " + b"x" * (OUTPUT_MAX_BYTES + extra))
    t0 = time.monotonic()
    line = repo_line(tmp_path)
    assert line == f"git-refused {tmp_path} (its answer is over {OUTPUT_MAX_BYTES} bytes)"
    assert time.monotonic() - t0 < 20


def test_an_endless_flood_is_stopped_not_read(tmp_path):
    """`yes` never ends: the boundary stops it at the cap instead of reading forever."""
    run = run_tool(["yes", "deadbeef"], timeout_s=30)
    assert not run.ok and "refused, not stored" in run.problem and run.out == ""

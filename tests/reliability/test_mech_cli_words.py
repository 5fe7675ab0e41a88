"""The command line's words: one error form (`epcap: error: ...`, exit 2, also for click's
usage errors) and a closed stdout pipe (`epcap ... | head`) ending silently (exit 0 or 141,
no 'Broken pipe')."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from .conftest import run_cli

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ["run", "status", "capacity", "parse", "classify", "report", "audit", "publish",
            "forecast", "nosuch", ""]
JUNK = st.one_of(st.sampled_from(["--seq", "--mbs", "x", "-1", "--nope", "--json", "--", "-h2",
                                  "--pad-multiple", "1e99", "--grid", "--until", "--results"]),
                 st.text(alphabet="-abcxyz019=", max_size=8))


@settings(max_examples=60, deadline=None)
@given(command=st.sampled_from(COMMANDS), args=st.lists(JUNK, max_size=4))
def test_usage_errors_have_the_one_error_form(command, args):
    argv = [command, *args] if command else args
    if command in ("run", "publish", "report", "audit"):
        argv.append("--no-such-option")   # never start a campaign, an upload or a report
    res = run_cli(*argv, timeout_s=30)
    if res.code == 0:
        return                         # e.g. `capacity --help`: fine as long as it is clean
    assert "Traceback" not in res.text
    if res.code == 2:
        assert res.err.startswith("epcap: error: "), (argv, res.err)
        assert "\nError: " not in "\n" + res.err and "Usage:" not in res.err, (argv, res.err)


def _closed_stdout(argv: list[str]) -> subprocess.CompletedProcess:
    """Run `epcap ARGV` with stdout a pipe whose reader has already gone."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "harness.cli", *argv], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=60, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        os.close(write)


@settings(max_examples=6, deadline=None)
@given(argv=st.sampled_from([
    ["capacity", "--seq", "4096", "--mbs", "1", "--topk", "8", "--required", "1.3"],
    ["capacity", "--seq", "4096", "--mbs", "2", "--topk", "8", "--peak", "70000", "--json"],
    ["capacity", "--seq", "128", "--mbs", "1", "--topk", "2", "--check", "2.00"],
    ["--help"], ["capacity", "--help"], ["run", "--help"], ["forecast", "--help"]]))
def test_a_closed_pipe_ends_silently(argv):
    res = _closed_stdout(argv)
    assert res.returncode in (0, 141), (argv, res.returncode, res.stderr)
    assert "Broken pipe" not in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert "Exception ignored" not in res.stderr, res.stderr


def test_every_command_help_has_an_example_and_one_grid_spelling():
    from harness.cli import main
    for name in sorted(main.commands):
        res = run_cli(name, "--help")
        assert res.code == 0, (name, res.text)
        assert "Example:" in res.out and f"epcap {name}" in res.out, name
        assert "decimals:D" not in res.out, name        # Grid's spelling: decimals-D
        if "--pad-multiple" in res.out:
            block = res.out.split("--pad-multiple", 1)[1].split("\n  -", 1)[0]
            assert "multiple" in block.lower() and "slots" in block, (name, block)


@settings(max_examples=30, deadline=None)
@given(pad=st.one_of(st.integers(1 << 16 + 1, 10**30), st.just(10**23)),
       grid=st.one_of(st.just("decimals:100000"),
                      st.integers(13, 10**6).map("decimals:{}".format),
                      st.integers(13, 10**6).map("decimals-{}".format)))
def test_forecast_refuses_huge_pad_multiple_and_grid_fast(pad, grid):
    res = run_cli("forecast", "no-such-trace.jsonl", "--pad-multiple", str(pad), timeout_s=5)
    assert res.code == 2 and "--pad-multiple" in res.err, res.text
    res = run_cli("forecast", "no-such-trace.jsonl", "--grid", grid, timeout_s=5)
    assert res.code == 2 and "--grid" in res.err, res.text
    assert len(res.err) < 300


@settings(max_examples=15, deadline=None)
@given(text=st.one_of(st.text(max_size=200).filter(lambda t: "[MOE_DROP_DEBUG]" not in t
                                                   and t.strip()),
                      st.just("iteration 1/ 10 | loss 3.2\n")))
def test_parse_without_telemetry_says_why_and_exits_1(tmp_path_factory, text):
    log = tmp_path_factory.mktemp("p") / "rank0.log"
    log.write_text(text, encoding="utf-8")
    for extra in ([], ["--json"]):
        res = run_cli("parse", log, *extra)
        assert res.code == 1, res.text
        assert "MOE_DROP_DEBUG=1" in res.err, res.err

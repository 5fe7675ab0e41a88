"""A user's SIGINT always stops a campaign as an interrupt (docs/campaign.md: the running
cells' process groups stopped, a `checkpoint` event, exit 130), wherever it lands: never
classified as a harness failure of the cell that was starting, retried, and the campaign
carried on to "done", rc 0.

Seen failing on 28ad19d (`Interrupted(Exception)`, caught by driver.py's `except Exception`
around the launcher's submit): at every delay from 0 to 0.8 s after `starting campaign`, the
canary a1 was recorded `harness ... Interrupted: SIGINT (cli.py:77 in handler)`, retried,
and the retry hung for the run timeout (the fork server had taken the SIGINT too)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.uploads.corpus import short_runbook_text

ROOT = Path(__file__).resolve().parents[2]
EPCAP = [sys.executable, "-m", "harness.cli", "run"]
# From the driver's first line to well past the first cell's start (the fork server's
# start-up, about 1 s on the 2-core build machine, is the widest window).
DELAYS = (0.0, 0.03, 0.08, 0.15, 0.25, 0.4, 0.6, 0.9, 1.3)

pytestmark = pytest.mark.slow


def tiny_runbook(folder: Path) -> Path:
    """The notes' prelude campaign: one model, one forked echo backend, 4 cells."""
    text = short_runbook_text()
    text = "\n".join(line for line in text.splitlines()
                     if "DEEPSEEK_V2_LITE" not in line and "name: ultraep" not in line) + "\n"
    path = folder / "tiny.yaml"
    path.write_text(text.replace("campaign: reduced", "campaign: tiny"))
    return path


def interrupt_after_start(book: Path, results: Path, delay: float) -> tuple[int | None, str]:
    """`epcap run` in its own session; SIGINT to the whole group `delay` s after the
    driver says `starting campaign`; returns (exit code or None if it hung, its output)."""
    out = results.parent / f"{results.name}.out"
    with open(out, "w") as fh:
        proc = subprocess.Popen([*EPCAP, str(book), "--results", str(results)], cwd=ROOT,
                                stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while "starting campaign" not in out.read_text() and proc.poll() is None:
        assert time.monotonic() < deadline, out.read_text()
        time.sleep(0.005)
    time.sleep(delay)
    try:
        os.killpg(proc.pid, signal.SIGINT)
    except ProcessLookupError:
        pass
    try:
        code: int | None = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        code = None
    return code, out.read_text()


def test_sigint_while_a_cell_starts_is_an_interrupt_every_time(tmp_path):
    book = tiny_runbook(tmp_path)
    for i, delay in enumerate(DELAYS):
        results = tmp_path / f"r{i}"
        code, text = interrupt_after_start(book, results, delay)
        if code == 0 and "done:" in text:
            continue            # finished before the signal: nothing to interrupt
        where = f"delay {delay}: {text[-2000:]}"
        assert code == 130, where
        assert "interrupted (SIGINT); checkpoint written" in text, where
        assert "harness" not in text and "Traceback" not in text, where
        events = [json.loads(line) for line in
                  (results / "tiny" / "events.jsonl").read_text().splitlines()]
        assert events[-1]["ev"] == "checkpoint" and events[-1]["reason"] == "SIGINT", where
        assert not any(e["ev"] == "cell_finish" and e.get("status") == "harness"
                       for e in events), where
    code = subprocess.run([*EPCAP, str(book), "--results", str(tmp_path / "r0")], cwd=ROOT,
                          capture_output=True, timeout=120).returncode
    assert code == 0            # the interrupted campaign resumes to the end

"""nvidia-smi's answer is read strictly by the health probe (harness/health.py `read_smi`):
an installed nvidia-smi whose rows cannot be read (a wrong number of columns, an index or a
count that is not a number nor a bracketed note like `[N/A]`) makes the probe `unhealthy`,
as a failing or non-UTF-8 answer already did; only an empty answer (no GPU listed) is
`no-gpu`.

Seen failing on 28ad19d: a fake nvidia-smi answering the 6-column row `0, NVIDIA H100, GPU-1,
0, 0, 0` made `epcap doctor --json` say `"status": "no-gpu", "ok": true`, rc 0 (the row was
raised as NoGpu, the CPU-only verdict); garbage ECC counts were read as "not supported"."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.health import SMI_GPU_FIELDS, probe

from .conftest import run_cli

GOOD = "0, NVIDIA H100 80GB HBM3, GPU-1a2b, 3, 0, 0, 550.54.15"
CELL = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc"),
                                      blacklist_characters=",\n\r\x85\u2028\u2029"),
               max_size=12)


def not_a_count(text: str) -> bool:
    """True when nvidia-smi's reader may not take `text` as a count or a bracketed note."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        return False
    try:
        return not float(text).is_integer()
    except (ValueError, OverflowError):
        return True


@st.composite
def unreadable_rows(draw) -> str:
    """An answer holding at least one row the probe cannot read."""
    kind = draw(st.sampled_from(("columns", "index", "ecc")))
    if kind == "columns":
        n = draw(st.integers(1, 12).filter(lambda k: k != len(SMI_GPU_FIELDS)))
        row = ", ".join(draw(st.lists(CELL, min_size=n, max_size=n)))
        row = row if row.strip() else "x"      # a blank line is no row at all
    else:
        cells = GOOD.split(", ")
        at = 0 if kind == "index" else draw(st.sampled_from((4, 5)))
        cells[at] = draw(CELL.filter(not_a_count))
        row = ", ".join(cells)
    rows = [row] + ([GOOD.replace("0,", "1,", 1)] if draw(st.booleans()) else [])
    return "\n".join(draw(st.permutations(rows))) + "\n"


def fake_smi(folder: Path, answer: str) -> str:
    """A PATH whose nvidia-smi answers `answer` to --query-gpu and nothing to the others."""
    folder.mkdir(exist_ok=True)
    (folder / "answer.txt").write_text(answer, encoding="utf-8")
    tool = folder / "nvidia-smi"
    tool.write_text(f'#!/bin/sh\ncase "$1" in --query-gpu*) cat "{folder}/answer.txt";; esac\n')
    tool.chmod(0o755)
    return f"{folder}:{os.environ['PATH']}"


@settings(max_examples=60, deadline=10000,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(answer=unreadable_rows())
@example(answer="0, NVIDIA H100, GPU-1, 0, 0, 0\n")
@example(answer=GOOD.replace(", 0, 0,", ", lots, 0,") + "\n")
def test_an_unreadable_answer_is_unhealthy(tmp_path_factory, monkeypatch, answer):
    monkeypatch.setenv("PATH", fake_smi(tmp_path_factory.mktemp("smi"), answer))
    report = probe()
    assert not report.ok and report.status == "unhealthy", (answer, report)
    assert any("nvidia-smi" in f for f in report.failures), report


def test_a_readable_answer_is_judged(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", fake_smi(tmp_path / "a", GOOD + "\n"))
    report = probe()
    assert report.ok and report.status == "ok" and len(report.gpus) == 1, report
    monkeypatch.setenv("PATH", fake_smi(tmp_path / "b", GOOD.replace(", 0, 0,", ", [N/A], "
                                                                     "[Not Supported],") + "\n"))
    assert probe().status == "ok"
    monkeypatch.setenv("PATH", fake_smi(tmp_path / "c", ""))
    assert probe().status == "no-gpu"


def test_the_probe_doctor_json_is_unhealthy_rc_1(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", fake_smi(tmp_path, "0, NVIDIA H100, GPU-1, 0, 0, 0\n"))
    res = run_cli("doctor", "--json", timeout_s=30)
    doc = json.loads(res.out)
    assert res.code == 1 and doc["status"] == "unhealthy" and not doc["ok"], res.text
    assert "unreadable row" in " ".join(doc["failures"]), doc

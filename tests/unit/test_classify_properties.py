"""Properties of the timeline verdict (issue 33) over the cells of the classify corpora.

Four edits a cluster makes to a log without changing what happened must never change the
verdict (class and first failed rank): the order the files are read in, fallout lines on
other ranks after the root cause, a line cut after its stable prefix, and a handled error
the rank survived. The cells are the dev half of corpus33 and the older classify corpus
(the held-out half is not used to develop: docs/taxonomy.md#held-out-corpus).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.taxonomy.cli import classify_cell
from harness.taxonomy.judge import cell_layout, cell_logs, judge_run, read_cell_json
from harness.taxonomy.signatures import Matcher, clean, load_table

ROOT = Path(__file__).resolve().parents[2]
CLASSIFY = ROOT / "tests" / "fixtures" / "classify"
C33 = CLASSIFY / "corpus33"
SPLIT = json.loads((C33 / "split.json").read_text(encoding="utf-8"))
OLD = [c["name"] for c in json.loads((CLASSIFY / "cases.json").read_text(encoding="utf-8"))]
CELLS = sorted([C33 / n for n, half in SPLIT.items() if half == "dev"]
               + [CLASSIFY / n for n in OLD])
PROPS = settings(max_examples=40, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.function_scoped_fixture,
                                        HealthCheck.too_slow])
FALLOUT = ("misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer "
           "nid009<45012>",
           "[E1201 09:59:59.000000 ProcessGroupNCCL.cpp:1595] Process group watchdog thread "
           "terminated with exception: NCCL error: remote process exited or there was a "
           "network error, NCCL version 2.21.5")
HANDLED = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
ROW = re.compile(r"^(?P<pre>(?:\d+: )?(?:\[(?:rank|default)\d+\]: ?)?)\[MOE_DROP_DEBUG\]"
                 r"\[dispatch\] iter=\d+ layer=\d+ rank=(?P<rank>\d+) ")


def verdict(cell: Path) -> tuple:
    """(class, first failed rank) of a cell, as `epcap classify` says."""
    got = classify_cell(cell)
    return got["status"], got["first_failed_rank"]


def copy(cell: Path, tmp: Path) -> Path:
    """A scratch copy of a cell directory."""
    dest = tmp / cell.name
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(cell, dest)
    return dest


def lines_of(path: Path) -> list[str]:
    """The lines of a log, endings kept."""
    return path.read_bytes().decode("utf-8", "replace").splitlines(keepends=True)


@pytest.fixture(scope="module")
def truth() -> dict:
    """Each cell's verdict, read once."""
    return {cell: verdict(cell) for cell in CELLS}


@PROPS
@given(st.sampled_from(CELLS), st.randoms(use_true_random=False))
def test_file_order_never_changes_the_verdict(cell, rnd):
    """The judge reads the files in any order: same class and first failed rank."""
    doc = read_cell_json(cell)
    logs = cell_logs(cell)
    launcher = doc.get("launcher", {})
    want = judge_run(launcher.get("exit_code"), launcher["state"], logs, None,
                     layout=cell_layout(cell))
    rnd.shuffle(logs)
    got = judge_run(launcher.get("exit_code"), launcher["state"], logs, None,
                    layout=cell_layout(cell))
    assert (got.status, got.outcome.first_failed_rank) == (
        want.status, want.outcome.first_failed_rank)


def _rank_prefixes(cell: Path) -> dict[str, tuple[Path, str]]:
    """Rank -> (a file holding its dispatch rows, the prefix those rows carry)."""
    out = {}
    for log in cell_logs(cell):
        for text in lines_of(log):
            found = ROW.match(clean(text))
            if found and found.group("rank") not in out:
                out[found.group("rank")] = (log, found.group("pre"))
    return out


@PROPS
@given(st.sampled_from(CELLS), st.randoms(use_true_random=False))
def test_fallout_after_the_root_cause_never_changes_the_verdict(tmp_path, truth, cell, rnd):
    """A communication symptom appended on another rank (after its rows, at the end of its
    file) is fallout by its place: same class and first failed rank."""
    status, first = truth[cell]
    got = classify_cell(cell)
    if first is None or got["deciding"] is None or got["deciding"]["fallout"]:
        return                      # no root cause to come after
    others = {r: v for r, v in _rank_prefixes(cell).items() if r != first}
    if not others:
        return
    rank = rnd.choice(sorted(others))
    log, pre = others[rank]
    work = copy(cell, tmp_path)
    target = work / log.name
    text = target.read_bytes().decode("utf-8", "replace")
    sep = "" if text.endswith("\n") or not text else "\n"
    target.write_bytes((text + sep + pre + rnd.choice(FALLOUT) + "\n").encode())
    assert verdict(work) == (status, first)


def _stable_end(line: str) -> int | None:
    """Where the stable part of a signature line ends: its prefix match when the signature
    has a stable prefix, else the end of its whole match."""
    sigs = load_table().signatures
    text = clean(line)
    full = Matcher([s for s in sigs if not s.truncated]).match(text)
    if full is None:
        return None
    short = [s for s in sigs if s.truncated and s.source == full[0].source]
    for sig in short:
        found = sig.regex.search(text)
        if found:
            return found.end()
    return full[1].end()


@PROPS
@given(st.sampled_from(CELLS), st.randoms(use_true_random=False))
def test_cutting_the_deciding_line_after_its_stable_prefix_never_changes_the_verdict(
        tmp_path, truth, cell, rnd):
    """The deciding line cut anywhere after its stable prefix (a truncated tail)."""
    got = classify_cell(cell)
    if got["line"] is None:
        return
    path = Path(got["line"]["path"])
    lines = lines_of(path)
    raw = lines[got["line"]["line_no"] - 1]
    body = raw.rstrip("\r\n")
    end = _stable_end(body)
    if end is None:
        return
    offset = len(body) - len(clean(body))      # colour codes before the message
    cut = rnd.randint(end + max(offset, 0), len(body))
    lines[got["line"]["line_no"] - 1] = body[:cut] + raw[len(body):]
    work = copy(cell, tmp_path)
    (work / path.name).write_bytes("".join(lines).encode())
    assert verdict(work) == truth[cell]


@PROPS
@given(st.sampled_from(CELLS), st.randoms(use_true_random=False))
def test_a_survived_handled_error_never_changes_the_verdict(tmp_path, truth, cell, rnd):
    """A handled out-of-memory printed by a rank right before one of its own rows (so the
    rank goes on after it) is a warning: same class and first failed rank."""
    ranks = _rank_prefixes(cell)
    if not ranks:
        return
    rank = rnd.choice(sorted(ranks))
    log, pre = ranks[rank]
    work = copy(cell, tmp_path)
    lines = lines_of(work / log.name)
    at = next(i for i, t in enumerate(lines)
              if (m := ROW.match(clean(t))) and m.group("rank") == rank)
    ending = "\r\n" if lines[at].endswith("\r\n") else "\n"
    lines.insert(at, pre + HANDLED + ending)
    (work / log.name).write_bytes("".join(lines).encode())
    got = classify_cell(work)
    assert (got["status"], got["first_failed_rank"]) == truth[cell]
    assert any(HANDLED in w["text"] for w in got["warnings"]) or got["warnings_total"] > 50


def test_properties_can_fail(tmp_path):
    """The comparison is not vacuous: a failure of another rank that the launcher saw exit
    *before* the root cause (an out-of-memory of task 3, exit recorded first) moves the
    verdict, where the same rank's fallout after the root cause did not."""
    cell = C33 / "tmpdir_handled_then_segfault"
    work = copy(cell, tmp_path)
    log = work / "slurm-88231.out"
    lines = lines_of(log)
    at = next(i for i, t in enumerate(lines) if "Fatal Python error" in t)
    lines.insert(at, "srun: error: nid001: task 3: Exited with exit code 1\n")
    lines.append("3: " + HANDLED + "\n")
    log.write_bytes("".join(lines).encode())
    assert verdict(cell) == ("crash", "1")
    assert verdict(work) == ("does_not_fit", "3")

"""The recorded corpus of issue 41: real processes, real faults (scripts/record_faults.py).

Each case is a cell directory the local launcher, torchrun or the Slurm launcher wrote while a
fault was injected from outside (a signal by pid, prlimit, a taken port, a full tmpfs, a bad
flag, a broken module, Slurm's limits, scancel), with the injected truth in `truth.json`. The
split into dev and held-out halves is the parity of sha256(name), committed with the corpus
before any classifier change (tests/fixtures/classify/recorded/README.md).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recorded_corpus import check_heldout_pinned, half
from recorded_corpus import right as _right

from harness.api.backend import DEFAULT_FAILURE_PATTERNS
from harness.taxonomy.cli import classify_cell
from harness.taxonomy.judge import classify_logs
from harness.vocab import FAILURE_CLASSES

ROOT = Path(__file__).resolve().parents[2]
REC = ROOT / "tests" / "fixtures" / "classify" / "recorded"
SPLIT = json.loads((REC / "split.json").read_text(encoding="utf-8"))
DEV = sorted(n for n, h in SPLIT.items() if h == "dev")
HELD = sorted(n for n, h in SPLIT.items() if h == "heldout")
FAULTS = ("SIGKILL", "SIGSEGV", "SIGABRT", "SIGBUS", "SIGTERM", "SIGSTOP", "prlimit", "port",
          "enospc", "badflag", "broken", "time-limit", "mem-limit", "scancel", "scancel-TERM")


def right(name: str, got: dict) -> tuple[bool, bool]:
    return _right(REC, name, got)


def truth(name: str) -> dict:
    """A case's truth.json."""
    return json.loads((REC / name / "truth.json").read_text(encoding="utf-8"))






def score(names: list[str]) -> tuple[int, int, dict]:
    """(class right, class and rank right, name -> [status, first failed rank])."""
    got = {n: classify_cell(REC / n) for n in names}
    marks = [right(n, g) for n, g in got.items()]
    return (sum(c for c, _ in marks), sum(r for _, r in marks),
            {n: [g["status"], g["first_failed_rank"]] for n, g in got.items()})


def test_every_fault_recorded_with_its_truth():
    """Every fault the issue lists is in the corpus, on each launcher it names, each case
    with a class of the vocabulary and the logs its launcher writes."""
    assert len(SPLIT) >= 35
    faults = {truth(n)["fault"] for n in SPLIT}
    assert faults == set(FAULTS), set(FAULTS) ^ faults
    assert {truth(n)["launcher"] for n in SPLIT} == {"local", "torchrun", "srun"}
    for name in SPLIT:
        t = truth(name)
        assert t["class"] in FAILURE_CLASSES and t["injected"] and t["why"], name
        assert t["half"] == SPLIT[name], name
        logs = [p.name for p in (REC / name).iterdir() if p.suffix in (".log", ".out")]
        assert any(p.startswith("rank") for p in logs), name
        assert (REC / name / "cell.json").is_file(), name


def test_split_is_the_hash_parity_of_the_name():
    """The split is a function of the name alone, both halves non-trivial."""
    for name, h in SPLIT.items():
        assert h == half(name), name
    assert len(DEV) >= 15 and len(HELD) >= 15


@given(st.text(min_size=1, max_size=40))
def test_half_is_stable_and_total(name):
    """Any name falls in exactly one half, the same each time (generated names)."""
    assert half(name) in ("dev", "heldout") and half(name) == half(name)
    assert half(name) == ("dev" if hashlib.sha256(name.encode()).digest()[0] % 2 == 0
                          else "heldout")


def test_scoring_counts_a_wrong_rank_and_any():
    """The scorer can fail: a wrong rank is not right, a wrong class is not right, "any"
    accepts every rank."""
    named = next(n for n in SPLIT if truth(n)["first_failed_rank"] not in ("any", None))
    t = truth(named)
    assert right(named, {"status": t["class"], "first_failed_rank": t["first_failed_rank"]}) \
        == (True, True)
    assert right(named, {"status": t["class"], "first_failed_rank": "99"}) == (True, False)
    assert right(named, {"status": "ok", "first_failed_rank": t["first_failed_rank"]}) \
        == (False, False)
    anyone = next(n for n in SPLIT if truth(n)["first_failed_rank"] == "any")
    assert right(anyone, {"status": truth(anyone)["class"], "first_failed_rank": "7"}) \
        == (True, True)


@pytest.mark.parametrize("name", DEV)
def test_dev_case(name):
    """Class and first failed rank of every dev case (the half the classifier was developed
    on: 11/19 and 11/19 before, at f7300db)."""
    got = classify_cell(REC / name)
    assert right(name, got) == (True, True), (truth(name), got["status"],
                                              got["first_failed_rank"], got["reason"])


# ----------------------------------------------------------------- generated cells
RESET = ("[rank{k}]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:589] Read "
         "error [127.0.0.1]:41234: Connection reset by peer")
FRAME = ('[rank{k}]:   File "/venv/lib/python3.11/site-packages/torch/distributed/'
         'distributed_c10d.py", line 5140, in {op}')
WAITED = ("[rank{k}]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:"
          "129] Timed out waiting 4000ms for {way} operation to complete")
ROWS = "[MOE_DROP_DEBUG][dispatch] iter={i} layer=0 rank={k} expected_recv=64 actual_valid_recv=64 budget=128"


def exit_line(task: int, code: int) -> str:
    """harness/launch/local.py's EXIT_RECORD."""
    return f"epcap local launcher: task {task} (pid {1000 + task}) ended (exitcode: {code})"


def judged(files: dict[str, list[str]], code: int = 1, state: str = "failed"):
    """classify_logs over files written to a temporary cell (rank logs and launcher.log)."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for name, body in files.items():
            (Path(tmp) / name).write_text("".join(t + "\n" for t in body), encoding="utf-8")
            paths.append(Path(tmp) / name)
        return classify_logs(code, state, paths, DEFAULT_FAILURE_PATTERNS, 4)


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 4), st.data(), st.sampled_from((-15, -2, -1, -10)))
def test_the_first_rank_stopped_from_outside_is_cancelled(n, data, code):
    """A rank the local launcher saw end first, by a signal no program sends itself, with the
    peers' connection resets after it: `cancelled`, that rank first (not the survivors'
    reset as infra). Control: the same lines with a peer's own exit recorded first are not
    a stop; a crash signal first is `crash`."""
    victim = data.draw(st.integers(0, n - 1))
    peers = [k for k in range(n) if k != victim]
    files = {f"rank{k}.log": [ROWS.format(i=0, k=k)] + ([RESET.format(k=k)] if k != victim
                                                        else []) for k in range(n)}
    order = data.draw(st.permutations(peers))
    files["launcher.log"] = [exit_line(victim, code)] + [exit_line(k, 1) for k in order]
    out = judged(files, code)
    assert (out.status, out.first_failed_rank) == ("cancelled", str(victim)), out.reason
    files["launcher.log"] = [exit_line(order[0], 1), exit_line(victim, code)] + \
        [exit_line(k, 1) for k in order[1:]]
    assert judged(files, 1).status != "cancelled"
    files["launcher.log"] = [exit_line(victim, -11)] + [exit_line(k, 1) for k in order]
    out = judged(files, -11)
    assert (out.status, out.first_failed_rank) == ("crash", str(victim)), out.reason


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 4), st.data(), st.sampled_from(("all_to_all_single", "all_reduce")))
def test_a_communication_hang_names_the_silent_rank_and_the_collective(n, data, op):
    """Every rank that reported timed out in a collective, one never reported (stopped; the
    launcher killed it after): infra, that rank first, the collective named. Controls: the
    silent rank's own death recorded first is not a hang; its log cut mid-line (it was
    saying something) is not a hang either."""
    silent = data.draw(st.integers(0, n - 1))
    talk = [k for k in range(n) if k != silent]
    files = {f"rank{k}.log": [ROWS.format(i=0, k=k)] + (
        [FRAME.format(k=k, op=op), WAITED.format(k=k, way=data.draw(st.sampled_from(
            ("send", "recv"))))] if k != silent else []) for k in range(n)}
    order = data.draw(st.permutations(talk))
    files["launcher.log"] = [exit_line(k, 1) for k in order] + [exit_line(silent, -9)]
    out = judged(files)
    assert (out.status, out.first_failed_rank) == ("infra", str(silent)), out.reason
    assert f"timed out in {op}" in out.reason and f"{silent} never reported" in out.reason
    files["launcher.log"] = [exit_line(silent, -11)] + [exit_line(k, 1) for k in order]
    assert judged(files, -11).status == "crash"
    files["launcher.log"] = [exit_line(k, 1) for k in order] + [exit_line(silent, -9)]
    files[f"rank{silent}.log"] = [ROWS.format(i=0, k=silent), "../aten/src/ATen/native/"
                                  "cuda/IndexKernel.cu:92: operator(): bl"]
    with tempfile.TemporaryDirectory() as tmp:      # the cut: no newline at the end
        paths = []
        for name, body in files.items():
            text = "\n".join(body) + ("" if name == f"rank{silent}.log" else "\n")
            (Path(tmp) / name).write_text(text, encoding="utf-8")
            paths.append(Path(tmp) / name)
        out = classify_logs(1, "failed", paths, DEFAULT_FAILURE_PATTERNS, 4)
    assert out.status != "infra", out.reason


@pytest.mark.slow
def test_live_recording_classifies_as_its_truth(tmp_path):
    """Regenerate a few cheap dev cases with real processes (scripts/record_faults.py) and
    check each classifies as its truth says (class and first failed rank)."""
    spec = importlib.util.spec_from_file_location("record_faults",
                                                  ROOT / "scripts" / "record_faults.py")
    rec = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = rec            # its dataclasses look their module up
    spec.loader.exec_module(rec)
    names = ["sigterm_local_n2_r0", "prlimit_as_local_n2_r1"]
    if os.geteuid() == 0:
        names.append("enospc_tmpfs_local_n2")
    for name in names:
        assert SPLIT[name] == "dev", name
        want = rec.record(rec.CASES[name], tmp_path)
        got = classify_cell(tmp_path / name)
        assert (got["status"], got["first_failed_rank"]) == (
            want["class"], want["first_failed_rank"]), (name, got["reason"])


def test_heldout_score_is_pinned():
    """The held-out half, scored once at b1ef047 (class 18/19, class and rank 17/19): every
    verdict stays as scored, except those a later fix moved, each argued in
    after_scoring.json (scored verdict, new verdict, mechanism)."""
    check_heldout_pinned(REC, HELD, (18, 17), scored_at=None)


HOST_OOM = ("[rank{k}]: RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. "
            "DefaultCPUAllocator: can't allocate memory: you tried to allocate 65536 bytes. "
            "Error code 12 (Cannot allocate memory)")


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 4), st.data())
def test_a_peer_gone_line_is_fallout_of_a_rank_with_a_cause_of_its_own(n, data):
    """One rank fails of its own (a host allocation failure) and ends LAST; its peers print
    `Connection reset by peer` and are recorded first: the allocating rank is first and the
    run does_not_fit (the peers' lines say their peer went away). Control: without the
    allocation failure nothing makes the resets fallout (never does_not_fit)."""
    cause = data.draw(st.integers(0, n - 1))
    peers = data.draw(st.permutations([k for k in range(n) if k != cause]))
    files = {f"rank{k}.log": [ROWS.format(i=0, k=k), (HOST_OOM if k == cause else RESET)
                              .format(k=k)] for k in range(n)}
    files["launcher.log"] = [exit_line(k, 1) for k in peers] + [exit_line(cause, 1)]
    out = judged(files)
    assert (out.status, out.first_failed_rank) == ("does_not_fit", str(cause)), out.reason
    files[f"rank{cause}.log"] = [ROWS.format(i=0, k=cause)]
    assert judged(files).status != "does_not_fit"

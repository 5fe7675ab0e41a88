"""The recorded corpus of issue 41: real processes, real faults (scripts/record_faults.py).

Each case is a cell directory the local launcher, torchrun or the Slurm launcher wrote while a
fault was injected from outside (a signal by pid, prlimit, a taken port, a full tmpfs, a bad
flag, a broken module, Slurm's limits, scancel), with the injected truth in `truth.json`. The
split into dev and held-out halves is the parity of sha256(name), committed with the corpus
before any classifier change (tests/fixtures/classify/recorded/README.md).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from harness.taxonomy.cli import classify_cell
from harness.vocab import FAILURE_CLASSES

ROOT = Path(__file__).resolve().parents[2]
REC = ROOT / "tests" / "fixtures" / "classify" / "recorded"
SPLIT = json.loads((REC / "split.json").read_text(encoding="utf-8"))
DEV = sorted(n for n, h in SPLIT.items() if h == "dev")
HELD = sorted(n for n, h in SPLIT.items() if h == "heldout")
FAULTS = ("SIGKILL", "SIGSEGV", "SIGABRT", "SIGBUS", "SIGTERM", "SIGSTOP", "prlimit", "port",
          "enospc", "badflag", "broken", "time-limit", "mem-limit", "scancel", "scancel-TERM")


def truth(name: str) -> dict:
    """A case's truth.json."""
    return json.loads((REC / name / "truth.json").read_text(encoding="utf-8"))


def half(name: str) -> str:
    """The stated split: dev when sha256(name)'s first byte is even."""
    return "dev" if hashlib.sha256(name.encode()).digest()[0] % 2 == 0 else "heldout"


def right(name: str, got: dict) -> tuple[bool, bool]:
    """(class right, class and first failed rank right) of one verdict against its truth;
    a truth rank of "any" (the fault hit every rank alike) scores the class only."""
    want = truth(name)
    cls = got["status"] == want["class"]
    rank = want["first_failed_rank"] == "any" or got["first_failed_rank"] == \
        want["first_failed_rank"]
    return cls, cls and rank


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

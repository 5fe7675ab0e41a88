"""What the recorded fault corpora's tests share (tests/fixtures/classify/recorded*): the
stated split, scoring one verdict against its truth, and the pinned held-out score."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from harness.taxonomy.cli import classify_cell


def half(name: str) -> str:
    """The stated split: dev when sha256(name)'s first byte is even."""
    return "dev" if hashlib.sha256(name.encode()).digest()[0] % 2 == 0 else "heldout"


def truth(folder: Path, name: str) -> dict:
    return json.loads((folder / name / "truth.json").read_text(encoding="utf-8"))


def right(folder: Path, name: str, got: dict) -> tuple[bool, bool]:
    """(class right, class and first failed rank right) of one verdict against its truth;
    a truth rank of "any" (the fault hit every rank alike) scores the class only."""
    want = truth(folder, name)
    cls = got["status"] == want["class"]
    rank = want["first_failed_rank"] == "any" or got["first_failed_rank"] == \
        want["first_failed_rank"]
    return cls, cls and rank


def check_heldout_pinned(folder: Path, held: list[str], scored: tuple[int, int],
                         scored_at: str | None = None) -> None:
    """Every held-out verdict stays as scored once (heldout_score.json), except those a later
    fix moved, each argued in after_scoring.json (scored verdict, new verdict, mechanism)."""
    score = json.loads((folder / "heldout_score.json").read_text(encoding="utf-8"))
    after_path = folder / "after_scoring.json"
    after = json.loads(after_path.read_text(encoding="utf-8"))["cases"] \
        if after_path.is_file() else {}
    assert sorted(score["cases"]) == held and set(after) <= set(held)
    assert (score["heldout"]["class"], score["heldout"]["class_and_rank"]) == scored
    if scored_at is not None:
        assert score["scored_at"] == scored_at
    for name in held:
        got = classify_cell(folder / name)
        verdict = [None if got["status"] is None else str(got["status"]),
                   got["first_failed_rank"]]
        if name in after:
            assert after[name]["scored"] == score["cases"][name]["got"], name
            assert verdict == after[name]["got"] and after[name]["mechanism"], name
        else:
            case = score["cases"][name]
            assert verdict == case["got"], name
            if "class_and_rank_right" in case:      # the score's own per-case judgement
                assert case["class_and_rank_right"] == all(right(folder, name, got)), name

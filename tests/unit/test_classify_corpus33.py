"""corpus33: the multi-rank corpus of issue 33, built from upstream sources the table did
not cite, split into dev and held-out halves before the classifier changed
(tests/fixtures/classify/corpus33/README.md).

The dev half is what the timeline was developed on: every dev case's class and first failed
rank must hold. The held-out half was scored once, at the end (`heldout_score.json`): this
test pins that score, case by case, so a later change that moves a held-out verdict (either
way) is seen and must be argued, not absorbed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from harness.taxonomy.cli import classify_cell

ROOT = Path(__file__).resolve().parents[2]
C33 = ROOT / "tests" / "fixtures" / "classify" / "corpus33"
SPLIT = json.loads((C33 / "split.json").read_text(encoding="utf-8"))
SOURCES = json.loads((C33 / "sources.json").read_text(encoding="utf-8"))
DEV = sorted(n for n, h in SPLIT.items() if h == "dev")
HELD = sorted(n for n, h in SPLIT.items() if h == "heldout")


def expected(name: str) -> dict:
    """A case's expected.yaml (JSON, a YAML subset)."""
    return json.loads((C33 / name / "expected.yaml").read_text(encoding="utf-8"))


def test_corpus_size_shapes_and_citations():
    """At least 40 multi-rank cases, every source cited with repository, file and commit."""
    assert len(SPLIT) >= 40
    for name in SPLIT:
        exp = expected(name)
        assert exp["class"] and exp["harm"] and exp["sources"], name
        for src in exp["sources"]:
            assert src["id"] in SOURCES and src["repo"] and src["file"] and src["commit"], src
    shapes = " ".join(expected(n)["shape"] for n in SPLIT)
    for shape in ("srun --label", "torchrun", "node file", "ANSI", "CRLF", "truncated"):
        assert shape in shapes, shape


def test_split_is_the_hash_parity_of_the_name():
    """The split is a function of the name alone (fixed before any classifier change)."""
    for name, half in SPLIT.items():
        even = hashlib.sha256(name.encode()).digest()[0] % 2 == 0
        assert half == ("dev" if even else "heldout"), name


@pytest.mark.parametrize("name", DEV)
def test_dev_case(name):
    """Class and first failed rank of every dev case."""
    got, exp = classify_cell(C33 / name), expected(name)
    assert (got["status"], got["first_failed_rank"]) == (exp["class"],
                                                          exp["first_failed_rank"]), got["reason"]


def test_heldout_score_is_pinned():
    """The held-out half classifies as it did when it was scored once (misses included)."""
    score = json.loads((C33 / "heldout_score.json").read_text(encoding="utf-8"))
    assert sorted(score["cases"]) == HELD
    for name in HELD:
        got = classify_cell(C33 / name)
        pinned = score["cases"][name]
        assert [got["status"], got["first_failed_rank"]] == pinned["got"], name

"""README writes no test count (it went stale: 1,818 / 167 against 2,172 collected); the
counts are pytest's own, printed by `make count` with the marker expression test-fast skips."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAKEFILE = ROOT / "Makefile"
# "1818 tests", "2,172 tests", "the 167 tests marked", "(1808 pass, 10 skip"
COUNT = re.compile(r"\b\d[\d,]*\s+(?:tests?\b|pass\b|skip\b|passed\b|skipped\b)")


def stated_counts(text: str) -> list[str]:
    """The test counts a text states in words (a number before tests/pass/skip)."""
    return COUNT.findall(text)


@given(n=st.integers(0, 10**6), comma=st.booleans(),
       word=st.sampled_from(["tests", "test", "pass", "skip", "passed", "skipped"]),
       before=st.text(st.characters(blacklist_categories=("Cc", "Cs", "Nd")), max_size=12))
def test_any_written_count_is_found(n, comma, word, before):
    number = f"{n:,}" if comma else str(n)
    assert stated_counts(f"{before} {number} {word} ") == [f"{number} {word}"]


def test_readme_states_no_count_and_names_make_count():
    text = README.read_text(encoding="utf-8")
    assert stated_counts(text) == []
    assert "`make count`" in text


def test_make_count_collects_the_suite_and_what_test_fast_skips():
    mk = MAKEFILE.read_text(encoding="utf-8")
    fast = re.search(r'^test-fast:.*\n\t\$\(PYTEST\) -q (?:\$\(XDIST\) )?-m "not \((.*)\)"|'
                     r'^test-fast:.*\n\t\$\(PYTEST\) -q (?:\$\(XDIST\) )?-m "not (\w+) and '
                     r'not (\w+)"', mk, re.M)
    assert fast is not None
    skipped = " or ".join(g for g in fast.groups() if g)
    count = re.search(r"^count:.*\n((?:\t.*\n)+)", mk, re.M)
    assert count is not None
    lines = count.group(1).splitlines()
    assert lines[0].strip() == "@$(PYTEST) --collect-only -q | tail -n 1"
    assert lines[1].strip() == f'@$(PYTEST) --collect-only -q -m "{skipped}" | tail -n 1'

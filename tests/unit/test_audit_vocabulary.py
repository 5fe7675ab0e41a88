"""A status no epcap writes is unreadable evidence (rules.apply.VOCABULARY): the rules
reading the attempts table say UNKNOWN naming file, line and field, never VALID as if the row
were one they know. Found by the hostile-input round: a measure row's `ok` wrapped in
terminal escapes audited VALID (the rules skipped the row as a status they did not know)."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.audit import audit_target
from harness.results.layout import ATTEMPTS_TSV
from harness.vocab import Status

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "fixtures" / "uploads"))
import corpus  # noqa: E402

KNOWN = {s.value for s in Status}
# words next to the vocabulary: escapes around it, a look-alike letter, a later class
NEAR = st.one_of(
    st.sampled_from(sorted(KNOWN)).flatmap(lambda w: st.sampled_from([
        f"\x1b[31m{w}\x1b[0m", f"{w}\u200b", w.replace("o", "\u03bf"), f"{w}_x", f"not_{w}"])),
    st.sampled_from(["oom", "preempted", "pending", "OKAY", "valid"]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\t\n\r\\\x00"),
            min_size=1, max_size=8))


@pytest.fixture(scope="module")
def valid(tmp_path_factory) -> Path:
    return corpus.write_valid(tmp_path_factory.mktemp("vocab") / "campaign")


def with_cell(root: Path, column: str, value: str) -> int:
    """The first measure row's `column` set to `value`; its line."""
    lines = (root / ATTEMPTS_TSV).read_text().split("\n")
    head = lines[0].split("\t")
    for n, line in enumerate(lines[1:], 2):
        cells = line.split("\t")
        if len(cells) == len(head) and cells[head.index("purpose")] == "measure":
            cells[head.index(column)] = value
            lines[n - 1] = "\t".join(cells)
            (root / ATTEMPTS_TSV).write_text("\n".join(lines))
            return n
    raise AssertionError("no measure row")


def test_the_honest_upload_is_valid(valid):
    (u,) = audit_target(valid).uploads
    assert (u.verdict, u.why) == ("VALID", [])


def test_the_earlier_campaigns_natural_rows_stay_readable(valid, tmp_path):
    """`purpose` has no vocabulary: a `natural` row (the earlier campaign's highest capacity
    that fit, taken as the requirement) is what natural-selection reads and fails on, not
    unreadable evidence. Seen failing: a purpose vocabulary made five such uploads UNKNOWN."""
    root = tmp_path / "u"
    shutil.copytree(valid, root)
    with_cell(root, "purpose", "natural")
    (u,) = audit_target(root).uploads
    assert u.verdict == "INVALID" and "natural-selection" in u.reasons, u.why


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(column=st.just("status"), word=NEAR)
@example(column="status", word="\x1b[31mok\x1b[0m")
def test_a_word_no_epcap_writes_is_never_valid(valid, tmp_path, column, word):
    """Catches: the rules skipping a row whose status they do not know (the VALID found);
    mutant tried by hand: VOCABULARY = {} -> the example is VALID."""
    from harness.audit.model import norm
    if norm(word) in KNOWN or not word.strip():
        return                                   # a known word (case-folded), or not stated
    root = Path(tempfile.mkdtemp(dir=tmp_path)) / "u"
    shutil.copytree(valid, root)
    line = with_cell(root, column, word)
    (u,) = audit_target(root).uploads
    assert u.verdict != "VALID", (word, u.why)
    if u.verdict == "UNKNOWN":
        assert any(f"{ATTEMPTS_TSV}:{line}: field {column} " in w for w in u.why), u.why

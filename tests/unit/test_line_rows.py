"""harness.telemetry.lines.line_rows (the taxonomy's view of one physical line) against its
contract: each tag starts a segment that runs to the next tag or the end of the line; a
setup tag's segment is a setup row; a dispatch segment's fields are the six values when
well-formed, else the reason. Lines are generated from known pieces, so each segment's
span and values are known before the call; the counts also match the reference block
parser (`slow_block`). Fast (in the mutation's test selection)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.telemetry.lines import (
    CR_ONLY,
    DISPATCH_TAG,
    FIELDS,
    SETUP_TAG,
    line_rows,
    make_tags,
    slow_block,
    unterminated,
)

FAST = settings(max_examples=80, deadline=None, derandomize=True)
TAG_PAIRS = [(DISPATCH_TAG, SETUP_TAG), ("[R]", "[R]s"), ("[D]", "[S]")]
VALUES = st.tuples(*[st.integers(1, 10**6)] * 6)
NOISE = st.sampled_from(["", "rank0: ", " junk ", "NCCL INFO x=1 ", "é "])


def body(values: tuple[int, ...]) -> str:
    return " " + " ".join(f"{k}={v}" for k, v in zip(FIELDS, values, strict=True))


PIECE = st.one_of(
    st.tuples(st.just("dispatch"), VALUES, NOISE),
    st.tuples(st.just("bad"), st.sampled_from([" iter=x layer=1", " budget=", " iter=1"]),
              NOISE),
    st.tuples(st.just("setup"), st.just(" rank=3 world=8"), NOISE),
)


@FAST
@given(tags=st.sampled_from(TAG_PAIRS), prefix=NOISE,
       pieces=st.lists(PIECE, min_size=0, max_size=5))
def test_line_rows_splits_a_line_at_each_tag(tags, prefix, pieces):
    """Spans, kinds, values and reasons of every segment, in order. Seen red: the segment
    end `hits[i + 1].start()` -> `len(line)` (a row taking the next
    row's fields), `hit.group() == setup` -> `!=`, values and reason swapped, and the
    early return for a line with no tag inverted."""
    dispatch, setup = tags
    line, want = prefix, []
    for kind, what, noise in pieces:
        start = len(line)
        if kind == "setup":
            line += setup + what
        elif kind == "dispatch":
            line += dispatch + body(what)
        else:
            line += dispatch + what
        want.append([start, None, kind, what])
        if kind != "dispatch":                    # noise only after rows judged anyway
            line += noise
    for i, w in enumerate(want):
        w[1] = want[i + 1][0] if i + 1 < len(want) else len(line)
    got = line_rows(line, dispatch, setup)
    assert [(r.start, r.end) for r in got] == [(w[0], w[1]) for w in want]
    for r, (_, _, kind, what) in zip(got, want, strict=True):
        assert r.setup is (kind == "setup")
        if kind == "dispatch":
            assert r.values == what and r.reason is None
        elif kind == "bad":
            assert r.values is None and isinstance(r.reason, str) and r.reason
        else:
            assert (r.values, r.reason) == (None, None)
    block = slow_block((line + "\n").encode(), 1, make_tags({"dispatch": dispatch,
                                                              "setup": setup}))
    assert len(block.rows) == sum(r.values is not None for r in got)
    assert len(block.bad) == sum(r.reason is not None for r in got)
    assert block.setup_rows == sum(r.setup for r in got)


def test_a_line_without_a_tag_has_no_rows_and_a_lone_tag_is_one_segment():
    """No tag: no rows. Seen red: `if dispatch not in line and setup not in line` -> `or`
    (a line holding only a setup tag then gives no rows)."""
    assert line_rows("plain text") == []
    only_setup = "x " + SETUP_TAG + " rank=1"
    assert [(r.start, r.end, r.setup) for r in line_rows(only_setup)] == [
        (2, len(only_setup), True)]
    only_dispatch = DISPATCH_TAG + body((1, 2, 3, 4, 5, 6))
    assert [r.values for r in line_rows(only_dispatch)] == [(1, 2, 3, 4, 5, 6)]


@FAST
@given(n=st.integers(1, 4), inner=st.sampled_from(["\r", "\r ", "\r\r "]),
       tail=st.sampled_from(["", "\r", "\r\r"]))
def test_an_unterminated_line_with_a_carriage_return_inside_says_cr_only(n, inner, tail):
    """A last (or over-long) line: each tag in it is malformed, with the given reason, or
    CR_ONLY when a carriage return stands anywhere but in its trailing run of CRs (a log
    whose lines end in CR alone). Seen red: `b"\r" in text.rstrip(b"\r")` with
    `rstrip(None)` (a CR before a trailing space missed), `rstrip(b"XX\rXX")` (a CR before
    a trailing X missed), `lstrip`, and the reason None."""
    tags = make_tags(None)
    row = DISPATCH_TAG + body((1, 2, 3, 4, 5, 6))
    inside = (inner.join([row] * n) + tail).encode()
    block = unterminated(inside, 7, tags, "truncated")
    want = CR_ONLY if n > 1 else "truncated"
    assert block.bad == [(7, want)] * n and len(block.rows) == 0 and block.line_nos == []
    at_end = (row + tail).encode()
    assert unterminated(at_end, 3, tags, "truncated").bad == [(3, "truncated")]
    spaced = (row + "\r ").encode()
    assert unterminated(spaced, 3, tags, "truncated").bad == [(3, CR_ONLY)]
    assert unterminated(b"no tag\rhere", 3, tags, "truncated").bad == []
    x_after = (row + "\rX").encode()        # a CR, then more text: CR inside
    assert unterminated(x_after, 3, tags, "truncated").bad == [(3, CR_ONLY)]


def test_a_lone_surrogate_in_a_row_is_judged_not_raised():
    """line_rows takes any str, a lone surrogate (a log decoded with surrogateescape)
    included: it is replaced, and the row judged like any other (here malformed: `?` after
    the budget). Seen red: `encode("utf-8", "replace")` -> `encode("utf-8")`
    (UnicodeEncodeError) and -> "REPLACE" (LookupError)."""
    line = DISPATCH_TAG + body((1, 2, 3, 4, 5, 6)) + "\udcff"
    got = line_rows(line)
    assert len(got) == 1 and got[0].values is None and got[0].reason
    ok = DISPATCH_TAG + body((1, 2, 3, 4, 5, 6)) + " " + SETUP_TAG + " \udcff"
    assert [r.values for r in line_rows(ok)] == [(1, 2, 3, 4, 5, 6), None]

"""An epcap routing trace's header passes the ranges of the command line's values (harness/
io/bounds.py RANGES, as `forecast --ep/--seq/--micro-batch/--experts` do) and the shape rules
a run's own values pass (ep divides the experts, top-k at most the experts), at line 1 of the
trace naming the header's field (harness/loadmodel/traces.py `_epcap_header`), exit 2.

Seen failing on 28ad19d: a header saying `"ep": 4096` over 128 experts made `epcap forecast
TRACE` print the header row only, rc 0 (no EP size near 4096 divides 128); `--ep 4096` on the
command line was refused (`128 experts do not divide over EP 4096`). Headers with `seq:
10**9` or `micro_batch: 10**11` were read as given."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.io.bounds import RANGES

from .big_trace import write_trace
from .conftest import assert_bad_input, run_cli

EXPERTS = 16


def trace_with(folder: Path, key: str, value: object) -> Path:
    """A small valid trace (16 experts, top-2, 2 ranks) whose header has `key: value`."""
    path = folder / "trace.jsonl"
    write_trace(path, 32, experts=EXPERTS, topk=2, ranks=2, tokens=8, layers=1)
    lines = path.read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    header[key] = value
    lines[0] = json.dumps(header) + "\n"
    path.write_text("".join(lines))
    return path


def out_of(name: str) -> st.SearchStrategy[int]:
    low, high = RANGES[name]
    return st.one_of(st.integers(int(high) + 1, 10**15), st.integers(-10**15, int(low) - 1))


HOSTILE = st.one_of(
    st.tuples(st.just("ep"), out_of("ep")),
    st.tuples(st.just("ep"), st.integers(1, 4096).filter(lambda e: EXPERTS % e)),
    st.tuples(st.just("seq"), out_of("seq")),
    st.tuples(st.just("micro_batch"), out_of("micro_batch")),
    st.tuples(st.just("experts"), out_of("experts")),
    st.tuples(st.just("topk"), st.one_of(out_of("topk"), st.integers(EXPERTS + 1, 1024))),
    st.tuples(st.sampled_from(("ep", "seq", "micro_batch")),
              st.one_of(st.text(max_size=5), st.booleans(), st.floats(allow_nan=True))),
)


@settings(max_examples=80, deadline=5000,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=HOSTILE)
@example(case=("ep", 4096))
@example(case=("seq", 10**9))
@example(case=("micro_batch", 10**11))
def test_a_hostile_header_value_is_refused_at_line_1(tmp_path_factory, case):
    key, value = case
    path = trace_with(tmp_path_factory.mktemp("t"), key, value)
    res = run_cli("forecast", path, timeout_s=30)
    assert_bad_input(res, f"{path}:1: {key}: ")


def test_a_header_at_the_ranges_ends_is_read(tmp_path):
    for key, value in (("ep", 1), ("ep", EXPERTS), ("seq", RANGES["seq"][1]),
                       ("micro_batch", RANGES["micro_batch"][1]), ("ep", None)):
        res = run_cli("forecast", trace_with(tmp_path, key, value), timeout_s=30)
        assert res.code == 0, (key, value, res.text)
        assert len(res.out.strip().splitlines()) > 1, (key, value, res.out)

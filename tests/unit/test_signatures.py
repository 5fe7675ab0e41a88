"""The signature table and the reading of one log line (harness/taxonomy/signatures.py)."""

from __future__ import annotations

import pytest

from harness.errors import BadInput
from harness.taxonomy.signatures import (
    LINE_ORDER,
    Matcher,
    clean,
    from_patterns,
    iteration_of,
    load_table,
    parse_table,
    rank_of,
    timestamp_of,
)


def test_rank_from_every_prefix_shape():
    assert rank_of("[rank3]: boom", "all.log") == "3"
    assert rank_of("[rank12]:[E1201 07:31:50.1 x.cpp:1] boom", "all.log") == "12"
    assert rank_of("[default5]: boom", "node0.log") == "5"
    assert rank_of("1: [default5]: boom", "job.out") == "1:5"
    assert rank_of("7: boom", "job.out") == "7"
    assert rank_of("[MOE_DROP_DEBUG][dispatch] iter=1 layer=0 rank=4 x=1", "a.log") == "4"
    assert rank_of("boom", "logs/rank9.log") == "9"
    assert rank_of("boom", "node1.log") is None
    # a rank named later in the message text is not the printer's prefix
    assert rank_of("worker says " + "x" * 80 + " [rank3]: y", "all.log") is None


def test_clean_and_timestamps():
    assert clean("\x1b[1;31m[rank1]: boom\x1b[0m\r") == "[rank1]: boom"
    assert timestamp_of("[rank1]:[E1201 07:31:50.500 ProcessGroupNCCL.cpp:1]") == (12, 1, 27110.5)
    assert timestamp_of("[2026-12-01 07:31:50] NET/IB") == (12, 1, 27110.0)
    assert timestamp_of("2026-12-01T07:31:50,25 x") == (12, 1, 27110.25)
    assert timestamp_of("no time here 12:00") is None


def test_progress_kinds_are_separate():
    progress = load_table().progress
    megatron = iteration_of(" [2026-12-01 07:31:50.1] iteration        7/     100 | x", progress)
    row = iteration_of("[MOE_DROP_DEBUG][dispatch] iter=6 layer=0 rank=0", progress)
    assert megatron[1] == 7 and row[1] == 6 and megatron[0] != row[0]
    assert iteration_of("[MOE_DROP_DEBUG][setup_metadata] iter=0 layer=0 rank=0", progress) is None
    assert iteration_of("skipped iterations: 0", progress) is None


def test_table_has_sources_for_every_signature_and_each_class():
    table = load_table()
    assert {s.cls for s in table.signatures} == set(LINE_ORDER)
    ids = {s["id"] for s in table.sources}
    assert all(s.source in ids for s in table.signatures)
    assert table.for_library("moonep") != table.for_library("ultraep")
    assert len(table.for_library(None)) == len(table.signatures)


def test_line_order_allocation_failure_through_an_assert_macro():
    m = Matcher(load_table().signatures)
    sig, _ = m.match('RuntimeError: Assertion exception (/x/csrc/ultra_ep.cpp:312): p != nullptr'
                     ' && "Failed to allocate NVSHMEM weight buffer"')
    assert sig.cls == "does_not_fit"
    sig, _ = m.match("RuntimeError: Assertion exception (/x/csrc/runtime.cpp:214): n % 16 == 0")
    assert sig.cls == "assert"
    sig, found = m.match("HT FLAT actual recv tokens 70211 > max_recv_tokens_per_rank 65536")
    assert sig.cls == "overflow" and found.group(sig.demand) == "70211"
    sig, _ = m.match("torch.distributed.DistBackendError: NCCL error in: a.cpp:1, unhandled "
                     "system error (run with NCCL_DEBUG=INFO for details)")
    assert (sig.cls, sig.fallout) == ("infra", False)      # the NCCL statement, not the wrapper
    assert m.match("[rank0]: iteration 3/ 9 | lm loss 1.0") is None


def test_bad_tables_and_patterns_are_bad_input():
    with pytest.raises(BadInput, match="unknown signature class"):
        parse_table({"sources": [{"id": "x", "signatures": [{"class": "nope", "regex": "a"}]}]})
    with pytest.raises(BadInput, match=r"sources\.x\.signatures\[0\]"):
        parse_table({"sources": [{"id": "x", "signatures": [{"class": "assert", "regex": "("}]}]})
    with pytest.raises(BadInput, match="unknown failure class"):
        from_patterns({"oops": ["a"]})
    (sig,) = from_patterns({"overflow": [r"need (?P<demand>\d+) slots"]}, source="runbook")
    assert sig.demand == "demand" and sig.source == "runbook"
    (sig,) = from_patterns({"infra": ["(?i)fell off the bus"]})
    assert Matcher([sig]).match("GPU 3 FELL OFF THE BUS")

"""Two timeline mechanisms, on generated multi-rank cells (docs/taxonomy.md#the-timeline-decides):

- after the launcher's time-limit record, the ranks' communication and teardown lines are
  fallout by place, whoever's pattern matched them (the job is `timeout`, no rank failed);
- a rank whose log ends in a line cut before any signature's stable prefix, while every
  other rank shows only fallout, failed first and nothing says why (`unclassified`, that
  rank first), not the peers' fallout (`infra`).

Each has a control that moves the line across the place that matters and sees the verdict
move, so the property can fail."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.taxonomy.cli import classify_cell

ROW = ("[MOE_DROP_DEBUG][dispatch] iter={i} layer=0 rank={r} expected_recv=65536 "
       "actual_valid_recv={v} budget=131072")
LIMIT = "slurmstepd: error: *** STEP 9800.0 ON nid001 CANCELLED AT 2026-12-01T09:31:44 DUE TO TIME LIMIT ***"
# teardown lines that match an infra signature of the table or of the echo backend
TEARDOWN = [
    "nid001:31201:31301 [{r}] NCCL WARN NET/IB : mlx5_1:1 Got non-fatal async event: port error(10)",
    "nid001:31201:31301 [{r}] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<4311> with "
    "status=5 opcode=0 len=0 vendor err 249 (Recv) localGid ::ffff:10.0.0.1 remoteGid "
    "::ffff:10.0.0.2 hca mlx5_0",
    "[E1201 09:31:45.100000 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=412, OpType=ALLTOALL_BASE, NumelIn=8, NumelOut=8, "
    "Timeout(ms)=600000) ran for 600043 milliseconds before timing out.",
]
WATCHDOG = ("[rank{r}]:[E1201 07:31:52.1{r}0000 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog "
            "caught collective operation timeout: WorkNCCL(SeqNum=412, OpType=ALLTOALL_BASE, "
            "NumelIn=8388608, NumelOut=8388608, Timeout(ms)=600000) ran for 600043 "
            "milliseconds before timing out.")
ASSERT = ("[rank{r}]: /opt/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): "
          "block: [17,0,0], thread: [64,0,0] Assertion `-sizes[i] <= index && index < "
          "sizes[i] && \"index out of bounds\"` failed.")
OPENING = len("[rank0]: ")
# where the stable prefix starts, and a cut after it, counted after the rank prefix
CUT_BEFORE = ASSERT.format(r=0).index(": block: [") - OPENING
CUT_AFTER = ASSERT.format(r=0).index(" Assertion") - OPENING + 4


def cell(root: Path, name: str, state: str, exit_code: int | None, files: dict[str, str],
         ranks: int) -> Path:
    """A cell directory like the corpus's: cell.json (one task per rank) and the logs."""
    where = root / name
    where.mkdir()
    (where / "cell.json").write_text(json.dumps({
        "cell": {"backend": "echo", "purpose": "validate", "model": "QWEN3_30B",
                 "capacity": "2.00"}, "name": name,
        "launcher": {"state": state, "exit_code": exit_code},
        "ntasks": ranks, "nodes": 1, "gpus_per_node": ranks}))
    for fname, text in files.items():
        (where / fname).write_text(text)
    return where


def merged_rows(ranks: int, iters: int) -> list[str]:
    return [f"{r}: " + ROW.format(i=i, r=r, v=66000 + 13 * i + r)
            for i in range(iters) for r in range(ranks)]


N = [0]


def fresh(tmp_path_factory) -> Path:
    N[0] += 1
    return tmp_path_factory.mktemp(f"c{N[0]}")


@settings(max_examples=12, deadline=None, derandomize=True)
@given(ranks=st.integers(2, 8), iters=st.integers(1, 4),
       teardown=st.lists(st.tuples(st.integers(0, 7), st.integers(0, len(TEARDOWN) - 1)),
                         min_size=1, max_size=4))
def test_teardown_after_the_time_limit_is_fallout(tmp_path_factory, ranks, iters, teardown):
    after = [f"{r % ranks}: " + TEARDOWN[k].format(r=r % ranks) for r, k in teardown]
    text = "\n".join(merged_rows(ranks, iters) + [LIMIT] + after) + "\n"
    got = classify_cell(cell(fresh(tmp_path_factory), "limit", "timeout", None,
                             {"slurm-9800.out": text}, ranks))
    assert (got["status"], got["first_failed_rank"]) == ("timeout", None), got["reason"]


def test_control_teardown_before_the_time_limit_still_decides(tmp_path):
    """The place matters: the same IB line printed before the time limit is rank 1's own
    failure (infra), as before."""
    text = "\n".join(merged_rows(4, 3) + ["1: " + TEARDOWN[0].format(r=1), LIMIT]) + "\n"
    got = classify_cell(cell(tmp_path, "before", "timeout", None, {"slurm-9800.out": text}, 4))
    assert (got["status"], got["first_failed_rank"]) == ("infra", "1"), got["reason"]


def rank_files(ranks: int, iters: int, cut_rank: int, cut_at: int, newline: bool
               ) -> dict[str, str]:
    """rank<R>.log: rows, then the watchdog (fallout) on every rank but `cut_rank`, whose
    log ends in the assert line cut at `cut_at` (with or without a newline after it)."""
    files = {}
    for r in range(ranks):
        rows = [f"[rank{r}]: " + ROW.format(i=i, r=r, v=66000 + 13 * i + r)
                for i in range(iters)]
        if r == cut_rank:
            last = ASSERT.format(r=r)[:len(f"[rank{r}]: ") + cut_at]
            files[f"rank{r}.log"] = "\n".join(rows + [last]) + ("\n" if newline else "")
        else:
            files[f"rank{r}.log"] = "\n".join(rows + [WATCHDOG.format(r=r)]) + "\n"
    return files


@settings(max_examples=12, deadline=None, derandomize=True)
@given(ranks=st.integers(2, 8), iters=st.integers(1, 4), data=st.data(),
       cut=st.integers(1, CUT_BEFORE))
def test_a_rank_cut_before_the_prefix_with_only_fallout_elsewhere_is_unclassified(
        tmp_path_factory, ranks, iters, data, cut):
    cut_rank = data.draw(st.integers(0, ranks - 1))
    got = classify_cell(cell(fresh(tmp_path_factory), "cut", "failed", 1,
                             rank_files(ranks, iters, cut_rank, cut, newline=False), ranks))
    assert (got["status"], got["first_failed_rank"]) == ("unclassified", str(cut_rank)), \
        got["reason"]
    assert got["line"]["path"].endswith(f"rank{cut_rank}.log")


def test_control_cut_after_the_prefix_is_the_assert_and_a_whole_line_is_no_cut(tmp_path):
    """Cut after the stable prefix the signature matches (assert, marked truncated); a line
    that ends with its newline was not cut, so the peers' fallout still decides (infra)."""
    files = rank_files(4, 3, 2, CUT_AFTER, newline=False)
    got = classify_cell(cell(tmp_path, "after", "failed", 1, files, 4))
    assert (got["status"], got["first_failed_rank"]) == ("assert", "2"), got["reason"]
    whole = rank_files(4, 3, 2, 20, newline=True)
    got = classify_cell(cell(tmp_path, "whole", "failed", 1, whole, 4))
    assert got["status"] == "infra", got["reason"]

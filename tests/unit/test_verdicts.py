"""harness.timing.verdicts: arms, rotated launch order, comparison rows, the A/A control check."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.timing import stats, verdicts
from harness.vocab import Status, Verdict


def timing(d: list[float], c: list[float]) -> dict:
    return {"per_trial": [{"dispatch_ms_median": x, "combine_ms_median": y}
                          for x, y in zip(d, c, strict=True)],
            "dispatch_ms_median": sorted(d)[len(d) // 2], "combine_ms_median": sorted(c)[len(c) // 2],
            "step_cv": 0.1, "peak_mem_bytes": 10, "trials": len(d), "iters": 3,
            "timer": "perf_counter", "backend_impl": "reference"}


def test_arms_default_baseline_and_control():
    assert verdicts.arms(["echo", "ultraep", "moonep"], None, True) == \
        ("echo", ["echo", "ultraep", "moonep", "echo~control"])
    assert verdicts.arms(["echo", "ultraep"], "ultraep", False) == ("ultraep", ["echo", "ultraep"])
    with pytest.raises(ValueError, match="not a timed backend"):
        verdicts.arms(["echo"], "moonep", True)
    assert verdicts.backend_of("echo~control") == "echo" and verdicts.backend_of("echo") == "echo"


def test_rotated_order_puts_every_arm_first_once():
    assert verdicts.rotation(["A", "B", "C"], 0) == ["A", "B", "C"]
    assert verdicts.rotation(["A", "B", "C"], 1) == ["B", "C", "A"]
    assert verdicts.rotation(["A", "B", "C"], 2) == ["C", "A", "B"]
    sched = verdicts.schedule(["A", "B", "C"], 3)
    assert [n for _, n in sched] == list("ABCBCACAB")
    assert [i for i, _ in sched] == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_comparison_rows_per_arm_and_phase():
    base = [timing([1.0, 1.01], [2.0, 2.02]), timing([1.0, 0.99], [2.0, 1.98]),
            timing([1.01, 1.0], [2.01, 2.0])]
    slow = [timing([2.0, 2.02], [2.0, 2.01]), timing([2.01, 1.99], [2.0, 1.99]),
            timing([2.0, 2.01], [2.01, 2.0])]
    rows = verdicts.comparison_rows("c", "M", {"echo": base, "moonep": slow,
                                               "echo~control": base}, "echo", max_cv=0.05)
    got = {(r["backend"], r["phase"]): r for r in rows}
    assert set(got) == {("moonep", "dispatch"), ("moonep", "combine"),
                        ("echo~control", "dispatch"), ("echo~control", "combine")}
    assert got[("moonep", "dispatch")]["verdict"] == stats.SLOWER
    assert got[("moonep", "dispatch")]["ratio_median"] == pytest.approx(2.0, rel=0.02)
    assert got[("moonep", "combine")]["verdict"] == stats.INDISTINGUISHABLE
    assert got[("echo~control", "dispatch")]["verdict"] == stats.INDISTINGUISHABLE
    assert all(r["launches"] == 3 and r["baseline"] == "echo" for r in rows)
    assert verdicts.control_check(rows) == (True, [])


def test_unusable_launches_are_left_out_of_the_pairs():
    base = [timing([1.0], [1.0]), timing([1.1], [1.1]), timing([0.9], [0.9])]
    other = [timing([1.0], [1.0]), None, timing([0.9], [0.9])]
    b, a = verdicts.paired(other, base, "dispatch")
    assert b == [[1.0], [0.9]] and a == [[1.0], [0.9]]


def test_arm_without_launches_gets_an_empty_row_with_the_reason():
    base = [timing([1.0, 1.0], [1.0, 1.0])] * 2
    rows = verdicts.comparison_rows("c", "M", {"echo": base, "moonep": [None, None]}, "echo",
                                    why_missing={"moonep": "does_not_fit"})
    assert [(r["verdict"], r["ratio_median"], r["launches"], r["reason"]) for r in rows] == \
        [(None, None, 0, "does_not_fit")] * 2


def test_control_not_indistinguishable_marks_the_table_unreliable():
    rows = [{"model": "M", "backend": "echo~control", "phase": "dispatch",
             "verdict": stats.TOO_NOISY, "reason": "cv"},
            {"model": "M", "backend": "echo~control", "phase": "combine",
             "verdict": stats.INDISTINGUISHABLE, "reason": ""},
            {"model": "M", "backend": "moonep", "phase": "dispatch", "verdict": stats.SLOWER,
             "reason": ""}]
    ok, problems = verdicts.control_check(rows)
    assert not ok and len(problems) == 1 and "echo~control dispatch: too_noisy" in problems[0]


def test_aggregate_over_launches():
    ts = [timing([1.0, 1.2], [2.0, 2.0]), timing([3.0, 3.0], [2.0, 2.0]),
          timing([2.0, 2.0], [2.0, 2.0])]
    ts[1]["peak_mem_bytes"] = 99
    agg = verdicts.aggregate(ts)
    assert agg["launches"] == 3 and agg["dispatch_ms_median"] == 2.0    # pooled trial medians
    assert agg["dispatch_ms_p90"] == pytest.approx(3.0)                  # of 1 1.2 2 2 3 3
    assert agg["dispatch_ms_p10"] == pytest.approx(1.1)
    assert agg["peak_mem_bytes"] == 99
    # launch medians (median of each launch's trial medians): 1.1+2, 3+2, 2+2
    assert agg["noise_floor_pct"] == pytest.approx(100 * (5.0 - 3.1) / 4.0)
    one = verdicts.aggregate([{**ts[0], "noise_floor_pct": 7.5}])
    assert one["launches"] == 1 and one["noise_floor_pct"] == 7.5
    assert verdicts.aggregate([]) == {"launches": 0}
    assert verdicts.launch_medians([ts[0], None], "combine") == [2.0, None]
    assert verdicts.launch_medians([ts[0]], "dispatch") == [pytest.approx(1.1)]


def test_report_lines_banner_table_and_cells():
    rows = [{"model": "M", "backend": "moonep", "baseline": "echo", "phase": "dispatch",
             "launches": "3", "ratio_median": "1.5", "ci_low": "1.2", "ci_high": "1.9",
             "verdict": "slower", "reason": ""},
            {"model": "M", "backend": "moonep", "baseline": "echo", "phase": "combine",
             "launches": "3", "ratio_median": "1.0", "ci_low": "0.8", "ci_high": "1.3",
             "verdict": "too_noisy", "reason": "cv_backend 0.3 > max_cv 0.05"},
            {"model": "M", "backend": "echo~control", "baseline": "echo", "phase": "dispatch",
             "launches": "3", "ratio_median": "1.2", "ci_low": "1.1", "ci_high": "1.3",
             "verdict": "slower", "reason": ""},
            {"model": "M", "backend": "x", "baseline": "echo", "phase": "dispatch",
             "launches": "0", "verdict": "", "reason": "does_not_fit"}]
    text = "\n".join(verdicts.report_lines(rows, 0.05))
    assert "whole timing table is unreliable" in text and "echo~control dispatch: slower" in text
    assert "slower ×1.500 (95% CI 1.200–1.900)" in text
    assert "too_noisy ×1.000 (95% CI 0.800–1.300); cv_backend 0.3 > max_cv 0.05" in text
    assert "n/a: does_not_fit" in text
    ok_rows = [dict(rows[2], verdict="indistinguishable")]
    assert "unreliable" not in "\n".join(verdicts.report_lines(ok_rows, 0.05))


def test_row_keys_are_the_comparison_columns():
    from harness.results.rows import COMPARISON_COLUMNS
    assert verdicts.ROW_KEYS == COMPARISON_COLUMNS


def test_launches_done_by_launches_resolution_and_cap():
    wide = [{"ratio_median": 1.0, "halfwidth": 0.2}, {"ratio_median": None, "halfwidth": None}]
    narrow = [{"ratio_median": 1.0, "halfwidth": 0.02}, {"ratio_median": None}]
    assert verdicts.launches_done(wide, 2, 3, None, 3) is None          # launches always run
    assert verdicts.launches_done(wide, 3, 3, None, 3) == verdicts.STOP_LAUNCHES
    assert verdicts.launches_done(wide, 3, 3, 0.03, 6) is None          # not narrow: go on
    assert verdicts.launches_done(narrow, 3, 3, 0.03, 6) == verdicts.STOP_RESOLUTION
    assert verdicts.launches_done(wide, 6, 3, 0.03, 6) == verdicts.STOP_MAX
    assert verdicts.resolved(0.03, 0.03) and not verdicts.resolved(None, 0.03)


SPEED = {Verdict.FASTER, Verdict.SLOWER, Verdict.INDISTINGUISHABLE, Verdict.TOO_NOISY}


@settings(max_examples=60, deadline=None, derandomize=True)
@given(scale=st.floats(0.5, 2.0), noise=st.lists(st.floats(0.97, 1.03), min_size=12,
                                                  max_size=12),
       arm_drops=st.sampled_from([(Status.OK, 0), (Status.DROPS, 0), (Status.DROPS, 17),
                                  (Status.OK, 3)]),
       base_drops=st.sampled_from([(Status.OK, 0), (Status.DROPS, 5)]))
def test_a_comparison_with_drops_on_either_side_gets_no_speed_verdict(scale, noise, arm_drops,
                                                                       base_drops):
    """Whatever the timings, an arm or baseline whose launches dropped slots (status drops,
    or dropped_slots > 0) gets `unequal_work`, naming who dropped how many; one that did its
    whole work on both sides gets a speed word. Catches a comparison that gives an arm doing
    less work (the public baselines clipped at the forks' capacity) faster/slower/
    indistinguishable, and one that marks equal work unequal."""
    n = iter(noise)
    base = [timing([1.0 * next(n), 1.0 * next(n)], [1.0, 1.0]) for _ in range(3)]
    arm = [timing([scale * next(n), scale * next(n)], [1.0, 1.0]) for _ in range(3)]
    work = {"echo": {"status": base_drops[0], "dropped_slots": base_drops[1],
                     "backend_impl": "reference"},
            "x": {"status": arm_drops[0], "dropped_slots": arm_drops[1],
                  "backend_impl": "megatron-core"}}
    rows = verdicts.comparison_rows("c", "M", {"echo": base, "x": arm}, "echo", max_cv=0.25,
                                    work=work)
    unequal = arm_drops != (Status.OK, 0) or base_drops != (Status.OK, 0)
    assert len(rows) == 2
    for r in rows:
        assert (r["verdict"] == Verdict.UNEQUAL_WORK) == unequal, r
        assert r["ratio_median"] is not None          # the figure stays, for reading
        assert (r["status"], r["dropped_slots"]) == arm_drops
        assert (r["baseline_status"], r["baseline_dropped_slots"]) == base_drops
        assert r["backend_impl"] == "megatron-core"
        if unequal:
            assert r["verdict"] not in SPEED
            named = [who for who, d in (("x", arm_drops), ("echo", base_drops))
                     if d != (Status.OK, 0)]
            assert all(f"{who} status" in r["reason"] for who in named), r["reason"]
            assert "unequal_work" in verdicts.verdict_text(r)
        else:
            assert r["verdict"] in SPEED


def test_a_ratio_between_arms_moving_different_bytes_says_so():
    """bytes_ratio = the arm's bytes per rank over the baseline's, per phase, and the report
    cell says `moves ×r the baseline's bytes` beside the ratio; equal bytes say nothing.
    Catches a verdict between a per-expert-copy and a per-rank-copy dispatcher read as the
    same work."""
    base = [dict(timing([1.0, 1.0], [1.0, 1.0]), dispatch_bytes_per_rank=1000.0,
                 combine_bytes_per_rank=800.0) for _ in range(3)]
    dedup = [dict(timing([1.0, 1.0], [1.0, 1.0]), dispatch_bytes_per_rank=500.0,
                  combine_bytes_per_rank=800.0) for _ in range(3)]
    rows = verdicts.comparison_rows("c", "M", {"echo": base, "deepep": dedup}, "echo")
    got = {r["phase"]: r for r in rows}
    assert got["dispatch"]["bytes_ratio"] == pytest.approx(0.5)
    assert got["combine"]["bytes_ratio"] == pytest.approx(1.0)
    assert "moves ×0.500 the baseline's bytes" in verdicts.verdict_text(got["dispatch"])
    assert "bytes" not in verdicts.verdict_text(got["combine"])
    assert verdicts.bytes_ratio([None], base, "dispatch") is None

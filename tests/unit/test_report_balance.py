"""Report section: demand before and after rebalancing (harness/report/sections/balance.py)."""

from __future__ import annotations

from harness.report.sections.balance import balance_rows, balance_section


def _cell(root, name, model, backend, purpose, lines):
    d = root / "cells" / name
    d.mkdir(parents=True)
    (d / "rank0.log").write_text("\n".join(lines) + "\n")


def row(it, rank, actual, pre, n=100):
    return (f"[rank{rank}]: [MOE_DROP_DEBUG][dispatch] iter={it} layer=0 rank={rank} "
            f"expected_recv={n} actual_valid_recv={actual} budget=200 pre_balance_recv={pre}")


def test_rows_pair_raw_and_rebalanced_peaks(tmp_path):
    _cell(tmp_path, "M__echo__measure__cap2p00__a1", "M", "echo", "measure",
          [row(0, 0, 104, 130), row(0, 1, 96, 70), row(1, 0, 103, 90), "noise line"])
    _cell(tmp_path, "M__echo__validate__cap1p25__a1", "M", "echo", "validate",
          [row(0, 0, 125, 190)])                                    # not a measure cell
    _cell(tmp_path, "M__old__measure__cap2p00__a1", "M", "old", "measure",
          ["[MOE_DROP_DEBUG][dispatch] iter=0 layer=0 rank=0 expected_recv=100 "
           "actual_valid_recv=120 budget=200"])                      # no pre_balance_recv
    (rows,) = balance_rows(tmp_path)
    assert rows["raw_required"] == "1.300000" and rows["rebalanced_required"] == "1.040000"
    assert rows["rows"] == 3 and rows["reduction"] == f"{130 / 104:.6f}"
    text = balance_section(tmp_path)
    assert "## Load before and after rebalancing" in text and "| M | echo | 3 |" in text


def test_no_section_without_pre_balance_rows(tmp_path):
    assert balance_section(tmp_path) == ""

"""srun --label forwards at most 1024 bytes per message: a longer [EPCAP_TIMING] line reaches
rank<R>.log as several lines. The one timing reader joins them back (harness/api/backend.py);
seen failing before the join: every Slurm time cell of the reduced campaign was a `crash`."""

from __future__ import annotations

import json
import random

from harness.api.backend import TIMING_TAG, first_timing_object


def pieces(line: str, size: int = 1024) -> list[str]:
    """The line as srun's I/O forwarding cuts it."""
    return [line[i:i + size] for i in range(0, len(line), size)]


def test_a_timing_line_cut_into_srun_pieces_is_joined_back():
    rng = random.Random(7)
    for trials in (2, 20, 200):
        obj = {"trials": trials, "dispatch_ms_median": rng.random(),
               "per_trial": [{"dispatch_ms_median": rng.random()} for _ in range(trials)]}
        line = f"{TIMING_TAG} {json.dumps(obj)}"
        logs = ["[MOE_DROP_DEBUG][dispatch] iter=0 layer=0", *pieces(line), "done"]
        assert first_timing_object(logs) == obj


def test_a_line_cut_for_good_is_no_object():
    line = f'{TIMING_TAG} {json.dumps({"per_trial": list(range(600))})}'
    assert first_timing_object(pieces(line)[:1]) is None
    assert first_timing_object([*pieces(line)[:1], "garbage"] + ["x"] * 100) is None

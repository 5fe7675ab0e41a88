"""Bytes moved (docs/timing-verdicts.md#the-physical-limit): the reference worker's figures,
counted from what its exchanges carried, against an independent count from its recorded
routing trace (numpy, one token at a time: a set of destination ranks per token), against
the public figures' convention (DeepEP's tests count every received row, local ones
included: here they are apart), and the declared link table."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.timing.links import LINKS, link_of, physical
from harness.timing.traffic import remote_local, row_bytes

ROOT = Path(__file__).resolve().parents[2]
EP, EXPERTS, TOPK, HIDDEN, SEQ, WARMUP = 4, 16, 4, 64, 128, 1
TAG = "[EPCAP_TIMING] "


def run_worker(tmp: Path, personality: str) -> tuple[dict, Path]:
    """A timed 4-rank run at capacity 2.00 (nothing dropped) with its routing recorded."""
    trace = tmp / f"{personality}.jsonl"
    logs = tmp / personality
    argv = [sys.executable, "-m", "backends.reference", "--ep", str(EP), "--ranks", str(EP),
            "--layers", "2", "--hidden", str(HIDDEN), "--experts", str(EXPERTS), "--topk",
            str(TOPK), "--expert-ffn", "32", "--seq", str(SEQ), "--capacity", "2.00",
            "--personality", personality, "--timed", "--warmup", str(WARMUP), "--iters", "2",
            "--trials", "2", "--seed", "7", "--record-trace", str(trace), "--log-dir",
            str(logs), "--device", "cpu"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(x for x in (logs / "rank0.log").read_text().splitlines() if TAG in x)
    return json.loads(line.split(TAG, 1)[1]), trace


def sent_rows(trace: Path, dedup: bool) -> list[np.ndarray]:
    """Per timed (iteration, layer) in run order: rows[src, dst] counted token by token."""
    lines = trace.read_text().splitlines()
    per_rank = EXPERTS // EP
    steps: dict[tuple[int, int], np.ndarray] = {}
    for line in lines[1:]:
        rec = json.loads(line)
        if rec["iter"] < WARMUP:
            continue
        rows = steps.setdefault((rec["iter"], rec["layer"]), np.zeros((EP, EP), dtype=int))
        for token in rec["topk_ids"]:
            dests = [e // per_rank for e in token]
            for d in (set(dests) if dedup else dests):
                rows[rec["rank"], d] += 1
    return [steps[k] for k in sorted(steps)]


def independent(rows: list[np.ndarray], local_in: bool = False) -> tuple[float, float]:
    """(median busiest remote bytes, median largest local bytes) over the samples; with
    `local_in` the received figure counts local rows too (DeepEP's test convention)."""
    busiest, local = [], []
    for m in rows:
        out = m.sum(1) - np.diag(m)
        into = m.sum(0) - (0 if local_in else np.diag(m))
        busiest.append(int(np.maximum(out, into).max()) * HIDDEN * 2)
        local.append(int(np.diag(m).max()) * HIDDEN * 2)
    return statistics.median(busiest), statistics.median(local)


@pytest.mark.slow
def test_bytes_moved_match_an_independent_count_of_the_routing(tmp_path):
    """alltoall (one row per slot) and deepep (one per (token, rank)): the worker's figures
    are the trace's, counted another way; deduplication moves fewer bytes on the same
    routing; the local rows are apart (counting them, as DeepEP's test does, differs)."""
    got = {}
    for personality, dedup in (("alltoall", False), ("deepep", True)):
        obj, trace = run_worker(tmp_path, personality)
        rows = sent_rows(trace, dedup)
        assert len(rows) == 2 * 2 * 2                          # iters x trials x MoE layers
        remote, local = independent(rows)
        assert (obj["dispatch_bytes_per_rank"], obj["dispatch_local_bytes_per_rank"]) == \
            (remote, local), personality
        assert obj["combine_bytes_per_rank"] == remote
        assert obj["copies"] == ("per-rank" if dedup else "per-expert")
        assert obj["device_name"] == "cpu"
        assert independent(rows, local_in=True)[0] > remote    # DeepEP's count: local in
        got[personality] = remote
    assert got["deepep"] < got["alltoall"]


def test_fp8_rows_follow_deepeps_factor():
    """DeepEP tests/test_intranode.py (031a5c49): fp8 bytes = bf16 bytes x (1 + 4/128) / 2."""
    for hidden in (7168, 4096, 2048, 128):
        assert row_bytes(hidden, "fp8") == row_bytes(hidden, "bf16") * (1 + 4 / 128) / 2
    assert row_bytes(100, "fp8") == 100 + 4                   # a partial block has one scale
    with pytest.raises(ValueError):
        row_bytes(64, "int4")


def test_remote_and_local_rows():
    assert remote_local([5, 1, 2], [3, 3, 3], 0) == (6, 5)    # sent 3 out, got 6 in
    assert remote_local([0, 4, 0], [1, 4, 9], 1) == (10, 4)


def test_the_link_table():
    b200, _ = link_of("NVIDIA B200")
    assert (b200.gbps, b200.nccl_gbps, b200.generation) == (900.0, 18 * 40.1, "NVLink 5")
    for name in ("NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA H200 141GB HBM3e"):
        link, _ = link_of(name)
        assert link.gbps == 450.0 and link.nccl_gbps == pytest.approx(18 * 20.6), name
    assert link_of("NVIDIA H200")[0].kind == "H200"
    for name, why in (("cpu", "no GPU"), ("no-gpu", "no GPU"), (None, "named no device"),
                      ("", "empty"),
                      ("Tesla T4", "not in the declared link table"),
                      ("NVIDIA H100 PCIe", "PCIe/NVL part"), ("NVIDIA H100 NVL", "PCIe/NVL")):
        link, text = link_of(name)
        assert link is None and why in text, name
    assert all(link.source.startswith("https://www.nvidia.com/") for link in LINKS)


def test_physical_columns_never_guess():
    figures = {"dispatch_bytes_per_rank": 9e8, "dispatch_ms_median": 2.0,
               "combine_bytes_per_rank": 9e8, "combine_ms_median": 4.0}
    cpu = physical(figures, "cpu")
    assert cpu["dispatch_gbps"] == pytest.approx(450.0)
    assert cpu["link_gbps"] is None and cpu["dispatch_link_fraction"] is None
    assert "no GPU" in cpu["link_note"]
    b200 = physical(figures, "NVIDIA B200")
    assert b200["dispatch_link_fraction"] == pytest.approx(0.5)
    assert b200["combine_link_fraction"] == pytest.approx(0.25)
    assert "NCCL models 18 x 40.1" in b200["link_note"]
    none = physical({}, "NVIDIA B200")
    assert none["dispatch_gbps"] is None and none["dispatch_link_fraction"] is None
    assert none["link_note"].startswith("no bytes moved stated")

"""Routing traces: epcap and Megatron-LM router-trace JSONL, checks that name file:line: field,
replay at the recorded and at other EP sizes, recording with weights."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.loadmodel.trace_io import Replay, open_replay, write_epcap, write_megatron
from harness.loadmodel.traces import TraceError, read_trace

FIXTURE = Path(__file__).parents[1] / "fixtures" / "traces" / "megatron_ep2"
HEADER = {"format": "epcap-routing-trace", "version": 1, "experts": 4, "topk": 2, "tokens": 2}


def _rec(it=0, layer=0, rank=0, ids=((0, 1), (3, 2)), **extra) -> dict:
    return {"iter": it, "layer": layer, "rank": rank, "topk_ids": [list(r) for r in ids], **extra}


def _epcap(tmp_path: Path, *records, header=HEADER) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in (header, *records)) + "\n")
    return path


def _mega(tmp_path: Path, rank: int, *records) -> Path:
    path = tmp_path / f"router_trace_rank{rank}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _mrec(step=0, layer=1, rank=0, ids=((0, 1), (3, 2)), **extra) -> dict:
    return {"step": step, "stage": "pre_dispatch", "block": "decoder", "layer": layer,
            "rank": rank, "num_tokens": len(ids), "topk": 2,
            "top_indices": [list(r) for r in ids], **extra}


def test_megatron_fixture_reads_as_written():
    t = read_trace([FIXTURE], experts=8)
    assert t.fmt == "megatron" and t.ranks == 2 and t.topk == 2 and t.steps == [1, 2]
    assert t.layers == [1, 2, ("mtp", 0, 0)]
    ids, w = t.global_batch(1, 1)
    assert w is None
    assert ids.tolist() == [[0, 1], [0, 2], [1, 3], [0, 5], [1, 0], [3, 2], [0, 7], [1, 4]]


def test_replay_at_the_recorded_size_and_split_at_another():
    t = read_trace([FIXTURE], experts=8)
    own = Replay(t, ep=2, tokens=4)
    assert own.lookup(0, 2, 1)[0].tolist() == [[5, 4], [6, 5], [4, 7], [2, 6]]  # step 1
    assert own.lookup(3, 1, 0)[0].tolist() == [[2, 3], [2, 0], [3, 1], [2, 6]]  # 3 % 2 -> step 2
    four = Replay(t, ep=4, tokens=2)     # the step's 8 tokens in 4 contiguous shares
    assert four.lookup(0, 1, 1)[0].tolist() == [[1, 3], [0, 5]]
    assert four.lookup(0, 1, 2)[0].tolist() == [[1, 0], [3, 2]]
    one = Replay(t, ep=1, tokens=2)      # 4 dispatches per step
    assert [one.lookup(i, 1, 0)[0][0, 0] for i in range(5)] == [0, 1, 1, 0, 2]
    with pytest.raises(TraceError, match=r"rank0.jsonl:1: num_tokens: step 1 holds 8 tokens"):
        Replay(t, ep=3, tokens=2)


def test_open_replay_needs_the_run_layers_and_topk():
    with pytest.raises(TraceError, match=r"rank0.jsonl:1: layer: .*missing \[3\]"):
        open_replay(str(FIXTURE), 8, 2, 4, 2, [1, 2, 3])
    with pytest.raises(TraceError, match=r"rank0.jsonl:1: topk: trace has 2, this run needs 4"):
        open_replay(str(FIXTURE), 8, 4, 4, 2, [1, 2])
    with pytest.raises(TraceError, match=r"rank0.jsonl:1: top_indices: expert id 5 outside 0..3"):
        open_replay(str(FIXTURE), 4, 2, 4, 2, [1, 2])


def test_epcap_round_trip_keeps_weights(tmp_path):
    rng = np.random.default_rng(0)
    recs = []
    for it in range(2):
        for rank in range(2):
            ids = np.stack([rng.permutation(4)[:2] for _ in range(2)]).tolist()
            w = np.float32(rng.random((2, 2))).tolist()
            recs.append((it, 0, rank, ids, w))
    write_epcap(tmp_path / "t.jsonl", {"experts": 4, "topk": 2, "tokens": 2}, reversed(recs))
    rep = open_replay(str(tmp_path / "t.jsonl"), 4, 2, 2, 2, [0])
    for it, layer, rank, ids, w in recs:
        got_ids, got_w = rep.lookup(it, layer, rank)
        assert got_ids.tolist() == ids and got_w.tolist() == w


def test_megatron_writer_uses_megatron_fields(tmp_path):
    path = write_megatron(tmp_path, 1, [(0, 3, 1, [[0, 1]], [[0.5, 0.5]])])
    rec = json.loads(path.read_text())
    assert path.name == "router_trace_rank1.jsonl"
    assert list(rec) == ["step", "stage", "block", "layer", "rank", "num_tokens", "topk",
                         "top_indices", "topk_weights"]


BAD_EPCAP = [
    ("float id", [_rec(ids=((0, 1.5), (3, 2)))], ":2: topk_ids: row 0 col 1: 1.5 is not an"),
    ("integral float id", [_rec(ids=((0, 1.0), (3, 2)))], ":2: topk_ids: row 0 col 1: 1.0 is not"),
    ("boolean id", [_rec(ids=((0, True), (3, 2)))], ":2: topk_ids: row 0 col 1: true is a boolean"),
    ("string id", [_rec(ids=((0, "1"), (3, 2)))], ":2: topk_ids: row 0 col 1: \"1\" is not"),
    ("ragged ids", [_rec(ids=((0, 1), (3,)))], ":2: topk_ids: ragged"),
    ("repeated expert", [_rec(ids=((1, 1), (3, 2)))], ":2: topk_ids: row 0 repeats an expert"),
    ("id out of range", [_rec(ids=((0, 4), (3, 2)))], ":2: topk_ids: expert id 4 outside 0..3"),
    ("ragged weights", [_rec(topk_weights=[[0.5, 0.5], [1.0]])], ":2: topk_weights: ragged"),
    ("short weights", [_rec(topk_weights=[[0.5, 0.5]])], ":2: topk_weights: shape [1, 2]"),
    ("NaN weight", [_rec(topk_weights=[[0.5, float("nan")], [1, 0]])],
     ":2: topk_weights: row 0 col 1: nan is not finite"),
    ("inf weight", [_rec(topk_weights=[[0.5, 0.5], [float("inf"), 0]])],
     ":2: topk_weights: row 1 col 0: inf is not finite"),
    ("boolean weight", [_rec(topk_weights=[[0.5, 0.5], [True, 0]])],
     ":2: topk_weights: row 1 col 0: true is a boolean"),
    ("weights on some records", [_rec(topk_weights=[[1, 0], [1, 0]]), _rec(rank=1)],
     ":3: topk_weights: present on some records only"),
    ("duplicate", [_rec(), _rec(rank=1), _rec()],
     ":4: records: duplicate record for step=0 layer=0 rank=0 (first at"),
    ("missing rank", [_rec(), _rec(rank=1), _rec(it=1)],
     ":4: records: no record for step=1 layer=0 rank=1"),
    ("missing layer", [_rec(), _rec(layer=1), _rec(it=1, layer=1)],
     ":4: records: no record for step=1 layer=0 rank=0"),
    ("float iter", [_rec(it=1.0)], ":2: iter: expected a non-negative integer, got 1.0"),
    ("no records", [], ":1: records: trace holds no routing records"),
]


@pytest.mark.parametrize("case,records,where", BAD_EPCAP, ids=[c[0] for c in BAD_EPCAP])
def test_bad_epcap_traces_name_file_line_and_field(tmp_path, case, records, where):
    path = _epcap(tmp_path, *records)
    with pytest.raises(TraceError) as err:
        read_trace([path])
    assert str(err.value).startswith(f"{path}{where}"), str(err.value)


def test_bad_epcap_header(tmp_path):
    with pytest.raises(TraceError, match=r"t.jsonl:1: topk: expected a non-negative integer"):
        read_trace([_epcap(tmp_path, _rec(), header={**HEADER, "topk": True})])
    with pytest.raises(TraceError, match=r"t.jsonl:1: experts: trace has 4, this run needs 8"):
        read_trace([_epcap(tmp_path, _rec())], experts=8)


def test_bad_megatron_traces_name_file_line_and_field(tmp_path):
    a = _mega(tmp_path, 0, _mrec(), _mrec(step=1))
    b = _mega(tmp_path, 1, _mrec(rank=1))                       # step 1 missing on rank 1
    with pytest.raises(TraceError, match=f"^{b}:2: records: no record for step=1 layer=1 rank=1"):
        read_trace([tmp_path])
    b.write_text(json.dumps(_mrec(rank=1)) + "\n" + json.dumps(_mrec(step=1, rank=0)) + "\n")
    with pytest.raises(TraceError, match=f"^{b}:2: rank: record of rank 0 in the file of rank 1"):
        read_trace([tmp_path])
    b.write_text(json.dumps(_mrec(rank=1)) + "\n" + json.dumps(_mrec(step=1, rank=1)) + "\n"
                 + json.dumps(_mrec(step=1, rank=1)) + "\n")
    with pytest.raises(TraceError, match=f"^{b}:3: records: duplicate record for step=1"):
        read_trace([tmp_path])
    b.write_text(json.dumps(_mrec(rank=1)) + "\n" + json.dumps({**_mrec(step=1, rank=1),
                                                              "topk": 3}) + "\n")
    with pytest.raises(TraceError, match=f"^{b}:2: topk: 3, earlier records have 2"):
        read_trace([tmp_path])
    b.write_text(json.dumps(_mrec(rank=1)) + "\n" + json.dumps(_mrec(step=1, rank=1)) + "\n")
    a.write_text(json.dumps(_mrec()) + "\n" + json.dumps(_mrec(step=1, layer=2)) + "\n")
    with pytest.raises(TraceError, match=f"^{a}:2: records: no record for step=0 layer=2"):
        read_trace([tmp_path])          # line 2: where it belongs, after the rank's step-0 record
    a.write_text("".join(json.dumps(r) + "\n" for r in (
        _mrec(), _mrec(layer=2, ids=((0, 1), (2, 3), (1, 2))), _mrec(step=1))))
    b.write_text("".join(json.dumps(_mrec(step=s, layer=la, rank=1)) + "\n"
                         for s, la in ((0, 1), (0, 2), (1, 1))))
    with pytest.raises(TraceError, match=f"^{a}:2: num_tokens: 3 tokens at layer 2, 2 at layer"):
        read_trace([tmp_path])
    c = _mega(tmp_path, 3, _mrec(rank=3))
    with pytest.raises(TraceError, match=f"^{c}:1: path: several files must be"):
        read_trace([a, c])

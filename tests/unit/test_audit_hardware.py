"""The hardware a cell ran on (harness/audit/rules/hardware.py, `hardware-mismatch`): the shared
campaign, run for real on CPU, prints one [EPCAP_RANK] line per rank and is VALID; labelled as
run on H100s consistently (ranks, provenance, time objects) it stays VALID; a seeded forger
re-states provenance (GPU kind and count, hosts), cell.json (ntasks, nodes) and the time
objects with every table rebuilt, leaving only the ranks' own lines, and each forgery is
caught by `hardware-mismatch` (VALID with the rule switched off). Uploads without the line
are n/a; a line removed from one cell, or unreadable, is UNKNOWN."""

from __future__ import annotations

import importlib.util
import json
import random
import string
from pathlib import Path

import pytest

from harness.errors import BadInput
from harness.io.boundary.logs import rank_record

CORPUS_PY = Path(__file__).resolve().parents[1] / "fixtures" / "uploads" / "corpus.py"
_spec = importlib.util.spec_from_file_location("upload_corpus_hardware", CORPUS_PY)
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)

CODE = "hardware-mismatch"
H100 = "NVIDIA H100 80GB HBM3"
FASTER = ("NVIDIA B200", "NVIDIA B300", "NVIDIA H200")


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    return corpus.harness_campaign(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="module")
def on_h100(campaign, tmp_path_factory) -> Path:
    """The campaign labelled, consistently, as run on eight H100s (the honest baseline)."""
    copy = corpus.link_copy(campaign, tmp_path_factory.mktemp("h100") / "h100")
    corpus.label_gpu(copy, H100, 8)
    return copy


audit = corpus.audit_upload          # the audit, optionally with named rules disabled


def check(u, code: str = CODE):
    return next(c for c in u.checks if c.code == code)


def cell_jsons(root: Path) -> list[Path]:
    return sorted(root.glob("cells/*/cell.json"))


def set_cell_json(root: Path, **fields) -> None:
    """Every cell.json with `fields` set (a forger's re-statement of the launcher record)."""
    for path in cell_jsons(root):
        doc = json.loads(path.read_text())
        corpus.replace_file(path, json.dumps({**doc, **fields}, indent=1).encode())


def test_every_rank_states_itself_and_the_campaign_is_valid(campaign):
    logs = sorted(campaign.glob("cells/*/rank*.log"))
    stated = [p for p in logs if b"[EPCAP_RANK] " in p.read_bytes()]
    assert len(stated) >= 2 * 10, stated              # every rank that reached its device
    u = audit(campaign)
    assert (u.verdict, u.why) == ("VALID", [])
    assert check(u).state == "pass", check(u)


def test_labelled_h100_consistently_stays_valid(on_h100):
    u = audit(on_h100)
    assert (u.verdict, u.why) == ("VALID", [])
    assert check(u).state == "pass" and check(u, "above-link-limit").state == "pass"


LIES = ("gpu-kind", "gpu-kind-objects", "gpu-count", "host", "ntasks", "nodes", "object-ranks")


def forge(rng: random.Random, root: Path, first: str) -> list[str]:
    """One forgery of the H100 campaign: `first` and up to two more lies, each re-stated in
    every file a forger controls (provenance.txt everywhere, cell.json, the time objects and
    every table rebuilt from them), the ranks' [EPCAP_RANK] lines left as printed."""
    lies = [first, *rng.sample([x for x in LIES if x != first], rng.randint(0, 2))]
    provenance, cell_json, objects = {}, {}, {}
    for lie in lies:
        if lie in ("gpu-kind", "gpu-kind-objects"):
            provenance["gpu__model"] = rng.choice(FASTER)
            if lie == "gpu-kind-objects":       # the link limit read from the object, too
                objects["device_name"] = provenance["gpu__model"]
        elif lie == "gpu-count":
            provenance["gpu__count"] = str(rng.choice([0, 1]))
        elif lie == "host":
            provenance["hostnames"] = "".join(rng.choices(string.ascii_lowercase, k=8))
        elif lie == "ntasks":
            cell_json["ntasks"] = rng.choice([3, 4, 8])
        elif lie == "nodes":
            cell_json["nodes"] = 0
        else:
            objects["ranks"] = rng.choice([1, 4, 8])
    if provenance:
        corpus.set_provenance(root, **provenance)
    if cell_json:
        set_cell_json(root, **cell_json)
    if objects:
        corpus.restate_timing(root, lambda _cell, obj: {**obj, **objects})
    return lies


def test_a_forger_who_restates_everything_but_the_ranks_is_caught(on_h100, tmp_path,
                                                                   monkeypatch):
    """Seeded forgers over the H100 campaign: INVALID with hardware-mismatch, and VALID with
    the rule switched off (the bug it guards against: nothing else reads these claims)."""
    rng = random.Random(32)
    for n, first in enumerate(LIES):
        lie = corpus.link_copy(on_h100, tmp_path / f"lie{n}")
        lies = forge(rng, lie, first)
        u = audit(lie)
        assert u.verdict == "INVALID" and CODE in u.reasons, (lies, u.why)
        blind = audit(lie, monkeypatch, (CODE,))
        assert (blind.verdict, blind.why) == ("VALID", []), (lies, blind.why)


def test_a_faster_gpu_in_provenance_is_named_by_file_line_and_field(on_h100, tmp_path):
    lie = corpus.link_copy(on_h100, tmp_path / "b200")
    corpus.set_provenance(lie, gpu__model="NVIDIA B200")
    why = " ".join(check(audit(lie)).why)
    assert "rank0.log:" in why and "field device_name 'NVIDIA H100 80GB HBM3'" in why, why
    assert "provenance.txt's gpu.model 'NVIDIA B200'" in why, why


def test_fewer_gpus_in_provenance_than_the_ranks_used(on_h100, tmp_path):
    lie = corpus.link_copy(on_h100, tmp_path / "count")
    corpus.set_provenance(lie, gpu__count="1")
    u = audit(lie)
    assert u.verdict == "INVALID" and CODE in u.reasons, u.why
    assert "state 2 GPU devices ['cuda:0', 'cuda:1']" in " ".join(check(u).why), u.why
    assert "provenance.txt's gpu.count is 1" in " ".join(check(u).why), u.why


def test_the_object_device_against_rank_zero(campaign, tmp_path):
    """The CPU campaign's time objects re-labelled B200 (provenance too), the ranks still on
    cpu: the object's device is not rank 0's."""
    lie = corpus.link_copy(campaign, tmp_path / "object")
    corpus.set_provenance(lie, gpu__model="NVIDIA B200", gpu__count="8")
    corpus.restate_timing(lie, lambda _cell, obj: {**obj, "device_name": "NVIDIA B200"})
    u = audit(lie)
    assert u.verdict == "INVALID" and CODE in u.reasons, u.why
    assert "[EPCAP_TIMING] field device_name 'NVIDIA B200', rank 0 states device_name 'cpu'" \
        in " ".join(check(u).why), u.why


def strip_rank_lines(logs: list[Path]) -> None:
    for log in logs:
        kept = [x for x in log.read_bytes().split(b"\n") if b"[EPCAP_RANK]" not in x]
        corpus.replace_file(log, b"\n".join(kept))


def test_older_uploads_without_the_line_are_not_applicable(campaign, tmp_path):
    old = corpus.link_copy(campaign, tmp_path / "old")
    strip_rank_lines(sorted(old.glob("cells/*/*.log")))
    u = audit(old)
    assert (u.verdict, u.why) == ("VALID", [])
    assert check(u).state == "n/a" and "[EPCAP_RANK]" in check(u).why[0], check(u)
    legacy = audit(corpus.write_legacy(tmp_path / "legacy"))
    assert check(legacy).state == "n/a", check(legacy)


def test_a_line_removed_from_one_cell_or_unreadable_is_unknown(campaign, tmp_path):
    cut = corpus.link_copy(campaign, tmp_path / "cut")
    cell = next(c for c in sorted((cut / "cells").iterdir()) if "__measure__" in c.name)
    strip_rank_lines(sorted(cell.glob("*.log")))
    u = audit(cut)
    assert u.verdict == "UNKNOWN" and CODE in u.reasons, u.why
    bad = corpus.link_copy(campaign, tmp_path / "bad")
    log = next(iter(sorted(bad.glob("cells/*__measure__*/rank1.log"))))
    corpus.replace_file(log, log.read_bytes().replace(b'"world":2', b'"world":"two"', 1))
    u = audit(bad)
    assert u.verdict == "UNKNOWN" and CODE in u.reasons, u.why
    assert "rank1.log:2: world: not an integer" in " ".join(check(u).why), u.why


def test_the_world_against_the_rank_logs(campaign, tmp_path):
    """A rank's line moved to another rank's log, or a rank log deleted from a run that
    exited 0: INVALID, named."""
    moved = corpus.link_copy(campaign, tmp_path / "moved")
    log = next(iter(sorted(moved.glob("cells/*__validate__*/rank1.log"))))
    corpus.rewrite_tagged(log, corpus.RANK_TAG, lambda o: {**o, "rank": 0, "local_rank": 0})
    why = " ".join(check(audit(moved)).why)
    assert "field rank 0 in rank1.log" in why or "stated again" in why, why
    world = corpus.link_copy(campaign, tmp_path / "world")
    for path in sorted(world.glob("cells/*__measure__*/rank*.log"))[:2]:
        corpus.rewrite_tagged(path, corpus.RANK_TAG, lambda o: {**o, "world": 4})
    u = audit(world)
    assert u.verdict == "INVALID" and CODE in u.reasons, u.why


def test_the_rank_line_reader():
    line = '{"rank":1,"world":2,"local_rank":1,"host":"h","device":"cuda:1","device_name":"X"}'
    assert rank_record(line, path="r.log", line=3).device == "cuda:1"
    for payload, field in (('{"rank":2,"world":true}', "world"), ("[1]", None),
                           ('{"rank":0,"world":1,"local_rank":0,"host":"","device":"c",'
                            '"device_name":"c"}', "host"), ("{", None)):
        with pytest.raises(BadInput) as err:
            rank_record(payload, path="r.log", line=3)
        assert str(err.value).startswith("r.log:3: ") and (field is None or field in str(err.value))


def test_provenance_that_saw_no_gpu_tool_is_no_contradiction(on_h100, tmp_path):
    """`gpu.source: none` records no-gpu without looking (no NVML, no nvidia-smi): ranks on
    H100s are no contradiction there; the same no-gpu seen by NVML is."""
    blind = corpus.link_copy(on_h100, tmp_path / "blind")
    corpus.set_provenance(blind, gpu__model="no-gpu", gpu__count="0", gpu__source="none")
    assert check(audit(blind)).state == "pass"
    seen = corpus.link_copy(on_h100, tmp_path / "seen")
    corpus.set_provenance(seen, gpu__model="no-gpu", gpu__count="0", gpu__source="nvml")
    u = audit(seen)
    assert u.verdict == "INVALID" and CODE in u.reasons, u.why


def test_gpu_names_compare_by_name_and_link():
    from harness.audit.rules.hardware import same_gpu
    assert same_gpu(H100, H100) and same_gpu("NVIDIA H100 80GB HBM3 MIG 1g.10gb", H100)
    assert not same_gpu(H100, "NVIDIA B200") and not same_gpu("NVIDIA H100", "NVIDIA H100 PCIe")

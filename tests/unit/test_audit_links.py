"""The physical limit (harness/audit/rules/links.py, `above-link-limit`): the shared campaign,
run for real on CPU, is VALID (no GPU: not applicable, said why); labelled as run on B200s (ranks,
provenance and objects: corpus.label_gpu) and re-stated everywhere with the harness's own code
it stays VALID (CPU rates are far below 900 GB/s); seeded forgers make time cells faster, re-state every table consistently (the logs'
objects, events.jsonl, timing_launches.tsv, timing.tsv and comparison.tsv as the pipeline
replay builds them) and are caught by `above-link-limit` and by nothing else."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pytest

from harness.results.layout import TIMING_TSV
from harness.timing.links import link_of

CORPUS_PY = Path(__file__).resolve().parents[1] / "fixtures" / "uploads" / "corpus.py"
_spec = importlib.util.spec_from_file_location("upload_corpus_physics", CORPUS_PY)
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)

CODE = "above-link-limit"
TAG = b"[EPCAP_TIMING] "
B200 = "NVIDIA B200"
MS_KEYS = tuple(f"{ph}_ms_{q}" for ph in ("dispatch", "combine") for q in ("median", "p10", "p90"))


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    return corpus.harness_campaign(tmp_path_factory.getbasetemp())


audit = corpus.audit_upload          # the audit, optionally with named rules disabled


def time_logs(root: Path) -> list[Path]:
    return sorted(p for c in (root / "cells").iterdir() if "__time__" in c.name
                  for p in c.glob("*.log") if TAG in p.read_bytes())


def forge(obj: dict, factor: float) -> dict:
    """The object as a run `factor` times faster on a B200 would print it, consistently."""
    out = dict(obj, device_name=B200)
    for key in MS_KEYS:
        if out.get(key) is not None:
            out[key] = out[key] / factor
    out["per_trial"] = [{k: v / factor for k, v in t.items()} for t in out.get("per_trial", [])]
    for key in ("rank_dispatch_ms_median", "rank_dispatch_ms_p90"):
        out[key] = [v / factor for v in out.get(key, [])]
    if out.get("algbw_gbps") is not None:
        out["algbw_gbps"] = out["algbw_gbps"] * factor
    return out


def restate(root: Path, factors: dict[str, float]) -> None:
    """The campaign labelled as run on B200s everywhere (each rank's [EPCAP_RANK] line, every
    provenance.txt, every time object: corpus.label_gpu, so hardware-mismatch has nothing to
    contradict), each time cell's object forged (factor 1: only the device), and the timing
    tables re-stated by the harness's own code (corpus.restate_timing)."""
    corpus.label_gpu(root, B200, change=lambda cell, obj: forge(obj, factors.get(cell, 1.0)))


def rate(obj: dict, phase: str) -> float:
    return obj[f"{phase}_bytes_per_rank"] / (obj[f"{phase}_ms_median"] * 1e-3) / 1e9


def test_the_cpu_campaign_is_valid_and_the_rule_says_why_not(campaign):
    u = audit(campaign)
    assert (u.verdict, u.why) == ("VALID", [])
    check = next(c for c in u.checks if c.code == CODE)
    assert check.state == "n/a" and "no GPU" in " ".join(check.why), check


def test_labelled_b200_and_restated_stays_valid(campaign, tmp_path):
    """Seen failing: a re-statement that misses one table is caught by the replay rules."""
    copy = corpus.link_copy(campaign, tmp_path / "b200")
    restate(copy, {})
    u = audit(copy)
    assert (u.verdict, u.why) == ("VALID", [])
    check = next(c for c in u.checks if c.code == CODE)
    assert check.state == "pass", check
    rows = (copy / TIMING_TSV).read_text().splitlines()
    head = rows[0].split("\t")
    row = dict(zip(head, rows[1].split("\t"), strict=True))
    assert row["gpu"] == B200 and float(row["link_gbps"]) == 900.0
    assert 0 < float(row["dispatch_link_fraction"]) < 1e-2     # CPU gloo: far below NVLink


def test_forged_faster_timings_restated_are_caught_only_by_the_link_limit(campaign, tmp_path,
                                                                          monkeypatch):
    """Seeded forgers: every time cell of some models made faster by one factor (so the
    verdicts stand), just past the limit or far past it, every table re-stated; INVALID with
    above-link-limit, VALID with that rule disabled. Seen failing: with the rule left out of
    RULES every variant is VALID."""
    rng = random.Random(34)
    objs = {p.parent.name: json.loads(p.read_bytes().split(TAG, 1)[1].split(b"\n", 1)[0])
            for p in time_logs(campaign)}
    models = sorted({name.split("__")[0] for name in objs})
    limit = link_of(B200)[0].gbps
    for n in range(4):
        picked = rng.sample(models, rng.randint(1, len(models)))
        cells = [c for c in objs if c.split("__")[0] in picked]
        need = max(limit / max(rate(objs[c], "dispatch"), rate(objs[c], "combine"))
                   for c in cells)
        factor = need * rng.choice([1.01, 1.5, 10.0])
        lie = corpus.link_copy(campaign, tmp_path / f"lie{n}")
        restate(lie, dict.fromkeys(cells, factor))
        u = audit(lie)
        assert u.verdict == "INVALID" and CODE in u.reasons, (picked, u.why)
        blind = audit(lie, monkeypatch, (CODE,))
        assert (blind.verdict, blind.why) == ("VALID", []), (picked, blind.why)


def test_a_table_that_raises_its_own_limit_is_refused(campaign, tmp_path):
    copy = corpus.link_copy(campaign, tmp_path / "raised")
    restate(copy, {})
    text = (copy / TIMING_TSV).read_text().replace("\t900.0\t", "\t9000.0\t", 1)
    corpus.replace_file(copy / TIMING_TSV, text.encode())
    u = audit(copy)
    assert u.verdict == "INVALID" and CODE in u.reasons, u.why

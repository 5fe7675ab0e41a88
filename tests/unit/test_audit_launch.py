"""Code and memory of each run against the runbook as run (harness/audit/rules/launch.py,
`launch-not-runbook`): seeded forgers re-state every file that states what they change (a
cell's argv in cell.json and its provenance; a modelled peak memory in the launch's
[EPCAP_TIMING] object and in timing.tsv as the pipeline's replay derives it), each forgery
is caught, and VALID with the rule switched off; the untouched campaign stays VALID."""

from __future__ import annotations

import importlib.util
import json
import random
import shlex
from pathlib import Path

import pytest

from harness.audit import audit_target, engine
from harness.audit.vocab import LAUNCH_NOT_RUNBOOK
from harness.results.layout import TIMING_TSV

CORPUS_PY = Path(__file__).resolve().parents[1] / "fixtures" / "uploads" / "corpus.py"
_spec = importlib.util.spec_from_file_location("upload_corpus_launch", CORPUS_PY)
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)

VARIANTS = 6
# flags whose value the reference backend takes from the runbook, with other values a run
# could have been given (none of them changes the dispatch counts of the cell's logs)
OTHER = {"--hidden": ["16", "64"], "--expert-ffn": ["8", "48"], "--routing-sigma": ["0.05"],
         "--router-dtype": ["bf16"], "--shared-ffn": ["4"], "--device": ["cpu"],
         "--pad-multiple": ["64"], "--trials": ["3"]}
TAG = b"[EPCAP_TIMING] "


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    return corpus.harness_campaign(tmp_path_factory.getbasetemp())


def audit(root: Path, monkeypatch=None, blind: bool = False):
    """The upload's audit; `blind` switches launch-not-runbook off, and routing-not-from-seed
    (which also sees a recorded flag that changes the routing: the logs are not its routing)."""
    if not blind:
        (u,) = audit_target(root).uploads
        return u
    off = (LAUNCH_NOT_RUNBOOK, "routing-not-from-seed")
    with monkeypatch.context() as m:
        m.setattr(engine, "RULES", tuple(r for r in engine.RULES if r.code not in off))
        (u,) = audit_target(root).uploads
    return u


def argv_forgery(root: Path, rng: random.Random) -> str:
    """One cell said to have run with another value of one runbook-given flag: its
    cell.json argv and its provenance's cell.argv re-stated alike (the logs are what such a
    run prints: the flags chosen leave the dispatch counts as they are)."""
    cells = sorted(p.parent for p in (root / "cells").glob("*/cell.json"))
    while True:
        cell = rng.choice(cells)
        data = json.loads((cell / "cell.json").read_text())
        flags = [f for f in OTHER if f in data["argv"]]
        if not flags:
            continue
        flag = rng.choice(flags)
        at = data["argv"].index(flag) + 1
        old = data["argv"][at]
        choices = [v for v in OTHER[flag] if v != old]
        if not choices:
            continue
        data["argv"][at] = rng.choice(choices)
        corpus.replace_file(cell / "cell.json", json.dumps(data, indent=1).encode())
        prov = cell / "provenance.txt"
        lines = [f"cell.argv: {shlex.join(data['argv'])}" if x.startswith("cell.argv:") else x
                 for x in prov.read_text().splitlines()]
        corpus.replace_file(prov, ("\n".join(lines) + "\n").encode())
        return f"{cell.name}: {flag} {old} -> {data['argv'][at]}"


def test_untouched_campaign_ran_the_runbooks_commands(campaign):
    u = audit(campaign)
    assert (u.verdict, u.why) == ("VALID", []) and LAUNCH_NOT_RUNBOOK in u.rules_ran


def test_runs_with_other_flags_than_the_runbook(campaign, tmp_path, monkeypatch):
    """Seeded argv forgeries: each INVALID with launch-not-runbook, and VALID without it
    (seen failing: every variant passes with the rule switched off, asserted below)."""
    rng = random.Random(20261203)
    for n in range(VARIANTS):
        lie = corpus.link_copy(campaign, tmp_path / f"lie{n}")
        what = argv_forgery(lie, rng)
        u = audit(lie)
        assert u.verdict == "INVALID" and LAUNCH_NOT_RUNBOOK in u.reasons, (what, u.why)
        blind = audit(lie, monkeypatch, blind=True)
        assert (blind.verdict, blind.why) == ("VALID", []), (what, blind.why)


def timing_rows_restated(root: Path) -> None:
    """timing.tsv re-stated from the edited logs with the harness's own pipeline replay (the
    rows the time step builds: timing.verdicts.aggregate of the launches' objects)."""
    from harness.audit.load import load_upload
    from harness.audit.rules.pipeline import replay_upload
    from harness.results.tables import cell_text
    upload = load_upload(root.parent, root, 128)
    built = replay_upload(upload).timing
    lines = (root / TIMING_TSV).read_text().splitlines()
    header = lines[0].split("\t")
    out = [lines[0]]
    for line in lines[1:]:
        row = dict(zip(header, line.split("\t"), strict=False))
        found = built.get((row["model"].casefold(), row["backend"].casefold()))
        values = found.as_dict() if found is not None else {}
        out.append("\t".join(cell_text(values[c]) if c in values else row[c] for c in header))
    corpus.replace_file(root / TIMING_TSV, ("\n".join(out) + "\n").encode())


def memory_forgery(root: Path, rng: random.Random) -> str:
    """One launch's modelled peak memory lowered or raised in its [EPCAP_TIMING] object,
    and timing.tsv re-stated from it."""
    cells = sorted(c for c in (root / "cells").iterdir() if "__time__" in c.name
                   and any(TAG in p.read_bytes() for p in c.glob("*.log")))
    cell = rng.choice(cells)
    log = next(p for p in sorted(cell.glob("*.log")) if TAG in p.read_bytes())
    lines = log.read_bytes().split(b"\n")
    at = next(i for i, x in enumerate(lines) if TAG in x)
    obj = json.loads(lines[at].split(TAG, 1)[1])
    assert obj["peak_mem_source"] == "modelled"
    old = obj["peak_mem_bytes"]
    obj["peak_mem_bytes"] = int(old * rng.choice([0.5, 0.8, 0.99, 1.25]))
    lines[at] = lines[at].split(TAG, 1)[0] + TAG + json.dumps(obj, separators=(",", ":")).encode()
    corpus.replace_file(log, b"\n".join(lines))
    timing_rows_restated(root)
    return f"{cell.name}: peak_mem_bytes {old} -> {obj['peak_mem_bytes']}"


def test_modelled_peak_memory_is_the_memory_model(campaign, tmp_path, monkeypatch):
    """Seeded memory forgeries, every table re-stated by the pipeline's replay: each INVALID
    with launch-not-runbook and VALID without it."""
    rng = random.Random(7)
    for n in range(VARIANTS):
        lie = corpus.link_copy(campaign, tmp_path / f"mem{n}")
        what = memory_forgery(lie, rng)
        u = audit(lie)
        assert u.verdict == "INVALID" and LAUNCH_NOT_RUNBOOK in u.reasons, (what, u.why)
        assert any("memory model" in w for w in u.why), u.why
        blind = audit(lie, monkeypatch, blind=True)
        assert (blind.verdict, blind.why) == ("VALID", []), (what, blind.why)

"""Invariants of the raw evidence (harness/audit/rules/conservation.py, clocks.py, timing_objects.py): the shared campaign,
run for real, audits VALID; forgers' generators edit its raw evidence in ways no other rule
can see (each variant is VALID with the invariant rules disabled) or re-state everything else
with the harness's own code, and every forgery is caught by the invariant's code. Honest
variety (CRLF, `srun --label`, torchrun prefixes) stays VALID."""

from __future__ import annotations

import importlib.util
import json
import random
from datetime import datetime, timedelta
from fractions import Fraction
from pathlib import Path

import pytest

from harness.results.layout import ATTEMPTS_TSV, EVENTS_JSONL
from harness.telemetry.summary import iter_rows

CORPUS_PY = Path(__file__).resolve().parents[1] / "fixtures" / "uploads" / "corpus.py"
_spec = importlib.util.spec_from_file_location("upload_corpus_invariants", CORPUS_PY)
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)

CONSERVATION, CLOCK = "conservation-broken", "clock-impossible"
ROUTING = "routing-not-from-seed"       # also sees a reference row edited off its routing
VARIANTS = 10                 # forgeries per generator (each audits the campaign twice)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    return corpus.harness_campaign(tmp_path_factory.getbasetemp())


audit = corpus.audit_upload          # the audit, optionally with named rules disabled


def dispatch_cells(root: Path) -> list[Path]:
    return sorted(c for c in (root / "cells").iterdir() if any(iter_rows(c.glob("*.log"))))


def set_actual(path: Path, line_no: int, value: int) -> None:
    """Rewrite one dispatch row's actual_valid_recv (the file is replaced, not edited in
    place: the copy is hard-linked to the shared campaign)."""
    lines = path.read_bytes().split(b"\n")
    head, _, tail = lines[line_no - 1].partition(b"actual_valid_recv=")
    rest = tail.split(b" ", 1)[1] if b" " in tail else b""
    lines[line_no - 1] = head + b"actual_valid_recv=" + str(value).encode() + b" " + rest
    corpus.replace_file(path, b"\n".join(lines))


def test_untouched_campaign_is_valid_and_its_invariants_pass(campaign):
    u = audit(campaign)
    assert (u.verdict, u.why) == ("VALID", [])
    passed = {c.code for c in u.checks if c.state == "pass"}
    assert {CONSERVATION, CLOCK, "timing-implausible"} <= passed


# ------------------------------------------------------------------ conservation

def stealth_edit(root: Path, rng: random.Random) -> str:
    """Move one rank's actual_valid_recv up or down inside its iteration's peak and below
    its budget: the cell's peak, every step peak, saturated rows, rows, status and every table
    are unchanged; only the slots of that (iteration, layer) no longer add up."""
    cells = dispatch_cells(root)
    while True:
        cell = rng.choice(cells)
        rows = list(iter_rows(sorted(cell.glob("*.log"))))
        step_peak: dict[int, int] = {}
        for r in rows:
            step_peak[r.iter] = max(step_peak.get(r.iter, 0), r.actual_valid_recv)
        candidates = [r for r in rows if r.actual_valid_recv < min(step_peak[r.iter], r.budget)]
        if not candidates:
            continue
        r = rng.choice(candidates)
        top = min(step_peak[r.iter], r.budget) - 1        # stays strictly below both
        if rng.random() < 0.5 and top > r.actual_valid_recv:
            value = rng.randint(r.actual_valid_recv + 1, top)
        elif r.actual_valid_recv > 0:
            value = rng.randint(0, r.actual_valid_recv - 1)
        else:
            continue
        set_actual(Path(r.path), r.line_no, value)
        return f"{cell.name} iter={r.iter} layer={r.layer} rank={r.rank}: " \
               f"{r.actual_valid_recv} -> {value}"


def test_stealthy_log_edits_break_conservation_and_nothing_else(campaign, tmp_path, monkeypatch):
    """Seeded forgeries the other rules cannot see (VALID without the conservation rule),
    every one caught by it. Seen failing: with `conservation-broken` disabled, each is VALID
    (asserted below), i.e. this test fails on every variant without the rule."""
    rng = random.Random(20261202)
    for n in range(VARIANTS):
        lie = corpus.link_copy(campaign, tmp_path / f"lie{n}")
        what = stealth_edit(lie, rng)
        u = audit(lie)
        assert u.verdict == "INVALID" and CONSERVATION in u.reasons, (what, u.why)
        blind = audit(lie, monkeypatch, (CONSERVATION, ROUTING))
        assert (blind.verdict, blind.why) == ("VALID", []), (what, blind.why)


def restate_cell(root: Path, key: str) -> None:
    """The careful forger, with the harness's own code: the cell's attempts row, cell.json
    status and summary, and its events.jsonl cell_finish record (row, summary) re-derived
    from its edited logs."""
    from harness.audit.load import load_upload
    from harness.audit.rules.rederive import derive
    from harness.results.tables import cell_text
    upload = load_upload(root.parent, root, 128)
    got = derive(upload, upload.cells[key])

    def text(v):
        return cell_text(float(v) if isinstance(v, Fraction) else v)
    columns = {c: text(v) for c, v in got.columns.items() if c != "campaign"}
    corpus.set_row(root, ATTEMPTS_TSV, {"cell_dir": key}, **columns)
    summary = got.summary.to_dict()
    cell_json = root / key / "cell.json"
    data = json.loads(cell_json.read_text())
    data["status"] = got.columns["status"]
    data["summary"] = summary
    corpus.replace_file(cell_json, json.dumps(data, indent=1).encode())
    events = []
    for line in (root / EVENTS_JSONL).read_text().splitlines():
        event = json.loads(line)
        if event.get("ev") == "cell_finish" and event.get("cell") == Path(key).name:
            event["summary"] = summary
            event["row"] = {**event.get("row", {}), **columns}
        events.append(json.dumps(event))
    corpus.replace_file(root / EVENTS_JSONL, ("\n".join(events) + "\n").encode())


def peak_edit(root: Path, rng: random.Random) -> str:
    """Raise one rank's actual_valid_recv above its cell's peak (below its budget) and
    re-state the cell's row, cell.json and events with the harness's own derivation."""
    cells = [c for c in dispatch_cells(root) if "__canary__" not in c.name]
    while True:
        cell = rng.choice(cells)
        rows = list(iter_rows(sorted(cell.glob("*.log"))))
        peak = max(r.actual_valid_recv for r in rows)
        candidates = [r for r in rows if peak + 1 < r.budget]
        if candidates:
            break
    r = rng.choice(candidates)
    value = rng.randint(peak + 1, r.budget - 1)
    set_actual(Path(r.path), r.line_no, value)
    restate_cell(root, f"cells/{cell.name}")
    return f"{cell.name} iter={r.iter} layer={r.layer} rank={r.rank}: {r.actual_valid_recv} " \
           f"-> {value} (peak {peak})"


def test_raised_peaks_restated_everywhere_break_conservation(campaign, tmp_path, monkeypatch):
    """A raised peak with the cell's row, cell.json and events re-stated: other rules may
    see the selection move, the conservation rule sees the slots. Seen failing: with the
    rule disabled, the time cells' variants (whose peaks no table claims) audit VALID."""
    rng = random.Random(7)
    blind_valid = 0
    for n in range(VARIANTS):
        lie = corpus.link_copy(campaign, tmp_path / f"lie{n}")
        what = peak_edit(lie, rng)
        u = audit(lie)
        assert u.verdict == "INVALID" and CONSERVATION in u.reasons, (what, u.why)
        blind = audit(lie, monkeypatch, (CONSERVATION, ROUTING))
        blind_valid += blind.verdict == "VALID"
    assert blind_valid > 0          # some forgeries only conservation sees


def test_a_rank_over_its_budget_and_a_missing_rank(campaign, tmp_path):
    """A row over its budget; a rank's row deleted from one (iteration, layer) of a run
    that exited 0 (whole counts); the same deletion in a run that died is honest."""
    lie = corpus.link_copy(campaign, tmp_path / "over")
    cell = dispatch_cells(lie)[0]
    r = next(iter(iter_rows(sorted(cell.glob("*.log")))))
    set_actual(Path(r.path), r.line_no, r.budget + 1)
    u = audit(lie)
    assert u.verdict == "INVALID" and CONSERVATION in u.reasons, u.why
    assert any("> budget" in w for w in u.why), u.why

    from harness.audit.rules import conservation
    from harness.telemetry.summary import summarize
    gone = tmp_path / "gone"
    gone.mkdir()
    # every rank's rows in one file (rank<R>.log holds rank R only), one row then deleted
    lines = b"\n".join(p.read_bytes().rstrip(b"\n")
                       for p in sorted(cell.glob("rank*.log"))).split(b"\n")
    row_at = next(i for i, x in enumerate(lines) if b"[dispatch]" in x)
    del lines[row_at]
    (gone / "rank0.log").write_bytes(b"\n".join(lines))
    from harness.audit.model import Cell, LogFacts, Table, Upload
    s = summarize([gone / "rank0.log"], expected_ranks=2)
    assert s.partial_groups == 1
    facts = LogFacts(["rank0.log"], s.rows, s.saturated_rows, None, None, [], [], 0, s)
    for code, state in ((0, "fail"), (1, "pass"), (None, "unknown")):
        up = Upload(path="x", pad_multiple=128)
        up.cells["cells/c"] = Cell("c", "cells/c", cell_json={"launcher": {"exit_code": code}},
                                   logs=facts)
        assert conservation.check_conservation(Table(ATTEMPTS_TSV), up).state == state, code


@pytest.mark.parametrize("style", ["crlf", "srun", "torchrun"])
def test_honest_log_variety_stays_valid(campaign, tmp_path, style):
    """Every log rewritten with CRLF endings, `srun --label` (`3: `) or torchrun `[rank3]:`
    prefixes, the rank taken from each row: the same rows, still VALID."""
    lie = corpus.link_copy(campaign, tmp_path / style)
    for cell in (lie / "cells").iterdir():
        for log in cell.glob("*.log"):
            out = []
            for line in log.read_bytes().split(b"\n")[:-1]:
                rank = line.split(b" rank=")[1].split()[0] if b" rank=" in line else b"0"
                out.append({"crlf": line + b"\r", "srun": rank + b": " + line,
                            "torchrun": b"[rank" + rank + b"]:" + line}[style])
            corpus.replace_file(log, b"\n".join(out) + b"\n")
    u = audit(lie)
    assert (u.verdict, u.why) == ("VALID", []), u.why


# ------------------------------------------------------------------ clocks

def shift(stamp: str, seconds: float) -> str:
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00")) + timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def clock_edit(root: Path, rng: random.Random) -> str:
    """One impossible clock, chosen at random: an attempt finished before it started, a
    negative wall_s (row, cell.json and events alike), a wall_s beyond its span, or an event
    moved back in time within its run."""
    rows = corpus.read_rows(root / ATTEMPTS_TSV)
    row = rng.choice(rows)
    kind = rng.choice(["reversed", "negative", "too-long", "event"])
    if kind == "reversed":
        back = rng.randint(1, 3600)
        corpus.set_row(root, ATTEMPTS_TSV, {"cell_dir": row["cell_dir"]},
                       finished_utc=shift(row["started_utc"], -back))
        return f"{row['cell_dir']}: finished {back} s before it started"
    if kind == "too-long":
        span = (datetime.fromisoformat(row["finished_utc"].replace("Z", "+00:00"))
                - datetime.fromisoformat(row["started_utc"].replace("Z", "+00:00")))
        wall = span.total_seconds() + rng.uniform(3, 5000)
        corpus.set_row(root, ATTEMPTS_TSV, {"cell_dir": row["cell_dir"]},
                       wall_s=f"{wall:.3f}")
        return f"{row['cell_dir']}: wall_s {wall:.3f} over a {span} span"
    events = [json.loads(x) for x in (root / EVENTS_JSONL).read_text().splitlines()]
    if kind == "negative":
        wall = -round(rng.uniform(0.001, 100), 3)
        corpus.set_row(root, ATTEMPTS_TSV, {"cell_dir": row["cell_dir"]}, wall_s=str(wall))
        path = root / row["cell_dir"] / "cell.json"
        data = json.loads(path.read_text())
        data["launcher"]["wall_s"] = wall
        corpus.replace_file(path, json.dumps(data, indent=1).encode())
        for e in events:
            if e.get("ev") == "cell_finish" and e.get("cell") == Path(row["cell_dir"]).name:
                e["wall_s"] = wall
                e["row"] = {**e.get("row", {}), "wall_s": wall}
    else:
        starts = [i for i, e in enumerate(events) if e["ev"] in ("campaign_start", "run_start")]
        at = rng.randrange(starts[0] + 2, len(events))
        back = rng.uniform(61, 86400)
        events[at]["t"] = events[at - 1]["t"] - back
        if "mono" in events[at - 1]:           # moved back on the monotonic clock as well
            prev = events[at - 1]["mono"]
            events[at]["mono"] = round(prev - rng.uniform(0.01, min(back, prev)), 3)
        kind += f" {at} ({events[at]['ev']})"
    corpus.replace_file(root / EVENTS_JSONL,
                        ("\n".join(json.dumps(e) for e in events) + "\n").encode())
    return f"{kind}: {row['cell_dir']}"


def test_impossible_clocks(campaign, tmp_path, monkeypatch):
    """Seeded impossible clocks, each caught by clock-impossible, and each VALID without it
    (no other rule reads a clock): seen failing with the rule disabled."""
    rng = random.Random(41)
    for n in range(VARIANTS):
        lie = corpus.link_copy(campaign, tmp_path / f"lie{n}")
        what = clock_edit(lie, rng)
        u = audit(lie)
        assert u.verdict == "INVALID" and CLOCK in u.reasons, (what, u.why)
        blind = audit(lie, monkeypatch, (CLOCK,))
        if what.startswith("negative") and any("must be in [0," in w for w in blind.why):
            # events.jsonl's boundary (harness/io/boundary/events.py) refuses a negative
            # duration itself: without the rule the upload is UNKNOWN, never VALID
            assert blind.verdict == "UNKNOWN", (what, blind.why)
            continue
        assert (blind.verdict, blind.why) == ("VALID", []), (what, blind.why)


def test_a_wall_clock_stepped_back_mid_run_is_not_a_lie(campaign, tmp_path):
    """NTP (or an operator) steps the wall clock back an hour after some event: every later
    `t` label goes back, the monotonic readings do not; the run stays VALID."""
    rng = random.Random(5)
    for n in range(3):
        honest = corpus.link_copy(campaign, tmp_path / f"step{n}")
        events = [json.loads(x) for x in (honest / EVENTS_JSONL).read_text().splitlines()]
        assert all("mono" in e for e in events)
        at = rng.randrange(3, len(events))
        for e in events[at:]:
            e["t"] = round(e["t"] - 3600.0, 3)
        corpus.replace_file(honest / EVENTS_JSONL,
                            ("\n".join(json.dumps(e) for e in events) + "\n").encode())
        u = audit(honest)
        assert (u.verdict, u.why) == ("VALID", []), (at, u.why)


def test_a_clock_that_cannot_be_read_is_unknown(campaign, tmp_path):
    lie = corpus.link_copy(campaign, tmp_path / "unread")
    row = corpus.read_rows(lie / ATTEMPTS_TSV)[0]
    corpus.set_row(lie, ATTEMPTS_TSV, {"cell_dir": row["cell_dir"]}, started_utc="yesterday")
    u = audit(lie)
    assert u.verdict == "UNKNOWN" and CLOCK in u.unknown, u.why


# ------------------------------------------------------------------ timing objects

TIMING = "timing-implausible"
TAG = b"[EPCAP_TIMING] "


def timing_line(log: Path) -> tuple[list[bytes], int, dict]:
    lines = log.read_bytes().split(b"\n")
    at = next(i for i, x in enumerate(lines) if TAG in x)
    return lines, at, json.loads(lines[at].split(TAG, 1)[1])


KINDS = ("order", "outside-trials", "negative", "algbw", "trials", "copy")


def timing_edit(root: Path, rng: random.Random, kind: str) -> str:
    """One [EPCAP_TIMING] object made impossible, chosen at random; the others stay as the
    process printed them (the derived timing tables may then differ too)."""
    cells = sorted(c for c in (root / "cells").iterdir() if "__time__" in c.name
                   and any(TAG in p.read_bytes() for p in c.glob("*.log")))
    cell = rng.choice(cells)
    log = next(p for p in sorted(cell.glob("*.log")) if TAG in p.read_bytes())
    lines, at, obj = timing_line(log)
    ph = rng.choice(["dispatch", "combine"])
    if kind == "copy":
        other = rng.choice([c for c in cells if c != cell])
        log2 = next(p for p in sorted(other.glob("*.log")) if TAG in p.read_bytes())
        obj = timing_line(log2)[2]
    elif kind == "order":
        obj[f"{ph}_ms_p10"] = obj[f"{ph}_ms_median"] * rng.uniform(1.001, 2)
    elif kind == "outside-trials":
        top = max(t[f"{ph}_ms_median"] for t in obj["per_trial"]) * rng.uniform(1.01, 2)
        obj[f"{ph}_ms_median"] = top
        obj[f"{ph}_ms_p90"] = max(obj[f"{ph}_ms_p90"], top)
        if ph == "dispatch":                     # algbw re-stated from its own formula
            factors = obj["algbw_formula"].split("=")[1].split("bytes")[0].split("*")
            product = 1
            for f in factors:
                product *= int(f)
            obj["algbw_gbps"] = product / (top * 1e-3) / 1e9
    elif kind == "negative":
        name = rng.choice(["step_cv", "noise_floor_pct", f"{ph}_ms_p10", "peak_mem_bytes"])
        obj[name] = -abs(obj[name] or 1.0)      # a negative p10 is still <= the median
    elif kind == "algbw":
        obj["algbw_gbps"] *= rng.choice([0.5, 1.5, 10])
    else:
        obj["trials"] += rng.randint(1, 3)
    lines[at] = lines[at].split(TAG, 1)[0] + TAG + json.dumps(obj, separators=(",", ":")).encode()
    corpus.replace_file(log, b"\n".join(lines))
    return f"{kind} {ph}: {cell.name}"


def test_implausible_timing_objects(campaign, tmp_path):
    """Seeded impossible [EPCAP_TIMING] objects, each caught by timing-implausible (other
    rules may see the timing tables move too). Seen failing: without the rule in RULES,
    every variant lacks the code."""
    rng = random.Random(3)
    for n in range(2 * len(KINDS)):             # every kind twice, the rest at random
        lie = corpus.link_copy(campaign, tmp_path / f"lie{n}")
        what = timing_edit(lie, rng, KINDS[n % len(KINDS)])
        u = audit(lie)
        assert u.verdict == "INVALID" and TIMING in u.reasons, (what, u.why)

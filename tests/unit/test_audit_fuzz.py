"""Mutation fuzzer of the audit (issue 23): random single changes to evidence-bearing values of
a VALID upload (a TSV cell of a column the evidence map calls evidence, a cell.json key, a
number in a log line, a provenance key, a runbook byte, a deleted or duplicated file or row)
must leave it not VALID.

A log mutation after which the harness's own summary of that cell is unchanged (a non-peak
value moved below the peak; a setup_metadata index, which the summary with the shape the
runbook as run gives does not read) is an *equivalent mutant*: the evidence supports the same
rows, so it is counted apart, not as a survivor. A changed provenance value the evidence map
calls context (a host name, a torch version) is counted apart too, and listed; the rate is
printed with and without them. Default size fits the suite's CPU budget; `EPCAP_AUDIT_FUZZ=N` runs N mutations per upload and prints the kill rate and every
survivor (`-s` shows them).
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.audit import audit_target
from harness.audit.evidence import CONTEXT, EVIDENCE, evidence_columns
from harness.audit.evidence import PROVENANCE_KEYS as PROVENANCE_TXT_KEYS
from harness.audit.model import decimal_of, norm
from harness.results.layout import ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV
from harness.telemetry.summary import summarize
from harness.vocab import DEFAULT_PAD_MULTIPLE

CORPUS_PY = Path(__file__).resolve().parents[1] / "fixtures" / "uploads" / "corpus.py"
_spec = importlib.util.spec_from_file_location("upload_corpus_fuzz", CORPUS_PY)
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)

SIZE = int(os.environ.get("EPCAP_AUDIT_FUZZ", "24"))
SEED = int(os.environ.get("EPCAP_AUDIT_FUZZ_SEED", "23"))
GOAL = 0.99
# measured 99.27%-99.64% over 274-277 mutations (seeds 7, 41; docs/audit.md): at the default
# size one argued survivor in 24 is 95.8%, so the floor leaves room for one and no more
LEGACY_FLOOR = 0.95
TABLES = (ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV)
NUMBER = re.compile(r"(?<=[=\[ ])(\d+)")
PROVENANCE_KEYS = ("harness.version", "harness.commit", "command_line", "utc_start",
                   "hostnames", "gpu.model", "torch", "python", "runbook.sha256", "repo.epcap")


@dataclass
class Mutation:
    kind: str
    what: str
    equivalent: bool = False
    context: bool = False        # a value the evidence map calls context (no rule reads it)
    unclaimed: bool = False      # only a peak changed that no row nor cell.json of it states


class Skip(Exception):
    """The random choice cannot make a change here (try another)."""


def tsv_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return lines[0].split("\t"), [x.split("\t") for x in lines[1:] if x]


def write_tsv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    corpus.replace_file(path, ("\n".join("\t".join(r) for r in [header, *rows]) + "\n")
                        .encode())


def other_value(rng: random.Random, value: str, column_values: list[str]) -> str:
    """A value that differs from `value` as the audit compares it (numbers by value, names
    after NFKC and case folding)."""
    choices = [v for v in column_values if not same(v, value)]
    number = decimal_of(value)
    if number is not None and value:
        digits = list(value)
        spots = [i for i, c in enumerate(digits) if c.isdigit()]
        i = rng.choice(spots)
        digits[i] = str((int(digits[i]) + rng.randint(1, 9)) % 10)
        choices.append("".join(digits))
    choices += [value + "x", "", "1"] if value else ["1", "0", "true"]
    choices = [c for c in choices if not same(c, value)]
    if not choices:
        raise Skip
    return rng.choice(choices)


def same(a: str, b: str) -> bool:
    da, db = decimal_of(a), decimal_of(b)
    if da is not None and db is not None and a and b:
        return da == db
    return norm(a) == norm(b)


def mutate_tsv(rng: random.Random, root: Path) -> Mutation:
    table = rng.choice([t for t in TABLES if (root / t).exists()])
    header, rows = tsv_rows(root / table)
    columns = [c for c in evidence_columns(table) if c in header]
    if not rows or not columns:
        raise Skip
    r, column = rng.randrange(len(rows)), rng.choice(columns)
    i = header.index(column)
    old = rows[r][i] if i < len(rows[r]) else ""
    new = other_value(rng, old, [x[i] for x in rows if i < len(x)])
    rows[r][i] = new
    write_tsv(root / table, header, rows)
    return Mutation("tsv", f"{table}:{r + 2} {column} {old!r} -> {new!r}")


def mutate_rows(rng: random.Random, root: Path) -> Mutation:
    table = rng.choice([t for t in TABLES if (root / t).exists()])
    header, rows = tsv_rows(root / table)
    if not rows:
        raise Skip
    r = rng.randrange(len(rows))
    if rng.random() < 0.5:
        gone = rows.pop(r)
        write_tsv(root / table, header, rows)
        return Mutation("row", f"{table}:{r + 2} deleted ({'/'.join(gone[1:4])})")
    rows.insert(r, list(rows[r]))
    write_tsv(root / table, header, rows)
    return Mutation("row", f"{table}:{r + 2} duplicated")


def cells(root: Path) -> list[Path]:
    """Every cell directory (under cells/, or under a step's cells/ in the earlier layout)."""
    return sorted(p.parent for p in root.rglob("cell.json"))


def mutate_cell_json(rng: random.Random, root: Path) -> Mutation:
    cell = rng.choice(cells(root))
    data = json.loads((cell / "cell.json").read_text())
    data.setdefault("launcher", {})
    key = rng.choice(["name", "cell.model", "cell.backend", "cell.purpose", "cell.capacity",
                      "cell.attempt", "cell.campaign", "status", "launcher.exit_code",
                      "launcher.state"])
    head, _, tail = key.partition(".")
    holder = data[head] if tail else data
    field = tail or head
    old = holder.get(field)
    new = {"status": ["ok", "drops", "crash", "does_not_fit"],
           "launcher.state": ["completed", "failed", "timeout"],
           "launcher.exit_code": [0, 1, 137, None],
           "cell.attempt": [1, 2, 3], "cell.capacity": ["2.00", "1.125", "1.25"],
           "cell.purpose": ["measure", "validate", "time"],
           "cell.backend": ["echo", "ultraep", "moonep"],
           "cell.model": ["QWEN3_30B", "DEEPSEEK_V2_LITE"]}.get(key, [str(old) + "x"])
    new = [v for v in new if str(v) != str(old) and not same(str(v), str(old))]
    if not new:
        raise Skip
    holder[field] = rng.choice(new)
    corpus.replace_file(cell / "cell.json", json.dumps(data, indent=1).encode())
    return Mutation("cell.json", f"{cell.name}/cell.json {key} {old!r} -> {holder[field]!r}")


SHAPES: dict[str, dict] = {}     # cell name -> the ranks x layers x iterations as run


def shapes_as_run(valid: Path) -> dict[str, dict]:
    """The expected log shape the upload's runbook as run gives each cell (the shape the
    harness summarises with), read once from the VALID upload; {} without a runbook."""
    from harness.audit.load import load_upload
    from harness.audit.rules.rederive import expected_shape
    upload = load_upload(valid.parent, valid, DEFAULT_PAD_MULTIPLE)
    found = {c.name: expected_shape(upload, c) for c in upload.cells.values()}
    return {name: shape for name, shape in found.items() if shape}


def summary_key(cell: Path):
    """The harness's own summary of a cell, with the shape the runbook as run gives it (the
    summary analysis.py writes; without a runbook, the logs' own grid)."""
    s = summarize(sorted(cell.glob("rank*.log")), **SHAPES.get(cell.name, {}))
    return (s.rows, s.malformed_rows, s.saturated_rows, s.peak_actual_valid_recv,
            s.expected_recv, s.budget, s.iterations, s.layers, s.ranks, s.missing_rows,
            s.duplicate_rows)


def mutate_log(rng: random.Random, root: Path) -> Mutation:
    cell = rng.choice([c for c in cells(root) if list(c.glob("rank*.log"))])
    log = rng.choice(sorted(cell.glob("rank*.log")))
    before = summary_key(cell)
    lines = log.read_text().splitlines()
    candidates = [i for i, x in enumerate(lines) if NUMBER.search(x) and "MOE_DROP" in x]
    if not candidates:
        raise Skip
    i = rng.choice(candidates)
    spans = [m.span() for m in NUMBER.finditer(lines[i])]
    a, b = rng.choice(spans)
    old = int(lines[i][a:b])
    new = rng.choice([old + 1, max(old - 1, 0), old * 2, old + 7])
    if new == old:
        raise Skip
    lines[i] = lines[i][:a] + str(new) + lines[i][b:]
    corpus.replace_file(log, ("\n".join(lines) + "\n").encode())
    after = summary_key(cell)
    equivalent = after == before
    unclaimed = not equivalent and states_no_peak(root, cell) and all(
        x == y for k, (x, y) in enumerate(zip(before, after, strict=True)) if k != PEAK_AT)
    return Mutation("log", f"{cell.name}/{log.name}:{i + 1} {old} -> {new}", equivalent,
                    unclaimed=unclaimed)


PEAK_AT = 3                      # summary_key's peak_actual_valid_recv


def states_no_peak(root: Path, cell: Path) -> bool:
    """Neither the cell's attempts row nor its cell.json states a peak (the earlier campaign
    wrote none for a time run): a change of that peak alone changes no claim of the upload."""
    header, rows = tsv_rows(root / ATTEMPTS_TSV)
    named = [dict(zip(header, r, strict=False)) for r in rows
             if r[header.index("cell_dir")].rstrip("/").endswith("/" + cell.name)]
    data = json.loads((cell / "cell.json").read_text())
    summary = data.get("summary") if isinstance(data.get("summary"), dict) else {}
    return bool(named) and all(not r.get("peak_actual_valid_recv") and
                               not r.get("required_capacity") for r in named) \
        and summary.get("peak_actual_valid_recv") is None


def mutate_provenance(rng: random.Random, root: Path) -> Mutation:
    where = rng.choice([root, *cells(root)])
    path = where / "provenance.txt"
    if not path.exists():
        raise Skip
    lines = path.read_text().splitlines()
    key = rng.choice(PROVENANCE_KEYS)
    at = [i for i, x in enumerate(lines) if x.startswith(key + ":")]
    if not at:
        raise Skip
    if where != root and key != "runbook.sha256":
        raise Skip          # a cell's provenance: only its runbook sha256 is evidence
    if key == "runbook.sha256" or rng.random() < 0.5:
        value = lines[at[0]].split(": ", 1)[1]
        lines[at[0]] = f"{key}: {value[:-1]}{'0' if value[-1] != '0' else '1'}"
        what = "changed"
    else:
        del lines[at[0]]
        what = "deleted"
    corpus.replace_file(path, ("\n".join(lines) + "\n").encode())
    context = what == "changed" and provenance_kind(key) == CONTEXT
    return Mutation("provenance", f"{path.relative_to(root)} {key} {what}", context=context)


def provenance_kind(key: str) -> str:
    """The evidence map's kind of a provenance key (its value; presence is checked apart)."""
    entries = EVIDENCE[PROVENANCE_TXT_KEYS]
    entry = entries.get("repo.<name>" if key.startswith("repo.") else key)
    return entry.kind if entry is not None else entries["(provenance values)"].kind


def mutate_runbook(rng: random.Random, root: Path) -> Mutation:
    path = root / "runbook.yaml"
    if not path.exists():
        raise Skip
    data = bytearray(path.read_bytes())
    spots = [i for i, c in enumerate(data) if chr(c).isdigit()]
    i = rng.choice(spots)
    data[i] = ord(str((int(chr(data[i])) + 1) % 10))
    corpus.replace_file(path, bytes(data))
    return Mutation("runbook", f"runbook.yaml byte {i} digit changed")


def mutate_delete(rng: random.Random, root: Path) -> Mutation:
    cell = rng.choice(cells(root))
    victims = [cell, cell / "cell.json", *sorted(cell.glob("rank*.log"))]
    victim = rng.choice(victims)
    if victim.is_dir():
        import shutil
        shutil.rmtree(victim)
    else:
        victim.unlink()
    return Mutation("delete", f"{victim.relative_to(root)} deleted")


MUTATORS = (mutate_tsv, mutate_tsv, mutate_tsv, mutate_rows, mutate_cell_json,
            mutate_cell_json, mutate_log, mutate_log, mutate_provenance, mutate_runbook,
            mutate_delete)


def fuzz(valid: Path, work: Path, size: int, seed: int, **audit) -> tuple[list, list, list]:
    """(killed, survivors, equivalents) of `size` random single mutations of `valid`."""
    rng = random.Random(seed)
    SHAPES.clear()
    SHAPES.update(shapes_as_run(valid))
    killed, survivors, equivalents = [], [], []
    n = 0
    while len(killed) + len(survivors) + len(equivalents) < size:
        n += 1
        root = corpus.link_copy(valid, work / f"m{n}")
        try:
            m = rng.choice(MUTATORS)(rng, root)
        except Skip:
            continue
        (u,) = audit_target(root, **audit).uploads
        if (m.equivalent or m.context or m.unclaimed) and u.verdict == "VALID":
            equivalents.append(m)
        elif u.verdict == "VALID":
            survivors.append(m)
        else:
            killed.append((m, u.verdict, u.reasons))
        import shutil
        shutil.rmtree(root)
    return killed, survivors, equivalents


def report(name: str, killed: list, survivors: list, equivalents: list) -> float:
    judged = len(killed) + len(survivors)
    rate = len(killed) / judged if judged else 1.0
    kinds = Counter(m.kind for m, _, _ in killed)
    apart = [m for m in equivalents if m.context or m.unclaimed]
    raw = judged + len(apart)
    print(f"\n{name}: {len(killed)}/{judged} killed ({rate:.2%}); "
          f"{len(equivalents) - len(apart)} equivalent log mutants; {len(apart)} counted "
          f"apart (a context value, or a peak no row states; counted as survivors: "
          f"{len(killed)}/{raw} = {len(killed) / max(raw, 1):.2%}); "
          f"killed by kind {dict(kinds)}")
    for m in apart:
        print(f"  {'CONTEXT' if m.context else 'UNCLAIMED'} [{m.kind}] {m.what}")
    codes = Counter(c for _, _, rs in killed for c in rs)
    print(f"  reasons: {dict(codes.most_common())}")
    for m in survivors:
        print(f"  SURVIVOR [{m.kind}] {m.what}")
    return rate


@pytest.mark.slow
def test_mutations_of_the_harness_campaign_are_not_valid(tmp_path_factory, tmp_path):
    valid = corpus.harness_campaign(tmp_path_factory.getbasetemp())
    (u,) = audit_target(valid).uploads
    assert u.verdict == "VALID"
    killed, survivors, equivalents = fuzz(valid, tmp_path, SIZE, SEED)
    rate = report("harness campaign", killed, survivors, equivalents)
    assert rate >= GOAL, [m.what for m in survivors]


@pytest.mark.slow
def test_mutations_of_the_earlier_layout(tmp_path):
    """The earlier campaign's layout has no runbook as run: it is re-derived from the
    evidence it carries (rules/legacy.py); its kill rate is printed and held to the floor
    measured when that landed (docs/audit.md argues each survivor)."""
    valid = corpus.write_legacy(tmp_path / "legacy")
    errata = tmp_path / "errata.yaml"                 # dated, so commit order is decidable
    errata.write_text("repository: blackwell_run_scripts\nfixes:\n"
                      "  - {id: executable-capacity, commit: 'e3f7c0b', date: null}\n"
                      "  - {id: oom-excludes-pair, commit: '4e4081f', "
                      "date: '2025-01-01T00:00:00Z'}\n")
    (u,) = audit_target(valid, errata=errata).uploads
    assert u.verdict == "VALID"
    (tmp_path / "work").mkdir()
    killed, survivors, equivalents = fuzz(valid, tmp_path / "work", SIZE, SEED, errata=errata)
    rate = report("earlier layout", killed, survivors, equivalents)
    assert rate >= LEGACY_FLOOR


def test_a_survivor_is_reported(tmp_path, capsys):
    """The fuzzer's own check can fail: a mutation the audit cannot see is a survivor."""
    rate = report("synthetic", [], [Mutation("tsv", "x")], [])
    assert rate == 0.0 and "SURVIVOR [tsv] x" in capsys.readouterr().out


# ------------------------------------------------ the checks the fuzzer's survivors asked for

def legacy_upload(tmp_path: Path) -> tuple[Path, Path]:
    """The earlier layout, and an errata registry under which it audits VALID."""
    errata = tmp_path / "errata.yaml"
    errata.write_text("repository: blackwell_run_scripts\nfixes:\n"
                      "  - {id: executable-capacity, commit: 'e3f7c0b', date: null}\n")
    return corpus.write_legacy(tmp_path / "legacy"), errata


LV = "validate/cells/QWEN3_30B__echo__validate__cap1p25__a1"
LT = "time/cells/DEEPSEEK_V2_LITE__moonep__time__cap1p25__a1"


def legacy_verdict(root: Path, errata: Path) -> tuple[str, list[str], list[str]]:
    (u,) = audit_target(root, errata=errata).uploads
    return u.verdict, u.reasons, u.why


def edit_cell_json(cell: Path, **values) -> None:
    data = json.loads((cell / "cell.json").read_text())
    data.update(values)
    corpus.replace_file(cell / "cell.json", json.dumps(data).encode())


def test_earlier_layout_status_is_rederived_from_its_cell(tmp_path):
    """A cell.json status the logs do not bear out (a clean, unclipped run called `drops`)
    is INVALID on the earlier layout too, where no runbook as run exists (seen failing: the
    fuzzer's earlier survivors `cell.json status 'ok' -> 'drops'`)."""
    root, errata = legacy_upload(tmp_path)
    assert legacy_verdict(root, errata)[0] == "VALID"
    edit_cell_json(root / LV, status="drops")
    v, codes, why = legacy_verdict(root, errata)
    assert v == "INVALID" and "earlier-not-rederived" in codes, why
    assert any("status 'drops' but the harness derives 'ok'" in w for w in why)


def test_earlier_layout_row_columns_are_rederived(tmp_path):
    """Columns no older rule read (capacity_tag, malformed_rows, an emptied peak) are
    re-derived from the cell: a change is INVALID."""
    root, errata = legacy_upload(tmp_path)
    for column, value in (("capacity_tag", "cap2p00"), ("malformed_rows", ""),
                          ("peak_actual_valid_recv", ""), ("status", "")):
        mutant = corpus.link_copy(root, tmp_path / f"m-{column}")
        corpus.edit(mutant, ATTEMPTS_TSV, corpus.set_where(
            column, value, cell_dir=LV))
        v, codes, why = legacy_verdict(mutant, errata)
        assert v == "INVALID" and "earlier-not-rederived" in codes, (column, why)


def test_earlier_layout_telemetry_must_be_whole(tmp_path):
    """A row index moved in a time cell's log (a repeated row, a hole) is INVALID: the logs'
    own grid must be whole even where the runbook as run is not there to give it."""
    root, errata = legacy_upload(tmp_path)
    log = root / LT / "rank0.log"
    text = log.read_text().replace("iter=1 layer=0 rank=3 ", "iter=1 layer=0 rank=2 ", 1)
    corpus.replace_file(log, text.encode())
    v, codes, why = legacy_verdict(root, errata)
    assert v == "INVALID" and "earlier-not-rederived" in codes, why
    assert any("telemetry not whole" in w for w in why)


def test_earlier_layout_cell_without_its_row(tmp_path):
    """A cell whose cell.json states a finished status but no row names is INVALID."""
    root, errata = legacy_upload(tmp_path)
    corpus.edit(root, ATTEMPTS_TSV, lambda r: None if r["cell_dir"] == LT else r)
    v, codes, why = legacy_verdict(root, errata)
    assert v == "INVALID" and "earlier-not-rederived" in codes, why


def test_earlier_layout_without_shape_is_unknown(tmp_path):
    """N that no evidence in the upload states cannot back a VALID verdict: a cell.json with
    no shape makes the rule UNKNOWN, naming the file and field."""
    root, errata = legacy_upload(tmp_path)
    data = json.loads((root / LV / "cell.json").read_text())
    del data["shape"]
    corpus.replace_file(root / LV / "cell.json", json.dumps(data).encode())
    v, codes, why = legacy_verdict(root, errata)
    assert v != "VALID" and "earlier-not-rederived" in codes, why
    assert any(f"{LV}/cell.json: field shape missing" in w for w in why)


def test_earlier_layout_selection_measurement(tmp_path):
    """measured_at_capacity and over_provision are the last measure's (grid.capacity's
    formula) on the earlier layout too."""
    root, errata = legacy_upload(tmp_path)
    for column, value in (("measured_at_capacity", "1"), ("over_provision", "1.1668")):
        mutant = corpus.link_copy(root, tmp_path / f"s-{column}")
        corpus.edit(mutant, SELECTION_TSV, corpus.set_where(column, value, model="QWEN3_30B",
                                                            backend="ultraep"))
        v, codes, why = legacy_verdict(mutant, errata)
        assert v == "INVALID" and "earlier-not-rederived" in codes, (column, why)


@pytest.mark.slow
def test_a_deleted_canary_cell_is_missing(tmp_path_factory, tmp_path):
    """The driver writes no attempts row for a canary: events.jsonl, replayed through the
    harness's own reader, is what says it ran (seen failing: the fuzzer's survivor `canary
    ... deleted` before cells.check_finished_cells)."""
    valid = corpus.harness_campaign(tmp_path_factory.getbasetemp())
    root = corpus.link_copy(valid, tmp_path / "lie")
    (canary, *_) = sorted((root / "cells").glob("*__canary__*"))
    import shutil
    shutil.rmtree(canary)
    (u,) = audit_target(root).uploads
    assert u.verdict == "INVALID" and "missing-cell" in u.reasons, u.why
    assert any(canary.name in w and "events.jsonl" in w for w in u.why)


# ------------------------------------------------ the audit's one shortcut over the logs

LINE = st.one_of(
    st.sampled_from(["[rank0]: [MOE_DROP_DEBUG][dispatch] iter=0 layer=0 rank=0 "
                     "expected_recv=8 actual_valid_recv=7 budget=9",
                     '[EPCAP_TIMING] {"dispatch_ms": [1.5]}', "x [EPCAP_TIMING] not json",
                     "[EPCAP_TIMING]", "", "\r", "plain text"]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40))


@settings(max_examples=100, deadline=None)
@given(files=st.lists(st.lists(LINE, max_size=12), min_size=1, max_size=3),
       block=st.integers(min_value=1, max_value=64), newline_at_end=st.booleans())
def test_tagged_lines_give_parse_timing_what_every_line_gives(tmp_path_factory, files, block,
                                                              newline_at_end):
    """readers.tagged_lines (a bytes search, block by block) yields exactly the lines holding
    the tag that judge.iter_log_lines yields, so the backend's own parse_timing answers the
    same over either (seen failing with a block cut that dropped a line's head)."""
    from harness.api.backend import TIMING_TAG, Backend
    from harness.audit import readers
    from harness.taxonomy.judge import iter_log_lines
    folder = tmp_path_factory.mktemp("tagged")
    paths = []
    for i, lines in enumerate(files):
        path = folder / f"rank{i}.log"
        text = "\n".join(lines) + ("\n" if newline_at_end else "")
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        paths.append(path)
    old, readers.TAG_BLOCK_BYTES = readers.TAG_BLOCK_BYTES, block
    try:
        fast = list(readers.tagged_lines(paths, TIMING_TAG))
    finally:
        readers.TAG_BLOCK_BYTES = old
    every = [t for _, _, t in iter_log_lines(paths)]
    assert fast == [t for t in every if TIMING_TAG in t]
    assert Backend.parse_timing(None, iter(fast)) == Backend.parse_timing(None, iter(every))


def oom_at_measure(root: Path, line: str) -> None:
    """The earlier layout with DEEPSEEK_V2_LITE/echo's measure ended does_not_fit (no
    validate, no selection), its log holding `line` after a few rows."""
    cell = root / "measure/cells/DEEPSEEK_V2_LITE__echo__measure__cap2p00__a1"

    def oom(row):
        if (row["model"], row["backend"]) != ("DEEPSEEK_V2_LITE", "echo"):
            return row
        if row["purpose"] == "validate":
            return None
        if row["purpose"] == "measure":
            row.update(status="does_not_fit", required_capacity="", peak_actual_valid_recv="",
                       rows="0")
        return row
    corpus.edit(root, ATTEMPTS_TSV, oom)
    corpus.edit(root, SELECTION_TSV, lambda r: None if (r["model"], r["backend"]) ==
                ("DEEPSEEK_V2_LITE", "echo") else r)
    import shutil
    shutil.rmtree(root / "validate/cells/DEEPSEEK_V2_LITE__echo__validate__cap1p25__a1")
    edit_cell_json(cell, status="does_not_fit")
    corpus.replace_file(cell / "rank0.log", (line + "\n").encode())


def test_earlier_layout_out_of_memory_at_measure_stays_valid(tmp_path):
    """Legitimate variety: an out-of-memory at measure, its signature in the log, is data."""
    root, errata = legacy_upload(tmp_path)
    oom_at_measure(root, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB")
    assert legacy_verdict(root, errata)[:2] == ("VALID", [])


@pytest.mark.parametrize("line", ["rank 3 exited", "AssertionError: bad split"])
def test_earlier_layout_does_not_fit_needs_its_signature(tmp_path, line):
    """A does_not_fit whose log shows no out-of-memory (or an assertion: a bug, not data) is
    INVALID: the taxonomy, not the upload, says what the run was."""
    root, errata = legacy_upload(tmp_path)
    oom_at_measure(root, line)
    v, codes, why = legacy_verdict(root, errata)
    assert v == "INVALID" and "earlier-not-rederived" in codes, why


def test_earlier_layout_timeout_without_a_launcher_record_is_unknown(tmp_path):
    """A timeout only the launcher could state, with no launcher record: undecided, with why
    (the upload is INVALID anyway: a measure that timed out leaves no validate)."""
    root, errata = legacy_upload(tmp_path)
    oom_at_measure(root, "rank 3 exited")
    corpus.edit(root, ATTEMPTS_TSV, corpus.set_where("status", "timeout",
                                                     status="does_not_fit"))
    edit_cell_json(root / "measure/cells/DEEPSEEK_V2_LITE__echo__measure__cap2p00__a1",
                   status="timeout")
    (u,) = audit_target(root, errata=errata).uploads
    assert u.verdict != "VALID" and "earlier-not-rederived" in u.unknown, u.why
    assert any("field launcher missing" in w for w in u.why)


def test_repo_lines_have_the_form_the_harness_writes(tmp_path):
    """replay.repo_value_problem accepts every form harness.results.provenance.repo_line
    writes (a checkout, a missing path, a folder that is no checkout) and refuses a changed
    dirty flag, a cut sha, a date that is not ISO (seen failing: the fuzzer's `repo.<name>`
    survivors)."""
    from harness.audit.rules.provenance import repo_value_problem
    from harness.results.provenance import repo_line
    (tmp_path / "plain").mkdir()
    good = [repo_line(corpus.REPO), repo_line(tmp_path / "gone"), repo_line(tmp_path / "plain")]
    assert [repo_value_problem(v) for v in good] == [None, None, None], good
    sha = "0123456789abcdef0123456789abcdef01234567"
    for bad in (f"{sha} 2026-12-01T18:12:59+00:00 main dirty=tru0",
                f"{sha[:-1]} 2026-12-01T18:12:59+00:00 main dirty=true",
                f"{sha} 2026-13-01T18:12:59+00:00 main dirty=true",
                f"{sha} 2026-12-01T18:12:59+00:00 dirty=true", "missing", ""):
        assert repo_value_problem(bad) is not None, bad


@pytest.mark.slow
def test_a_changed_repo_line_is_provenance_incomplete(tmp_path_factory, tmp_path):
    valid = corpus.harness_campaign(tmp_path_factory.getbasetemp())
    root = corpus.link_copy(valid, tmp_path / "lie")
    path = root / "provenance.txt"
    text = path.read_text()
    assert "dirty=" in text
    corpus.replace_file(path, text.replace("dirty=true", "dirty=tru0").replace(
        "dirty=false", "dirty=fals0").encode())
    (u,) = audit_target(root).uploads
    assert u.verdict == "INVALID" and "provenance-incomplete" in u.reasons, u.why


def test_earlier_layout_variety_stays_valid(tmp_path):
    """Legitimate variety on the earlier layout: CRLF logs, BOM and CRLF tables, an extra file
    and column, side by side with an untouched twin: both VALID under rules/legacy.py."""
    errata = tmp_path / "errata.yaml"
    errata.write_text("repository: blackwell_run_scripts\nfixes:\n"
                      "  - {id: executable-capacity, commit: 'e3f7c0b', date: null}\n")
    varied = corpus.write_legacy(tmp_path / "both" / "varied")
    corpus.write_legacy(tmp_path / "both" / "twin")
    for log in varied.rglob("*.log"):
        log.write_bytes(log.read_bytes().replace(b"\n", b"\r\n"))
    header, rows = tsv_rows(varied / ATTEMPTS_TSV)
    write_tsv(varied / ATTEMPTS_TSV, [*header, "note"], [[*r, "x"] for r in rows])
    for table in varied.glob("*.tsv"):
        table.write_bytes(b"\xef\xbb\xbf" + table.read_bytes().replace(b"\n", b"\r\n"))
    (varied / "README.txt").write_text("notes\n")
    uploads = audit_target(tmp_path / "both", errata=errata).uploads
    assert [(u.verdict, u.why) for u in uploads] == [("VALID", []), ("VALID", [])]


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="forked workers need two cores")
def test_forked_summaries_and_judgements_equal_the_serial_ones(tmp_path, monkeypatch):
    """The Tier B path (logs summarised on forked workers, load.read_pending_logs) gives what
    the serial path gives, on a harness-like upload with a planted lie and on the earlier
    layout (seen failing with the workers' summaries dropped)."""
    from harness.audit import load
    from harness.audit.rules import rederive
    root, errata = legacy_upload(tmp_path)
    lie = corpus.write_valid(tmp_path / "valid")
    corpus.edit(lie, ATTEMPTS_TSV, corpus.set_where("peak_actual_valid_recv", "4000",
                                                    purpose="measure", model="QWEN3_30B",
                                                    backend="echo"))

    def outcome():
        return [[(u.verdict, u.reasons, u.why, u.unknown) for u in
                 audit_target(path, errata=errata).uploads] for path in (root, lie)]
    serial = outcome()
    monkeypatch.setattr(load, "PARALLEL_LOG_BYTES", 0)
    monkeypatch.setattr(rederive, "PARALLEL_BYTES", 0)
    assert outcome() == serial
    assert serial[0][0][0] == "VALID" and serial[1][0][0] == "INVALID"


def test_only_a_peak_no_row_states_is_counted_apart(tmp_path):
    """The fuzzer's `unclaimed` class: a time cell of the earlier layout (its row states no
    peak) qualifies; a measure cell (its row states one) never does."""
    root, _ = legacy_upload(tmp_path)
    assert states_no_peak(root, root / LT)
    assert not states_no_peak(root, root / "measure/cells/QWEN3_30B__echo__measure__cap2p00__a1")

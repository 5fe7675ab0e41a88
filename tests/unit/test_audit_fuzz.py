"""Mutation fuzzer of the audit (issue 23): random single changes to evidence-bearing values of
a VALID upload (a TSV cell of a column the evidence map calls evidence, a cell.json key, a
number in a log line, a provenance key, a runbook byte, a deleted or duplicated file or row)
must leave it not VALID.

A log mutation after which the harness's own summary and verdict of that cell are unchanged
(a non-peak value moved below the peak) is an *equivalent mutant*: the evidence supports the
same rows, so it is counted apart, not as a survivor. Default size fits the suite's CPU
budget; `EPCAP_AUDIT_FUZZ=N` runs N mutations per upload and prints the kill rate and every
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

from harness.audit import audit_target
from harness.audit.evidence import evidence_columns
from harness.audit.model import decimal_of, norm
from harness.results.layout import ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV
from harness.telemetry.summary import summarize

CORPUS_PY = Path(__file__).resolve().parents[1] / "fixtures" / "uploads" / "corpus.py"
_spec = importlib.util.spec_from_file_location("upload_corpus_fuzz", CORPUS_PY)
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)

SIZE = int(os.environ.get("EPCAP_AUDIT_FUZZ", "24"))
SEED = int(os.environ.get("EPCAP_AUDIT_FUZZ_SEED", "23"))
GOAL = 0.99
LEGACY_FLOOR = 0.4           # measured 55.6% over 277 mutations (closing note); no runbook as run
TABLES = (ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV)
NUMBER = re.compile(r"(?<=[=\[ ])(\d+)")
PROVENANCE_KEYS = ("harness.version", "harness.commit", "command_line", "utc_start",
                   "hostnames", "gpu.model", "torch", "python", "runbook.sha256", "repo.epcap")


@dataclass
class Mutation:
    kind: str
    what: str
    equivalent: bool = False


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


def summary_key(cell: Path):
    s = summarize(sorted(cell.glob("rank*.log")))
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
    equivalent = summary_key(cell) == before
    return Mutation("log", f"{cell.name}/{log.name}:{i + 1} {old} -> {new}", equivalent)


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
    return Mutation("provenance", f"{path.relative_to(root)} {key} {what}")


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
        if m.equivalent and u.verdict == "VALID":
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
    print(f"\n{name}: {len(killed)}/{judged} killed ({rate:.2%}); {len(equivalents)} "
          f"equivalent log mutants; killed by kind {dict(kinds)}")
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
    """The earlier campaign's layout has no runbook as run: only the older rules apply there,
    so its kill rate is measured and printed, and held to the floor measured when the
    re-derivation landed (docs/audit.md says why the rest survive)."""
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

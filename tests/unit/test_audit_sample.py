"""Samples a forger cannot predict (harness/audit/rules/routing.py, `routing-not-from-seed`,
issue 40): a cell of more than 64 (iteration, layer) groups is checked on a sample drawn from
the audit's sample seed (chosen at audit time unless `epcap audit --sample-seed N` gives it,
printed with the verdict) that always holds the groups of each rank's top row and of every
saturated row.

The forger here knows the sampling code and the seed s it forges for: it moves slots between
two ranks of one (iteration, layer) group outside the sample for s, keeping every sum, step
peak, rank top and saturation (then re-states the tables with the harness's own code). With
`--sample-seed s` the forgery passes (the control: the forger really avoided the sample);
under other seeds it is caught at the rate the sample size predicts; a forgery of a group
holding a rank's top row or a saturated row is caught under every seed; one seed gives one
verdict, and the seed printed reproduces it. Before this change the sample was seeded by the
cell's name alone: the forger's sample was the audit's, and every such forgery was VALID."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.audit import audit_target
from harness.audit.load import load_upload
from harness.audit.rules import routing
from harness.results.layout import ATTEMPTS_TSV
from harness.telemetry.summary import iter_rows

pytestmark = pytest.mark.slow      # runs a 400-group campaign (~1 min on 2 shared cores)

REPO = Path(__file__).resolve().parents[2]
RUNBOOK = REPO / "tests" / "fixtures" / "runbooks" / "sampled.yaml"
CORPUS_PY = REPO / "tests" / "fixtures" / "uploads" / "corpus.py"
_spec = importlib.util.spec_from_file_location("upload_corpus_sample", CORPUS_PY)
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)
INV_PY = Path(__file__).resolve().parent / "test_audit_invariants.py"
_inv_spec = importlib.util.spec_from_file_location("audit_invariants_sample", INV_PY)
invariants = importlib.util.module_from_spec(_inv_spec)
_inv_spec.loader.exec_module(invariants)

CODE = "routing-not-from-seed"
FORGED_FOR = 20261205              # the seed the forger prepares the upload for
OTHER_SEEDS = range(1, 101)        # audits under seeds the forger did not know
EVERY_SEED = range(1, 31)          # a forgery of an always-sampled group: caught under each
FIELDS = ("actual_valid_recv", "pre_balance_recv")   # personality raw: both are the demand


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    results = tmp_path_factory.mktemp("sampled")
    run = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(RUNBOOK),
                          "--results", str(results)], cwd=REPO, capture_output=True,
                         text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return results / "sampled"


def check(u):
    return next(c for c in u.checks if c.code == CODE)


def cell_dir(root: Path, pattern: str) -> Path:
    (found,) = sorted(root.glob(f"cells/*{pattern}*"))
    return found


class Rows:
    """A cell's dispatch rows as the forger reads them: per group, each rank's top value and
    row, each iteration's step peak, and the sample the audit draws for a seed."""

    def __init__(self, cell: Path) -> None:
        self.cell = cell
        self.rows = list(iter_rows(sorted(cell.glob("*.log"))))
        self.groups: dict[tuple[int, int], list] = {}
        self.top: dict[int, int] = {}
        self.step: dict[int, int] = {}
        for r in self.rows:
            self.groups.setdefault((r.iter, r.layer), []).append(r)
            self.top[r.rank] = max(self.top.get(r.rank, 0), r.actual_valid_recv)
            self.step[r.iter] = max(self.step.get(r.iter, 0), r.actual_valid_recv)
        self.iterations = tuple(sorted({g[0] for g in self.groups}))
        self.layers = tuple(sorted({g[1] for g in self.groups}))
        files = sorted(cell.glob("*.log"))
        budgets = sorted({r.budget for r in self.rows})
        self.always = routing.always_sampled(files, budgets)

    def sample(self, seed: int) -> set[tuple[int, int]]:
        """The audit's sample for `seed`, drawn with the audit's own function."""
        return set(routing.sample(seed, self.cell.name, self.iterations, self.layers,
                                  self.always))

    def saturated(self, r) -> bool:
        return r.actual_valid_recv >= r.budget


def set_fields(path: Path, line_no: int, change: dict[str, int]) -> None:
    """One dispatch row's fields rewritten in place (the file replaced: a linked copy)."""
    lines = path.read_bytes().split(b"\n")
    line = lines[line_no - 1]
    for name, value in change.items():
        line, n = re.subn(rb"(?<![A-Za-z0-9_])" + name.encode() + rb"=[0-9]+",
                          name.encode() + b"=" + str(value).encode(), line)
        assert n == 1, (path, line_no, name)
    lines[line_no - 1] = line
    corpus.replace_file(path, b"\n".join(lines))


def move(root: Path, rows: Rows, a, b, d: int) -> str:
    """d slots from row a to row b (same group): actual_valid_recv and pre_balance_recv of
    both rows, then the tables re-stated with the harness's own code."""
    for r, delta in ((a, -d), (b, d)):
        set_fields(root / "cells" / rows.cell.name / Path(r.path).name, r.line_no,
                   {f: r.actual_valid_recv + delta for f in FIELDS})
    invariants.restate_cell(root, f"cells/{rows.cell.name}")
    return (f"{rows.cell.name} iter={a.iter} layer={a.layer}: {d} slots from rank {a.rank} "
            f"to rank {b.rank}")


def quiet_pair(rows: Rows, group: tuple[int, int]):
    """Two rows of a group and d so that moving d slots from the first to the second keeps
    every rank's top, the step peak and saturation: neither row is its rank's top or
    saturated, and the second stays below its rank's top and the step peak."""
    it = group[0]
    cands = [r for r in rows.groups[group]
             if r.actual_valid_recv < rows.top[r.rank] and not rows.saturated(r)
             and r.actual_valid_recv < rows.step[it]]
    for a in cands:
        for b in cands:
            room = min(rows.top[b.rank], rows.step[it], b.budget) - 1 - b.actual_valid_recv
            d = min(a.actual_valid_recv, room, 7)
            if a is not b and d > 0:
                return a, b, d
    return None


def forge_outside(root: Path, pattern: str, seed: int) -> tuple[str, Rows]:
    """The forger who knows the code and `seed`: a quiet move in a group outside the sample."""
    rows = Rows(cell_dir(root, pattern))
    avoid = rows.sample(seed) | rows.always
    for group in sorted(rows.groups):
        found = quiet_pair(rows, group) if group not in avoid else None
        if found:
            return move(root, rows, *found), rows
    raise AssertionError("no group outside the sample to forge")


def rule_states(root: Path, pattern: str, seeds) -> dict[int, str]:
    """routing-not-from-seed's state under each seed, on the one cell (the rule alone; the
    whole audit agrees where the tests below run it)."""
    upload = load_upload(root.parent, root, 128)
    upload.cells = {k: c for k, c in upload.cells.items() if pattern in c.name}
    assert len(upload.cells) == 1
    out = {}
    for seed in seeds:
        upload.sample_seed, upload.sampled = seed, {}
        out[seed] = routing.check_routing(upload.tables[ATTEMPTS_TSV], upload).state
    return out


def lower_quantile(n: int, p: float, alpha: float = 1e-3) -> int:
    """The largest k with P(Binomial(n, p) < k) <= alpha: a count of catches that a sample
    catching with probability p falls below only once in 1/alpha test runs."""
    k, below = 0, 0.0
    while True:
        below += math.comb(n, k) * p ** k * (1 - p) ** (n - k)
        if below > alpha:
            return k
        k += 1


def test_the_campaign_is_sampled_and_valid(campaign):
    u = audit_target(campaign, sample_seed=7).uploads[0]
    assert (u.verdict, u.why) == ("VALID", []), u.why
    assert u.sample_seed == 7, u
    notes = [n for n in u.notes if n.startswith(f"{CODE} checked 64 of 400 (iteration, layer) "
                                                f"groups (16%) of cell ")]
    assert len(notes) == 3 and all("sample seed 7" in n for n in notes), u.notes
    assert "sample seed 7" in check(u).why[0], check(u)
    assert u.to_dict()["sample_seed"] == 7
    saturated = Rows(cell_dir(campaign, "__measure__cap1p50__"))
    assert any(saturated.saturated(r) for r in saturated.rows)


def test_a_forgery_outside_the_sample_is_caught_under_other_seeds(campaign, tmp_path):
    lie = corpus.link_copy(campaign, tmp_path / "lie")
    what, rows = forge_outside(lie, "__measure__cap3p00__", FORGED_FOR)
    # (a) the control: under the seed it was prepared for, the forgery passes
    u = audit_target(lie, sample_seed=FORGED_FOR).uploads[0]
    assert (u.verdict, u.why) == ("VALID", []), (what, u.why)
    # (b) under seeds the forger did not know, it is caught at the sample's rate
    states = rule_states(lie, "__measure__cap3p00__", OTHER_SEEDS)
    assert set(states.values()) <= {"pass", "fail"}, states
    caught = [s for s, state in states.items() if state == "fail"]
    g, m = len(rows.groups), len(rows.always)
    p = (routing.MAX_GROUPS - m) / (g - m)        # one group of the G - m drawn from
    bound = lower_quantile(len(OTHER_SEEDS), p)
    print(f"\ncatch rate of one forged group of {g} ({m} always sampled): "
          f"{len(caught)}/{len(OTHER_SEEDS)} = {len(caught) / len(OTHER_SEEDS):.3f}, "
          f"expected {p:.3f}, asserted >= {bound}")
    assert len(caught) >= bound, (what, len(caught), p, bound)
    # the whole audit agrees with the rule: a catching seed is INVALID, naming the row
    u = audit_target(lie, sample_seed=caught[0]).uploads[0]
    assert u.verdict == "INVALID" and CODE in u.reasons, (what, u.why)
    assert "field actual_valid_recv " in check(u).why[0] or \
        "field pre_balance_recv " in check(u).why[0], check(u).why
    assert u.sample_seed == caught[0]


def test_a_peak_moved_between_ranks_is_caught_under_every_seed(campaign, tmp_path):
    """The user's report: the measure peak moved to another rank of its group, sums kept
    (the cell's peak, step peak and requirement unchanged)."""
    lie = corpus.link_copy(campaign, tmp_path / "peak")
    rows = Rows(cell_dir(lie, "__measure__cap3p00__"))
    peak = max(rows.rows, key=lambda r: r.actual_valid_recv)
    group = (peak.iter, peak.layer)
    assert group in rows.always
    other = min((r for r in rows.groups[group] if r is not peak),
                key=lambda r: r.actual_valid_recv)
    d = peak.actual_valid_recv - other.actual_valid_recv
    what = move(lie, rows, peak, other, d)        # the two ranks swap values
    states = rule_states(lie, "__measure__cap3p00__", EVERY_SEED)
    assert set(states.values()) == {"fail"}, (what, states)
    u = audit_target(lie, sample_seed=FORGED_FOR).uploads[0]
    assert u.verdict == "INVALID" and CODE in u.reasons, (what, u.why)


def test_a_group_of_a_rank_top_or_a_saturated_row_is_caught_under_every_seed(campaign,
                                                                               tmp_path):
    """A quiet move (every top, step peak and saturation kept) inside a group that holds a
    rank's top row, or a saturated row: those groups are always sampled."""
    for pattern, holds in (("__measure__cap3p00__", "top"),
                           ("__measure__cap1p50__", "saturated")):
        lie = corpus.link_copy(campaign, tmp_path / holds)
        rows = Rows(cell_dir(lie, pattern))
        for group in sorted(rows.groups):
            rs = rows.groups[group]
            held = any(rows.saturated(r) for r in rs) if holds == "saturated" else \
                any(r.actual_valid_recv == rows.top[r.rank] for r in rs)
            found = quiet_pair(rows, group) if held else None
            if found:
                break
        assert found, holds
        assert group in rows.always, (holds, group)
        what = move(lie, rows, *found)
        states = rule_states(lie, pattern, EVERY_SEED)
        assert set(states.values()) == {"fail"}, (what, states)
        u = audit_target(lie, sample_seed=EVERY_SEED[0]).uploads[0]
        assert u.verdict == "INVALID" and CODE in u.reasons, (what, u.why)


def test_one_seed_one_verdict_and_the_printed_seed_reproduces(campaign, tmp_path):
    lie = corpus.link_copy(campaign, tmp_path / "again")
    what, _ = forge_outside(lie, "__measure__cap3p00__", FORGED_FOR)

    def verdict(seed):
        doc = audit_target(lie, sample_seed=seed).uploads[0].to_dict()
        return doc
    # (d) the same seed twice: the same verdict, whatever it is
    for seed in (FORGED_FOR, *OTHER_SEEDS[:3]):
        assert verdict(seed) == verdict(seed), (what, seed)
    # (e) the seed the command line prints (JSON and text) reproduces its verdict
    cli = [sys.executable, "-m", "harness.cli", "audit", str(lie)]
    first = subprocess.run([*cli, "--json"], cwd=REPO, capture_output=True, text=True,
                           check=True)
    doc = json.loads(first.stdout)
    (up,) = doc["uploads"]
    seed = up["sample_seed"]
    assert isinstance(seed, int) and seed == doc["sample_seed"], doc
    assert any(f"sample seed {seed}" in n for n in up["notes"]), up["notes"]
    again = subprocess.run([*cli, "--json", "--sample-seed", str(seed)], cwd=REPO,
                           capture_output=True, text=True, check=True)
    (up2,) = json.loads(again.stdout)["uploads"]
    assert up2 == up, (what, seed)
    text = subprocess.run([*cli, "--sample-seed", str(seed)], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout
    assert f"sample seed {seed}" in text and f"--sample-seed {seed}" in text, text[-2000:]
    assert up["verdict"] in text

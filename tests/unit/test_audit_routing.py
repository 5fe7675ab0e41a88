"""Routing that the evidence determines (harness/audit/rules/routing.py, `routing-not-from-seed`):
the shared campaign, run for real, is VALID with every reference cell's rows regenerated from
its seed; a seeded forger's generator moves slots between ranks of one (iteration, layer) so
that every sum, peak and table still holds (then re-states each table with the harness's own
code), or edits a recorded trace, or the recorded seed, and each forgery is INVALID naming the
rule (VALID with the rule disabled, where no other rule can see it). Evidence the audit cannot
regenerate from is UNKNOWN or n/a, never INVALID."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import numpy as np
import pytest

from harness.telemetry.summary import iter_rows

# regenerating every cell's routing per forgery: CI runs these (`make test`), the fast loop skips them
pytestmark = pytest.mark.slow

CORPUS_PY = Path(__file__).resolve().parents[1] / "fixtures" / "uploads" / "corpus.py"
_spec = importlib.util.spec_from_file_location("upload_corpus_routing", CORPUS_PY)
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)
INV_PY = Path(__file__).resolve().parent / "test_audit_invariants.py"
_inv_spec = importlib.util.spec_from_file_location("audit_invariants_forger", INV_PY)
invariants = importlib.util.module_from_spec(_inv_spec)
_inv_spec.loader.exec_module(invariants)

CODE = "routing-not-from-seed"
VARIANTS = 8                       # forgeries per kind (each audits the campaign twice)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    return corpus.harness_campaign(tmp_path_factory.getbasetemp())


audit = corpus.audit_upload          # the audit, optionally with named rules disabled


def check(u):
    return next(c for c in u.checks if c.code == CODE)


def set_field(path: Path, line_no: int, name: str, value: int) -> None:
    """One dispatch row's `name=` value rewritten (the file replaced: a linked copy)."""
    lines = path.read_bytes().split(b"\n")
    head, _, tail = lines[line_no - 1].partition(b" " + name.encode() + b"=")
    rest = tail.split(b" ", 1)[1] if b" " in tail else b""
    lines[line_no - 1] = head + b" " + name.encode() + b"=" + str(value).encode() + \
        (b" " + rest if rest else b"")
    corpus.replace_file(path, b"\n".join(lines))


def field_of(path: Path, line_no: int, name: str) -> int:
    line = path.read_bytes().split(b"\n")[line_no - 1]
    return int(line.split(b" " + name.encode() + b"=")[1].split()[0])


def move_slots(root: Path, rng: random.Random, name: str) -> str | None:
    """Move d slots of `name` from one rank to another in one (iteration, layer) of a random
    cell, both rows staying below that iteration's peak and the budget: every sum (the
    conservation law), peak, step peak, saturation and table is unchanged, then re-stated
    with the harness's own derivation (invariants.restate_cell)."""
    cells = invariants.dispatch_cells(root)
    for _ in range(200):
        cell = rng.choice(cells)
        rows = list(iter_rows(sorted(cell.glob("*.log"))))
        step_peak: dict[int, int] = {}
        for r in rows:
            step_peak[r.iter] = max(step_peak.get(r.iter, 0), r.actual_valid_recv)
        groups: dict[tuple[int, int], list] = {}
        for r in rows:
            groups.setdefault((r.iter, r.layer), []).append(r)
        it, layer = rng.choice(sorted(groups))
        group = groups[(it, layer)]
        if len(group) < 2:
            continue
        a, b = rng.sample(group, 2)
        va, vb = field_of(Path(a.path), a.line_no, name), field_of(Path(b.path), b.line_no, name)
        top = min(step_peak[it], a.budget) - 1 if name == "actual_valid_recv" else va + vb
        if name == "actual_valid_recv" and (va >= step_peak[it] or vb >= top):
            continue                               # a's peak moves, or b has no room
        d = rng.randint(1, max(1, min(va, top - vb)))
        if d > va or vb + d > top:
            continue
        set_field(Path(a.path), a.line_no, name, va - d)
        set_field(Path(b.path), b.line_no, name, vb + d)
        invariants.restate_cell(root, f"cells/{cell.name}")
        return f"{cell.name} iter={it} layer={layer}: {name} {d} from rank {a.rank} to {b.rank}"
    return None


def edit_trace(root: Path, rng: random.Random) -> str:
    """One token of a recorded trace routed to another expert (ids stay distinct per token)."""
    trace = rng.choice(sorted(root.glob("cells/*/routing_trace.jsonl")))
    lines = trace.read_bytes().split(b"\n")
    header = json.loads(lines[0])
    at = rng.randrange(1, len([x for x in lines if x.strip()]))
    rec = json.loads(lines[at])
    tok = rng.randrange(len(rec["topk_ids"]))
    row = rec["topk_ids"][tok]
    row[rng.randrange(len(row))] = rng.choice([e for e in range(header["experts"])
                                               if e not in row])
    lines[at] = json.dumps(rec, separators=(",", ":")).encode()
    corpus.replace_file(trace, b"\n".join(lines))
    return f"{trace.parent.name}/{trace.name}:{at + 1} token {tok}"


def set_seed(root: Path, rng: random.Random) -> str:
    """A cell.json's recorded --seed changed (the claim that another routing ran)."""
    path = rng.choice(sorted(root.glob("cells/*__measure__*/cell.json")))
    doc = json.loads(path.read_text())
    at = doc["argv"].index("--seed") + 1
    doc["argv"][at] = str(int(doc["argv"][at]) + rng.randint(1, 999))
    corpus.replace_file(path, json.dumps(doc, indent=1).encode())
    return f"{path.parent.name}: --seed {doc['argv'][at]}"


def test_the_campaign_is_its_seeds_routing(campaign):
    u = audit(campaign)
    assert (u.verdict, u.why) == ("VALID", []), u.why
    c = check(u)
    assert c.state == "pass" and "recorded traces agree" in c.why[0], c
    assert not c.why[0].startswith("0 cells"), c


@pytest.mark.parametrize("name", ["actual_valid_recv", "pre_balance_recv"])
def test_slots_moved_between_ranks_consistently_are_caught(campaign, tmp_path, monkeypatch,
                                                           name):
    """The generator's forgeries keep every sum and table; each is INVALID naming the rule,
    and VALID with the rule disabled (no other rule sees them: the bug it guards)."""
    rng = random.Random(f"routing32-{name}")
    for n in range(VARIANTS):
        lie = corpus.link_copy(campaign, tmp_path / f"lie{n}")
        what = move_slots(lie, rng, name)
        assert what is not None
        u = audit(lie)
        assert u.verdict == "INVALID" and CODE in u.reasons, (what, u.why)
        assert any(f"field {name} " in w for w in check(u).why), (what, check(u).why)
        blind = audit(lie, monkeypatch, (CODE,))
        assert (blind.verdict, blind.why) == ("VALID", []), (what, blind.why)


def test_an_edited_trace_is_caught(campaign, tmp_path, monkeypatch):
    rng = random.Random(3232)
    for n in range(4):
        lie = corpus.link_copy(campaign, tmp_path / f"trace{n}")
        what = edit_trace(lie, rng)
        u = audit(lie)
        assert u.verdict == "INVALID" and CODE in u.reasons, (what, u.why)
        assert "routing_trace.jsonl" in " ".join(check(u).why), (what, check(u).why)
        blind = audit(lie, monkeypatch, (CODE,))
        assert (blind.verdict, blind.why) == ("VALID", []), (what, blind.why)


def test_another_recorded_seed_is_caught_by_name(campaign, tmp_path):
    lie = corpus.link_copy(campaign, tmp_path / "seed")
    what = set_seed(lie, random.Random(5))
    u = audit(lie)
    assert u.verdict == "INVALID" and CODE in u.reasons, (what, u.why)
    why = " ".join(check(u).why)
    assert "rank0.log:" in why and "the routing of its seed (--seed" in why, why


def test_what_cannot_be_regenerated_is_unknown_or_not_applicable(campaign, tmp_path,
                                                                 monkeypatch):
    """No argv, or flags this worker refuses: UNKNOWN naming the cell, never INVALID; a
    backend that cannot regenerate (the default contract) or the earlier layout: n/a."""
    for what, change in (("no argv", lambda d: d.pop("argv")),
                         ("unknown flag", lambda d: d["argv"].append("--routing-v0"))):
        lie = corpus.link_copy(campaign, tmp_path / what.replace(" ", "-"))
        path = sorted(lie.glob("cells/*__measure__*/cell.json"))[0]
        doc = json.loads(path.read_text())
        change(doc)
        corpus.replace_file(path, json.dumps(doc, indent=1).encode())
        c = check(audit(lie))
        assert c.state == "unknown" and path.parent.name in c.why[0], (what, c)
    from backends.reference.adapter import ReferenceBackend
    from harness.api.backend import Backend
    monkeypatch.setattr(ReferenceBackend, "expected_dispatch", Backend.expected_dispatch)
    u = audit(campaign)
    assert (u.verdict, u.why) == ("VALID", []) and check(u).state == "n/a", check(u)
    assert any(x.startswith(CODE) for x in u.rules_not_applicable), u.rules_not_applicable
    legacy = audit(corpus.write_legacy(tmp_path / "legacy"))
    assert check(legacy).state == "n/a", check(legacy)


def test_the_regeneration_is_the_workers_own_plan():
    """plans.layer_plan (what expected.py calls) gives the worker's Plan for every
    personality: dispatch._clipped_plan (no rebalancing) and plan_from_counts."""
    import torch

    from backends.reference import dispatch
    from backends.reference.personalities import personality
    from backends.reference.plans import layer_plan, row_fields
    from harness.loadmodel.planners import planner_options
    from harness.loadmodel.workloads import layer_counts
    empty = torch.empty(0, dtype=torch.int64)
    for name in ("raw", "echo", "ultraep", "moonep", "deepep"):
        p = personality(name)
        options = planner_options(p.planner, None)
        for step, budget in ((0, 300), (1, 520), (2, 4096)):
            counts = layer_counts("lognormal", 7, "M", 1, step, 4, 128, 32, 4, 1.5)
            lp = layer_plan(counts, budget, p.planner, options)
            t = torch.from_numpy(counts)
            for me in range(4):
                plan = (dispatch.plan_from_counts(empty, empty, t, me, budget, p.planner,
                                                  options) if p.rebalances else
                        dispatch._clipped_plan(empty, empty, t, me, budget))
                fields = row_fields(lp, me, budget, p.rebalances)
                assert fields["actual_valid_recv"] == min(plan.demand, budget), (name, me)
                assert fields["pre_balance_recv"] == plan.pre_balance, (name, me)
                assert np.array_equal(plan.recv_keep.numpy(), lp.keep[:, me, :]), (name, me)
                if p.rebalances:
                    hosted = (plan.recv_keep.sum(0) > 0).nonzero().flatten() // 8
                    assert fields["redundant_experts"] == int((hosted != me).sum())


def test_big_cells_are_checked_on_a_sample_of_the_audits_seed():
    """A big cell's sample: the audit's seed and the cell's name decide it (the same seed,
    the same sample; another seed, another), the always-sampled groups are in it, and it
    is MAX_GROUPS groups; a small cell is checked whole (test_audit_sample.py forges)."""
    from harness.audit.rules.routing import MAX_GROUPS, sample
    iters, layers, name = tuple(range(65)), tuple(range(94)), "M__echo__measure__cap2p00__a1"
    always = {(64, 93), (0, 0), (7, 11)}
    got = sample(5, name, iters, layers, always)
    assert got == sample(5, name, iters, layers, always) and len(got) == MAX_GROUPS, got
    assert always <= set(got) and got == tuple(sorted(set(got))), got
    assert got != sample(6, name, iters, layers, always)
    assert sample(5, name, iters, layers) != sample(5, name + "x", iters, layers)
    assert len({sample(s, name, iters, layers)[0] for s in range(50)}) > 10
    many = {(i, 0) for i in range(65)} | {(0, layer) for layer in range(94)}
    assert set(sample(5, name, iters, layers, many)) == many    # all kept, none drawn
    assert sample(1, "x", (0, 1, 2), (0, 1)) == ((0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1))


def test_the_always_sampled_groups_are_found_in_any_field_order(tmp_path):
    """Each rank's top row and every saturated row, wherever a forger writes them: another
    field order, a prefix, leading zeros (ties of a top kept)."""
    from harness.audit.rules.routing import always_sampled, rank_tops
    tag = "[MOE_DROP_DEBUG][dispatch]"
    rows = [f"{tag} iter={i} layer={layer} rank={r} expected_recv=100 "
            f"actual_valid_recv={100 + i + layer + r} budget=200"
            for i in range(5) for layer in range(5) for r in range(2)]
    rows.append(f"[rank1]: {tag} rank=1 actual_valid_recv=00150 iter=2 layer=3 "
                f"expected_recv=100 budget=200")
    rows.append(f"{tag} budget=120 actual_valid_recv=120 rank=0 layer=0 iter=4 "
                f"expected_recv=100")
    rows.append(f"{tag} iter=1 layer=1 rank=1 expected_recv=100 actual_valid_recv=150 "
                f"budget=200")
    log = tmp_path / "node0.log"
    log.write_text("\n".join(rows) + "\n")
    assert rank_tops([log]) == {0: 120, 1: 150}
    assert always_sampled([log], [200, 120]) == {(2, 3), (4, 0), (1, 1)}
    assert always_sampled([log], []) == {(2, 3), (4, 0), (1, 1)}


def test_the_forked_workers_give_the_serial_checks(campaign, tmp_path, monkeypatch):
    """routing-not-from-seed and not-rederived on the audit's forked workers (audit.workers,
    forced here by a 0-byte threshold) give every check the serial audit gives, word for
    word, on the campaign, moved slots and an edited trace; the workers did the work.
    Catches a worker's answer dropped or folded out of cell order (mutant tried by hand:
    _cell_job returning no contradictions -> fails on the moved slots)."""
    from harness.audit import audit_target, workers
    from harness.audit.rules import rederive
    rng = random.Random(6464)
    uploads = [campaign]
    for n, forge in enumerate((lambda r: move_slots(r, rng, "actual_valid_recv"),
                               lambda r: edit_trace(r, rng))):
        uploads.append(corpus.link_copy(campaign, tmp_path / f"forged{n}"))
        assert forge(uploads[-1]) is not None

    def checks(root):
        (u,) = audit_target(root, sample_seed=1234).uploads
        return u.verdict, [(c.code, c.state, c.why) for c in u.checks], u.why, u.unknown
    serial = [checks(root) for root in uploads]
    jobs: list[str] = []
    real_submit = workers.submit
    monkeypatch.setattr(workers, "submit",
                        lambda up, fn, *a: jobs.append(fn.__name__) or real_submit(up, fn, *a))
    monkeypatch.setattr(rederive, "PARALLEL_BYTES", 0)
    assert [checks(root) for root in uploads] == serial
    assert {"_cell_job", "_derive_key"} <= set(jobs)
    assert [s[0] for s in serial] == ["VALID", "INVALID", "INVALID"]

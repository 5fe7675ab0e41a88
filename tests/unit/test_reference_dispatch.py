"""Reference dispatch: drop policy, rebalanced plans, and the combine check (1-rank gloo)."""

from __future__ import annotations

import socket

import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.reference.dispatch import (
    Buffers,
    Plan,
    _move,
    check_combine,
    clip_all,
    clip_to_budget,
    combine,
    dispatch,
    dispatch_clipped,
    expert_transform,
    kept_send_slots,
    plan_balanced,
    plan_clipped,
    plan_from_counts,
    reference_output,
    slot_dest,
)
from backends.reference.routing import route
from harness.loadmodel.planners import home_ranks, plan, source_split


def test_clip_keeps_source_order_then_expert_order():
    inc = torch.tensor([[3, 2], [4, 1]])
    assert clip_to_budget(inc, 5).tolist() == [[3, 2], [0, 0]]
    assert clip_to_budget(inc, 6).tolist() == [[3, 2], [1, 0]]
    assert clip_to_budget(inc, 4).tolist() == [[3, 1], [0, 0]]


def test_clip_exact_boundary():
    inc = torch.tensor([[3, 2], [4, 1]])
    assert clip_to_budget(inc, 10).tolist() == inc.tolist()      # demand == budget: no drop
    assert int(clip_to_budget(inc, 9).sum()) == 9                # one over: exactly one drop
    assert clip_to_budget(inc, 9)[1, 1] == 0                      # the last slot is the one
    assert int(clip_to_budget(inc, 0).sum()) == 0


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.integers(0, 60), st.randoms())
def test_clip_all_is_clip_to_budget_per_destination(ep, per_rank, budget, rnd):
    counts = torch.tensor([[rnd.randrange(0, 20) for _ in range(ep * per_rank)]
                           for _ in range(ep)])
    keep = clip_all(counts, budget)
    for d in range(ep):
        cols = slice(d * per_rank, (d + 1) * per_rank)
        assert torch.equal(keep[:, cols], clip_to_budget(counts[:, cols], budget))


def _counts(draw, ep, per_rank, n):
    """Each source rank sends exactly n slots over ep*per_rank experts."""
    experts = ep * per_rank
    rows = []
    for _ in range(ep):
        cuts = sorted(draw(st.lists(st.integers(0, n), min_size=experts - 1,
                                    max_size=experts - 1)))
        edges = [0, *cuts, n]
        rows.append([edges[i + 1] - edges[i] for i in range(experts)])
    return torch.tensor(rows, dtype=torch.int64)


@st.composite
def count_matrices(draw):
    ep, per_rank, n = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 40))
    return _counts(draw, ep, per_rank, n), n


def _moonep_split(counts: torch.Tensor) -> torch.Tensor:
    ep, experts = counts.shape
    quotas = plan("moonep", counts.sum(0).numpy(), home_ranks(experts, ep), ep)
    return torch.from_numpy(source_split(counts.numpy(), quotas)), torch.from_numpy(quotas)


@settings(max_examples=150, deadline=None)
@given(count_matrices(), st.sampled_from(["moonep", "echo", "ultraep", "raw"]))
def test_rebalanced_split_conserves_and_matches_slot_view(case, personality):
    counts, n = case
    ep, experts = counts.shape
    quotas = torch.from_numpy(plan(personality, counts.sum(0).numpy(),
                                   home_ranks(experts, ep), ep))
    split = torch.from_numpy(source_split(counts.numpy(), quotas.numpy()))
    assert bool((split >= 0).all())
    assert torch.equal(split.sum(1), counts)                       # every slot placed once
    assert torch.equal(split.sum(0).t(), quotas)                   # per expert and rank
    for me in range(ep):                                          # per-slot view == split
        ids = torch.repeat_interleave(torch.arange(experts), counts[me])
        dest = slot_dest(ids, counts, quotas, me)
        got = torch.zeros(ep, experts, dtype=torch.int64)
        got.index_put_((dest, ids), torch.ones_like(ids), accumulate=True)
        assert torch.equal(got, split[me])
    if personality == "moonep":
        assert split.sum(dim=(0, 2)).tolist() == [n] * ep          # every rank gets exactly N
        per_rank = experts // ep
        load = counts.sum(0).reshape(ep, per_rank).sum(1)
        for d in range(ep):                                       # home slots stay home first
            home = split[:, d, d * per_rank:(d + 1) * per_rank].sum()
            assert int(home) == min(int(load[d]), n)


def test_home_only_placement_is_not_balanced():
    """The balance property fails for a plan without replicas (guards the test itself)."""
    counts = torch.tensor([[4, 0], [4, 0]])                        # all slots to rank 0
    home_only = torch.zeros(2, 2, 2, dtype=torch.int64)
    home_only[:, 0, 0] = 4
    assert home_only.sum(dim=(0, 2)).tolist() != [4, 4]
    split, _ = _moonep_split(counts)
    assert split.sum(dim=(0, 2)).tolist() == [4, 4]
    assert split[:, 1, 0].sum() == 4                               # replica of expert 0


def test_plan_from_counts_clips_each_receiver_and_reports_pre_balance():
    counts = torch.tensor([[6, 0, 1, 1], [6, 0, 1, 1]])            # rank 0 home load 12 of 16
    ids = torch.repeat_interleave(torch.arange(4), counts[1])
    order = torch.arange(ids.numel())
    p = plan_from_counts(order, ids, counts, 1, 5, "moonep")
    assert p.pre_balance == 4 and p.demand == 8                    # rank 1: 4 home, 8 balanced
    assert int(p.recv_keep.sum()) == 5                             # clipped to the budget


def test_kept_send_slots_takes_first_slots_per_destination_and_expert():
    # 3 tokens x top-2, experts 0..3 on 2 ranks; (expert, token) order of flat slots:
    ids = torch.tensor([[0, 2], [0, 3], [2, 1]])
    order = torch.sort(ids.flatten(), stable=True).indices
    sorted_ids = ids.flatten()[order]
    keep = torch.zeros(2, 4, dtype=torch.int64)
    keep[0, 0], keep[0, 1], keep[1, 2], keep[1, 3] = 1, 1, 1, 1   # drop 2nd of expert 0 and 2
    plan = Plan(order, sorted_ids, sorted_ids // 2, keep, keep, 6)
    slots, mask = kept_send_slots(plan, 4)
    assert slots.tolist() == [0, 5, 1, 3]     # tok0/e0, tok2/e1 | tok0/e2, tok1/e3
    assert mask.tolist() == [True, True, False, True, False, True]


@pytest.fixture(scope="module")
def one_rank_group():
    """A real 1-rank gloo group (multi-rank runs are in tests/e2e)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                                world_size=1)
    yield
    if owned:
        dist.destroy_process_group()


def _run(budget, balanced=False, experts=8, tokens=32, topk=2):
    r = route(3, "M", 0, 0, 0, tokens, experts, topk, 1.5)
    x = torch.randn(tokens, 16, generator=torch.Generator().manual_seed(0)).bfloat16()
    planner = plan_balanced if balanced else plan_clipped
    plan = planner(r.ids, experts, 1, 0, budget)
    d = dispatch(x, topk, plan, experts)
    y = expert_transform(d, experts)
    return r, x, plan, d, y, combine(y, d, r.weights, tokens)


def test_combine_matches_reference_with_drops(one_rank_group):
    r, x, plan, d, y, out = _run(budget=40)
    assert plan.demand == 64 and d.recv.shape[0] == 40 and int(d.kept_mask.sum()) == 40
    check_combine(out, reference_output(x, r.ids, r.weights, d.kept_mask, 8), "test")
    everything = torch.ones_like(d.kept_mask)
    with pytest.raises(AssertionError, match="combine mismatch"):   # dropped slots count
        check_combine(out, reference_output(x, r.ids, r.weights, everything, 8), "test")


def test_combine_check_catches_a_wrong_expert(one_rank_group):
    r, x, plan, d, y, out = _run(budget=64)
    d.recv_expert = (d.recv_expert + 1) % 8                         # rows sent to a wrong expert
    bad = combine(expert_transform(d, 8), d, r.weights, 32)
    with pytest.raises(AssertionError, match="combine mismatch"):
        check_combine(bad, reference_output(x, r.ids, r.weights, d.kept_mask, 8), "test")


def test_kept_slots_are_the_first_in_expert_then_token_order(one_rank_group):
    r, x, plan, d, y, out = _run(budget=40)
    flat = r.ids.flatten()
    order = sorted(range(64), key=lambda i: (int(flat[i]), i))
    assert sorted(d.send_slots.tolist()) == sorted(order[:40])


def test_balanced_single_rank_gets_n(one_rank_group):
    r, x, plan, d, y, out = _run(budget=128, balanced=True)
    assert d.recv.shape[0] == 64
    check_combine(out, reference_output(x, r.ids, r.weights, d.kept_mask, 8), "test")


def _same_dispatch(a, b) -> None:
    """Two Dispatched results are equal bit for bit (rows, order, splits, masks)."""
    assert torch.equal(a.recv.view(torch.int16), b.recv.view(torch.int16))
    assert torch.equal(a.recv_expert, b.recv_expert)
    assert torch.equal(a.send_slots, b.send_slots) and torch.equal(a.kept_mask, b.kept_mask)
    assert a.send_split == b.send_split and a.recv_split == b.recv_split


@pytest.mark.parametrize("budget", [64, 40, 1, 0])
def test_dispatch_clipped_equals_plan_then_dispatch(one_rank_group, budget):
    """The overlapped path (counts in flight while packing) == plan_clipped + dispatch."""
    r = route(3, "M", 0, 0, 0, 32, 8, 2, 1.5)
    x = torch.randn(32, 16, generator=torch.Generator().manual_seed(0)).bfloat16()
    want = dispatch(x, 2, plan_clipped(r.ids, 8, 1, 0, budget), 8)
    for bufs in (None, Buffers.allocate(x, 2, 64)):
        plan, got = dispatch_clipped(x, r.ids, 2, 8, 1, 0, budget, bufs=bufs)
        assert plan.demand == 64
        _same_dispatch(got, want)


def test_packed_rows_are_regathered_when_slots_drop(one_rank_group):
    """A drop inside a (destination, expert) run makes the packed rows wrong: regather them."""
    ids = torch.tensor([[0, 2], [0, 3], [2, 1]])
    order = torch.sort(ids.flatten(), stable=True).indices
    sorted_ids = ids.flatten()[order]
    keep = torch.tensor([[1, 1, 1, 1]])                # 2nd slot of expert 0 dropped
    plan = Plan(order, sorted_ids, sorted_ids * 0, keep, keep, 6)
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1)).bfloat16()
    bufs = Buffers.allocate(x, 2, 6)
    bufs.send.copy_(x[order // 2])                     # what dispatch_clipped packs first
    d = _move(x, 2, plan, 4, None, bufs, packed=True)
    assert torch.equal(d.recv, x[d.send_slots // 2])
    assert not torch.equal(x[order // 2][:4], d.recv)  # skipping the regather would be wrong

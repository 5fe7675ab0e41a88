"""Load planners (harness/loadmodel/planners.py): invariants over random counts (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from harness.loadmodel import planners as P

SLOT_LIMIT = {"raw": lambda E, ep, o: 0,
              "echo": lambda E, ep, o: (o.get("moe_num_echo_experts") or ep) // ep,
              "ultraep": lambda E, ep, o: o.get("redundant_per_rank", 2),
              "moonep": lambda E, ep, o: E - E // ep}   # unbounded pool (docs)


@st.composite
def layers(draw, max_ep=8):
    """(counts (E,), home (E,), ep): per-rank loads summing to ep * n, random placement."""
    ep = draw(st.integers(1, max_ep))
    per_rank = draw(st.integers(1, 6))
    experts = ep * per_rank
    n = draw(st.integers(1, 3000))
    pop = np.array(draw(st.lists(st.floats(0.0, 10.0), min_size=experts, max_size=experts)))
    pop = pop + 1e-3
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    counts = rng.multinomial(ep * n, pop / pop.sum()).astype(np.int64)
    placement = draw(st.sampled_from(["contiguous", "round-robin", "shuffled"]))
    if placement == "shuffled":
        home = rng.permutation(P.home_ranks(experts, ep))
    else:
        home = P.home_ranks(experts, ep, placement)
    return counts, home, ep


def _replicas_per_rank(q: np.ndarray, home: np.ndarray) -> np.ndarray:
    foreign = (q > 0) & (np.arange(q.shape[1])[None, :] != home[:, None])
    return foreign.sum(0)


@settings(max_examples=80, deadline=None)
@given(layers(), st.sampled_from(P.PERSONALITIES))
def test_conservation_and_every_slot_on_a_host(case, personality):
    counts, home, ep = case
    q = P.plan(personality, counts, home, ep)
    assert q.dtype == np.int64 and q.shape == (counts.size, ep)
    assert (q >= 0).all()
    assert np.array_equal(q.sum(1), counts)                        # each slot exactly once
    limit = SLOT_LIMIT[personality](counts.size, ep, {})
    assert (_replicas_per_rank(q, home) <= limit).all()            # replicas fit their slots
    assert np.array_equal(P.demand(q), q.sum(0))


@settings(max_examples=60, deadline=None)
@given(layers())
def test_moonep_gives_every_rank_exactly_the_mean(case):
    counts, home, ep = case
    assert (P.demand(P.plan("moonep", counts, home, ep)) == counts.sum() // ep).all()


def test_raw_is_home_placement():
    counts, home = np.array([5, 0, 7, 4]), P.home_ranks(4, 2)
    assert P.plan("raw", counts, home, 2).tolist() == [[5, 0], [0, 0], [0, 7], [0, 4]]


@st.composite
def ultraep_feasible(draw):
    """Layers where one expert per over-loaded rank can carry that rank's whole excess."""
    counts, home, ep = draw(layers())
    eps = draw(st.sampled_from([0.0, 0.01, 0.05]))
    mean = counts.sum() / ep
    t_fast = math.ceil(np.float32(math.ceil(np.float32(counts.sum()) / np.float32(ep)))
                       * (np.float32(1.0) + np.float32(eps)))
    load = np.bincount(home, weights=counts, minlength=ep)
    over = np.flatnonzero(load > t_fast)
    ok = all(counts[home == r].max() >= load[r] - t_fast + 1 for r in over)
    redundant = max(1, over.size)
    assume(ok and mean > 0)
    return counts, home, ep, eps, t_fast, redundant


@settings(max_examples=80, deadline=None)
@given(ultraep_feasible())
def test_ultraep_reaches_one_plus_eps_when_feasible(case):
    counts, home, ep, eps, t_fast, redundant = case
    q = P.plan("ultraep", counts, home, ep, {"eps": eps, "redundant_per_rank": redundant})
    assert P.demand(q).max() <= t_fast                             # max/mean <= 1 + eps (int)


def test_ultraep_guard_fails_on_a_planner_without_replicas():
    """The bound above is violated by a plan with no redundant slots (guards the test)."""
    counts, home = np.array([900, 300, 400, 400]), P.home_ranks(4, 2)
    assert P.demand(P.plan("ultraep", counts, home, 2, {"redundant_per_rank": 0})).max() > 1010
    assert P.demand(P.plan("ultraep", counts, home, 2)).max() <= 1010


@settings(max_examples=80, deadline=None)
@given(layers(), st.floats(0.0, 0.5))
def test_echo_within_threshold_when_spare_slots_suffice(case, threshold):
    counts, home, ep = case
    opts = {"moe_num_echo_experts": counts.size * ep, "threshold_multiplier": threshold}
    q = P.plan("echo", counts, home, ep, opts)                     # a spare slot per expert
    avg = counts.sum() // ep
    assert P.demand(q).max() <= avg * (1 + threshold) + 1e-9
    assert P.demand(q).max() <= counts.sum() / ep * (1 + threshold) + 1e-9


@settings(max_examples=80, deadline=None)
@given(layers())
def test_echo_bin_packing_uses_every_spare_slot_before_leaving_spill(case):
    counts, home, ep = case
    q = P.plan("echo", counts, home, ep)                           # one echo slot per rank
    load = np.bincount(home, weights=counts, minlength=ep)
    avg = counts.sum() // ep
    d = P.demand(q)
    under = load < avg
    assert (d[under] <= avg).all()                                 # receivers stay <= avg
    if d.max() > avg:
        assert (_replicas_per_rank(q, home)[under] == 1).all()


@settings(max_examples=60, deadline=None)
@given(layers(max_ep=4), st.sampled_from(P.PERSONALITIES), st.integers(1, 4))
def test_slot_destinations_follow_the_quotas_in_rank_order(case, personality, topk):
    counts, home, ep = case
    rng = np.random.default_rng(int(counts.sum()))
    ids = rng.permutation(np.repeat(np.arange(counts.size), counts))
    q = P.plan(personality, counts, home, ep)
    dest = P.slot_destinations(ids, q)
    got = np.zeros_like(q)
    np.add.at(got, (ids, dest), 1)
    assert np.array_equal(got, q)
    for e in range(counts.size):                                   # ascending rank order
        assert (np.diff(dest[ids == e]) >= 0).all()


def test_slot_destinations_rejects_quotas_that_do_not_conserve():
    with pytest.raises(ValueError, match="conserve"):
        P.slot_destinations(np.array([0, 0, 1]), np.array([[1, 0], [0, 1]]))


def test_home_ranks_and_option_errors():
    assert P.home_ranks(8, 4).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert P.home_ranks(8, 4, "round-robin").tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    assert P.home_ranks(4, 2, [1, 1, 0, 0]).tolist() == [1, 1, 0, 0]
    for bad in ((6, 4, "contiguous"), (4, 2, "diagonal"), (4, 2, [0, 1, 2, 0])):
        with pytest.raises(ValueError):
            P.home_ranks(*bad)
    with pytest.raises(ValueError, match="no option"):
        P.plan("echo", np.array([1, 1]), np.array([0, 1]), 2, {"eps": 0.1})
    with pytest.raises(ValueError, match="expected"):
        P.planner_options("ultraep", {"eps": "small"})
    with pytest.raises(ValueError, match="divisible"):
        P.plan("echo", np.array([4, 0]), np.array([0, 1]), 2, {"moe_num_echo_experts": 3})

"""Reference backend routing: determinism, distinct top-k, router dtype, skew (traces: test_reference_traces.py)."""

from __future__ import annotations

import pytest
import torch

from backends.reference.routing import (
    demand_per_rank,
    destination_counts,
    expert_popularity,
    route,
)

ARGS = dict(seed=7, model="M", layer=2, iteration=1, rank=0, tokens=64, experts=16, topk=4,
            sigma=1.0)


def test_route_is_deterministic_and_seeded():
    a, b = route(**ARGS), route(**ARGS)
    assert torch.equal(a.ids, b.ids) and torch.equal(a.weights, b.weights)
    for key, val in (("rank", 1), ("iteration", 2), ("layer", 3), ("seed", 8), ("model", "N")):
        assert not torch.equal(route(**{**ARGS, key: val}).ids, a.ids), key


def test_each_token_picks_distinct_experts_in_range():
    r = route(**{**ARGS, "tokens": 500, "sigma": 3.0})
    assert r.ids.shape == (500, 4)
    srt = torch.sort(r.ids, dim=1).values
    assert bool((srt[:, 1:] != srt[:, :-1]).all())
    assert int(r.ids.min()) >= 0 and int(r.ids.max()) < 16


@pytest.mark.parametrize("name,dtype", [("fp32", torch.float32), ("bf16", torch.bfloat16)])
def test_router_weights_use_router_dtype_and_sum_to_one(name, dtype):
    r = route(**ARGS, router_dtype=name)
    assert r.weights.dtype == dtype
    assert torch.allclose(r.weights.float().sum(1), torch.ones(64), atol=1e-2)


def test_routing_ids_do_not_depend_on_router_dtype():
    assert torch.equal(route(**ARGS, router_dtype="bf16").ids, route(**ARGS).ids)


def test_sigma_sets_imbalance():
    def top_share(sigma):
        ids = route(**{**ARGS, "tokens": 2000, "sigma": sigma}).ids
        return float(torch.bincount(ids.flatten(), minlength=16).max()) / ids.numel()
    assert top_share(2.0) > top_share(0.5) > top_share(0.0) - 1e-9
    assert torch.allclose(expert_popularity(1, "M", 0, 8, 0.0), torch.full((8,), 1 / 8,
                                                                         dtype=torch.float64))


def test_destination_counts_contiguous_placement():
    ids = torch.tensor([[0, 5], [7, 2], [3, 4]])
    assert destination_counts(ids, experts=8, ep=2).tolist() == [3, 3]
    assert destination_counts(ids, experts=8, ep=4).tolist() == [1, 2, 2, 1]
    assert demand_per_rank([ids, ids], 8, 4).tolist() == [2, 4, 4, 2]

"""Named routing workloads (harness/loadmodel/workloads.py) and the emulated load story."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.loadmodel import planners as P
from harness.loadmodel import workloads as W
from harness.loadmodel.loadsim import requirements

ROOT = Path(__file__).resolve().parents[2]
ARGS = dict(seed=5, model="M", layer=2, step=3, tokens=256, experts=32, topk=4, sigma=0.5)


@pytest.mark.parametrize("name", W.WORKLOADS)
def test_counts_are_deterministic_exact_and_rank_seeded(name):
    a = W.rank_counts(name, rank=0, **ARGS)
    assert np.array_equal(a, W.rank_counts(name, rank=0, **ARGS))
    assert a.sum() == 256 * 4 and a.max() <= 256 and a.dtype == np.int64
    table = W.layer_counts(name, ranks=3, **ARGS)
    assert all(np.array_equal(table[r], W.rank_counts(name, rank=r, **ARGS)) for r in range(3))
    ids = W.route_ids(name, rank=1, **ARGS)
    assert ids.shape == (256, 4)
    assert (np.sort(ids, 1)[:, 1:] != np.sort(ids, 1)[:, :-1]).all()   # distinct per token
    assert np.array_equal(np.bincount(ids.ravel(), minlength=32), table[1])
    held = W.layer_counts(name, ranks=2, **{**ARGS, "seed": 9}, popularity_seed=5)
    assert all(np.array_equal(held[r], W.rank_counts(name, rank=r, **{**ARGS, "seed": 9},
                                                      popularity_seed=5)) for r in range(2))


def test_the_same_logical_workload_at_any_ep_size():
    """Rank r's counts do not depend on how many ranks there are (only on the workload)."""
    small = W.layer_counts("hot_rank", ranks=2, **ARGS)
    large = W.layer_counts("hot_rank", ranks=8, **ARGS)
    assert np.array_equal(small, large[:2])


def test_workload_shapes():
    def pop(name, step=0, **kw):
        return W.popularity({"workload": name, **kw}, 1, "M", 0, step, 64)
    assert np.allclose(pop("balanced"), 1 / 64)
    assert np.isclose(pop("hot_rank")[:4].sum(), 0.5)                # E/16 = 4 hot experts
    spread = np.flatnonzero(pop("spread_hot_experts") > 1 / 64)
    assert spread.tolist() == [0, 16, 32, 48]
    hot = lambda s: set(np.flatnonzero(pop("rotating_hotspot", s) > 1 / 64))  # noqa: E731
    assert hot(0) == hot(2) != hot(3)                                # moves every 3 steps
    burst = [bool((pop("burst", s) > 1 / 64).any()) for s in range(8)]
    assert burst == [False, False, False, True] * 2                  # 3 steady, 1 burst
    assert np.isclose(pop("hot_expert_set", hot_experts=8, hot_share=0.75).max(), 0.75 / 8)
    counts = W.rank_counts("balanced", 0, "M", 0, 0, 0, 100, 64, 4)
    assert counts.max() - counts.min() <= 1                          # exact round robin


def test_hot_rank_and_spread_differ_only_in_placement():
    home = P.home_ranks(64, 4)
    def imbalance(name):
        c = W.layer_counts(name, 1, "M", 0, 0, 4, 512, 64, 4).sum(0)
        load = np.bincount(home, weights=c, minlength=4)
        return load.max() / load.mean(), np.sort(c)[-4:].sum()
    (rank_hot, heat_a), (spread_hot, heat_b) = imbalance("hot_rank"), imbalance("spread_hot_experts")
    assert rank_hot > 1.5 > 1.1 > spread_hot
    assert abs(heat_a - heat_b) / heat_a < 0.1                       # comparable expert heat


@pytest.mark.parametrize("bad,where", [({"workload": "zipf"}, "workload"),
                                       ({"hot_share": 1.5}, "hot_share"),
                                       ({"period": 0}, "period"), ({"sigma": "x"}, "sigma"),
                                       ({"hot": 3}, "unknown key")])
def test_bad_workload_specs(bad, where):
    with pytest.raises(ValueError, match=where):
        W.workload_spec(bad)


def test_slot_probabilities_cap_at_one_pick_per_token():
    p = W.slot_probabilities(np.array([0.9, 0.05, 0.03, 0.02]), 2)
    assert np.isclose(p.sum(), 1) and np.isclose(p[0], 0.5)         # pi = 1 for the hot one


def test_default_campaign_shape_orders_raw_echo_ultraep():
    """At runbooks/local-cpu.yaml's shape and seed, the measured requirement (the planners on
    the worker's own routing counts, tests/e2e checks they agree row for row) is raw > echo >
    ultraep > moonep = 1 for every model: what the default campaign must show."""
    import yaml
    zoo = yaml.safe_load((ROOT / "runbooks" / "models.yaml").read_text())["models"]
    book = yaml.safe_load((ROOT / "runbooks" / "local-cpu.yaml").read_text())
    shape = book["shape"]
    for entry in book["models"]:
        m = {**zoo[entry["name"]], **entry}
        first = m.get("first_dense_layers", 0)
        r = requirements(m["name"], m["experts"], m["topk"], range(first, m["layers"]),
                         shape["seq"], shape["ep"], book["measure"]["iters"],
                         m["routing_sigma"], book["seed"])
        req = {p: r.required(p) for p in r.peak}
        assert req["raw"] > req["echo"] > req["ultraep"] > req["moonep"] == 1.0, (m["name"], req)

"""Reference memory model: formula, personality differences, OOM message and boundary."""

from __future__ import annotations

import re
from types import SimpleNamespace

from backends.reference import estimate_memory_bytes
from harness.api.backend import DEFAULT_FAILURE_PATTERNS
from harness.loadmodel.memory import COMPONENTS, format_size, oom_message

MODEL = SimpleNamespace(layers=4, first_dense_layers=1, hidden=64, experts=16, topk=4,
                        expert_ffn=32, shared_ffn=16)
SHAPE = SimpleNamespace(seq=128, micro_batch=1)


def test_components_follow_the_documented_formula():
    est = estimate_memory_bytes(MODEL, SHAPE, "1.25", "echo", ep=4)
    n, slots = 128 * 4, int(1.25 * 512)
    assert est["expert_weights"] == 3 * 4 * 3 * 64 * 32 * 2
    assert est["shared_weights"] == 3 * 3 * 64 * 16 * 2
    assert est["redundant_pool"] == 0
    assert est["buffers"] == 2 * slots * 64 * 2 + 2 * n * 64 * 2
    assert est["activations"] == 3 * (2 * 128 * 64 * 2 + 2 * slots * 32 * 2)
    assert est["total"] == sum(est[c] for c in COMPONENTS)


def test_moonep_adds_the_pool_and_uses_n_slot_buffers():
    echo = estimate_memory_bytes(MODEL, SHAPE, "1.25", "echo", ep=4)
    moon = estimate_memory_bytes(MODEL, SHAPE, "1.25", "moonep", ep=4)
    assert moon["redundant_pool"] == moon["expert_weights"] > 0
    assert moon["slots"] == 512 and echo["slots"] == 640
    assert moon["total"] > echo["total"]


def test_fit_boundary_and_oom_message():
    moon = estimate_memory_bytes(MODEL, SHAPE, "1.25", "moonep", ep=4)
    echo = estimate_memory_bytes(MODEL, SHAPE, "1.25", "echo", ep=4)
    assert oom_message(moon, moon["total"]) is None                 # exactly fits
    msg = oom_message(moon, moon["total"] - 1)
    assert msg is not None and oom_message(echo, moon["total"] - 1) is None
    assert msg.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ")
    assert "failed component: activations" in msg
    assert any(re.search(p, msg) for p in DEFAULT_FAILURE_PATTERNS["does_not_fit"])
    assert not any(re.search(p, msg) for p in DEFAULT_FAILURE_PATTERNS["assert"])


def test_oom_names_first_component_that_crosses():
    est = estimate_memory_bytes(MODEL, SHAPE, "1.25", "moonep", ep=4)
    msg = oom_message(est, est["expert_weights"] + 1)
    assert "failed component: shared_weights" in msg
    assert f"Tried to allocate {format_size(est['shared_weights'])}" in msg


def test_format_size():
    assert format_size(3 * (1 << 30)) == "3.00 GiB"
    assert format_size(1536 * 1024) == "1.50 MiB"
    assert format_size(100) == "100 bytes"

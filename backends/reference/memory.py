"""Device-memory model of one EP rank (pure arithmetic, no torch), and the OOM message.

Per rank, with b = 2 bytes (bf16), L = MoE layers, El = ceil(E / ep) experts per rank,
S = seq x micro_batch, N = S x K, B = int(capacity x N):

    expert_weights = L x El x 3 x hidden x expert_ffn x b        (gate, up, down)
    shared_weights = L x 3 x hidden x shared_ffn x b
    redundant_pool = L x El x 3 x hidden x expert_ffn x b        (moonep only: replica slots)
    buffers        = 2 x slots x hidden x b + 2 x N x hidden x b (recv+combine, send+return)
    activations    = L x (2 x S x hidden x b + 2 x slots x expert_ffn x b)
    slots          = N for moonep (exact-N buffers), B for echo and ultraep
    total          = sum of the above; fits when total <= device_memory_bytes

Components are "allocated" in that order; the first one that crosses the device memory is
the allocation the OOM message says it tried.
"""

from __future__ import annotations

import math

BYTES_PER_ELEMENT = 2
COMPONENTS = ("expert_weights", "shared_weights", "redundant_pool", "buffers", "activations")
FORMULA = ("expert_weights=L*El*3*hidden*expert_ffn*2; shared_weights=L*3*hidden*shared_ffn*2; "
           "redundant_pool=(moonep) L*El*3*hidden*expert_ffn*2; "
           "buffers=2*slots*hidden*2+2*N*hidden*2; activations=L*(2*S*hidden*2+2*slots*expert_ffn*2); "
           "slots=N (moonep) or int(capacity*N)")


def estimate_memory_bytes(model, shape, capacity: str | float, personality: str, ep: int) -> dict:
    """Modelled bytes per rank by component, plus total, slots and the formula.

    `model` needs layers, hidden, experts, topk, expert_ffn (shared_ffn, first_dense_layers
    optional); `shape` needs seq and micro_batch (ModelSpec / Shape fit).
    """
    b = BYTES_PER_ELEMENT
    layers = model.layers - getattr(model, "first_dense_layers", 0)
    per_rank = math.ceil(model.experts / ep)
    s = shape.seq * shape.micro_batch
    n = s * model.topk
    budget = int(float(capacity) * n)
    slots = n if personality == "moonep" else budget
    expert = layers * per_rank * 3 * model.hidden * model.expert_ffn * b
    est = {
        "expert_weights": expert,
        "shared_weights": layers * 3 * model.hidden * getattr(model, "shared_ffn", 0) * b,
        "redundant_pool": expert if personality == "moonep" else 0,
        "buffers": 2 * slots * model.hidden * b + 2 * n * model.hidden * b,
        "activations": layers * (2 * s * model.hidden * b + 2 * slots * model.expert_ffn * b),
    }
    est["total"] = sum(est[c] for c in COMPONENTS)
    est.update(slots=slots, uniform_tokens=n, budget=budget, formula=FORMULA)
    return est


def format_size(nbytes: float) -> str:
    """Bytes as torch's allocator prints them (GiB / MiB / KiB / bytes)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{int(nbytes)} bytes"


def oom_message(est: dict, device_memory_bytes: int) -> str | None:
    """The CUDA-style out-of-memory message when the model does not fit, else None."""
    if est["total"] <= device_memory_bytes:
        return None
    used = 0
    for comp in COMPONENTS:
        if used + est[comp] > device_memory_bytes:
            free = max(device_memory_bytes - used, 0)
            return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                    f"{format_size(est[comp])}. GPU 0 has a total capacity of "
                    f"{format_size(device_memory_bytes)} of which {format_size(free)} is free. "
                    f"Of the allocated memory {format_size(used)} is allocated by the reference "
                    f"memory model (failed component: {comp}; modelled total "
                    f"{format_size(est['total'])}; not a real CUDA allocation)")
        used += est[comp]
    return None

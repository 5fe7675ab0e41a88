"""Device-memory model of one EP rank (pure arithmetic, no torch), and the OOM message.

Per rank, with w = bytes per weight (precision), a = 2 (bf16 activations), L = MoE layers,
El = ceil(E / ep), P = 3 x hidden x expert_ffn (gate, up, down), S = seq x micro_batch,
N = S x K, B = int(capacity x N); every term and its source in docs/reference-backend.md:

    expert_weights = L x El x P x w
    shared_weights = L x 3 x hidden x shared_ffn x w
    dense_weights  = (options.dense) attention + dense FFN + embeddings, else 0
    replica_slots  = echo: L x (moe_num_echo_experts / ep) x P x w; ultraep: R x P x w
                     (cross-layer reuse); 0 otherwise
    redundant_pool = moonep: pool_fraction x El x P x w x (L if pool_per_layer else 1)
    gradients      = (optimizer adam) 4 bytes per trainable weight (fp32 main grads)
    optimizer      = (optimizer adam) 12 bytes per trainable weight / optimizer_shards
    buffers        = 2 x slots x hidden x a + 2 x N x hidden x a    (recv+combine, send+return)
    activations    = L x (2 x S x hidden x a + 2 x slots x expert_ffn x a); with
                     recompute full: L x S x hidden x a + one layer's working set
    slots          = N for moonep (exact-N buffers), B otherwise
    total          = sum of the above; fits when total <= device_memory_bytes

With the default options (bf16, optimizer none, recompute none, MoonEP pool per layer,
dense off) this is the dispatch-benchmark profile the earlier releases used. Components are
"allocated" in that order; the first one that crosses the device memory is the allocation
the OOM message says it tried.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

BYTES_PER_ELEMENT = 2
PRECISION_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": 4}
COMPONENTS = ("expert_weights", "shared_weights", "dense_weights", "replica_slots",
              "redundant_pool", "gradients", "optimizer", "buffers", "activations")
MEMORY_DEFAULTS: dict[str, object] = {
    "precision": "bf16", "optimizer": "none", "optimizer_shards": 1, "recompute": "none",
    "moonep_pool_fraction": 1.0, "moonep_pool_per_layer": True, "dense": False,
    "echo_slots_per_rank": 1, "ultraep_redundant_per_rank": 2,
}
_CHOICES = {"precision": tuple(PRECISION_BYTES), "optimizer": ("none", "adam"),
            "recompute": ("none", "full")}
FORMULA = ("expert_weights=L*El*P*w; shared_weights=L*3*hidden*shared_ffn*w; "
           "replica_slots=echo L*slots*P*w | ultraep R*P*w; "
           "redundant_pool=(moonep) fraction*El*P*w*(L|1); gradients=4/param (adam); "
           "optimizer=12/param/shards (adam); buffers=2*slots*hidden*2+2*N*hidden*2; "
           "activations=L*(2*S*hidden*2+2*slots*expert_ffn*2) (recompute none); "
           "P=3*hidden*expert_ffn; slots=N (moonep) or int(capacity*N)")


def memory_options(options: Mapping | None = None) -> dict[str, object]:
    """The memory model's options: defaults overlaid with `options` (checked)."""
    out = dict(MEMORY_DEFAULTS)
    for key, val in (options or {}).items():
        if key not in out:
            raise ValueError(f"memory option {key!r} unknown; known: {sorted(out)}")
        want = type(MEMORY_DEFAULTS[key])
        if want is float and isinstance(val, int) and not isinstance(val, bool):
            val = float(val)
        if not isinstance(val, want) or (want is int and isinstance(val, bool)):
            raise ValueError(f"memory option {key}: expected {want.__name__}, got {val!r}")
        if key in _CHOICES and val not in _CHOICES[key]:
            raise ValueError(f"memory option {key}: {val!r} is not one of {_CHOICES[key]}")
        out[key] = val
    if int(out["optimizer_shards"]) < 1 or float(out["moonep_pool_fraction"]) < 0:
        raise ValueError("memory options: optimizer_shards >= 1, moonep_pool_fraction >= 0")
    return out


def dense_params(model) -> int:
    """Attention (q, k, v, o with head_dim = hidden / heads), first dense FFNs and the
    embedding + output layers: the non-expert weights one rank holds (no TP/PP)."""
    heads = getattr(model, "heads", 0)
    if not heads:
        return 0
    head_dim = model.hidden // heads
    kv = getattr(model, "kv_heads", heads) or heads
    attn = model.layers * model.hidden * head_dim * (2 * heads + 2 * kv)
    dense_ffn = getattr(model, "first_dense_layers", 0) * 3 * model.hidden * \
        getattr(model, "dense_ffn", 0)
    return attn + dense_ffn + 2 * getattr(model, "vocab", 0) * model.hidden


def estimate_memory_bytes(model, shape, capacity: str | float, personality: str, ep: int,
                          options: Mapping | None = None) -> dict:
    """Modelled bytes per rank by component, plus total, slots and the formula.

    `model` needs layers, hidden, experts, topk, expert_ffn (shared_ffn, first_dense_layers,
    heads, kv_heads, vocab, dense_ffn optional); `shape` needs seq and micro_batch.
    """
    opt = memory_options(options)
    w, a = PRECISION_BYTES[str(opt["precision"])], BYTES_PER_ELEMENT
    layers = model.layers - getattr(model, "first_dense_layers", 0)
    per_rank = math.ceil(model.experts / ep)
    p = 3 * model.hidden * model.expert_ffn
    s = shape.seq * shape.micro_batch
    n = s * model.topk
    budget = int(float(capacity) * n)
    slots = n if personality == "moonep" else budget
    replicas = {"echo": layers * int(opt["echo_slots_per_rank"]),
                "ultraep": int(opt["ultraep_redundant_per_rank"])}.get(personality, 0)
    pool = 0
    if personality == "moonep":
        pool = int(float(opt["moonep_pool_fraction"]) * per_rank * p *
                   (layers if opt["moonep_pool_per_layer"] else 1))
    shared = layers * 3 * model.hidden * getattr(model, "shared_ffn", 0)
    dense = dense_params(model) if opt["dense"] else 0
    trainable = layers * per_rank * p + shared + dense
    adam = opt["optimizer"] == "adam"
    per_layer_act = 2 * s * model.hidden * a + 2 * slots * model.expert_ffn * a
    if opt["recompute"] == "full":
        acts = layers * s * model.hidden * a + per_layer_act
    else:
        acts = layers * per_layer_act
    est = {
        "expert_weights": layers * per_rank * p * w,
        "shared_weights": shared * w,
        "dense_weights": dense * w,
        "replica_slots": replicas * p * w,
        "redundant_pool": pool * w,
        "gradients": 4 * trainable if adam else 0,
        "optimizer": 12 * trainable // int(opt["optimizer_shards"]) if adam else 0,
        "buffers": 2 * slots * model.hidden * a + 2 * n * model.hidden * a,
        "activations": acts,
    }
    est["total"] = sum(est[c] for c in COMPONENTS)
    est.update(slots=slots, uniform_tokens=n, budget=budget, formula=FORMULA, options=opt)
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

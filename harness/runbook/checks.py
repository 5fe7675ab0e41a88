"""Checks of a loaded runbook's values that need more than a type: capacities on the grid,
model sizes, the timing section, the held-out parsers' errors at file:line: field."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from harness.errors import BadInput
from harness.grid.capacity import budget_tokens, format_capacity, is_executable, next_executable
from harness.io import bounds
from harness.io.yamldoc import Doc, shown
from harness.runbook.model import MAX_LAUNCHES_LIMIT, ModelSpec, Runbook
from harness.vocab import CONTROL_SUFFIX


def canonical_capacity(doc: Doc, value, where: tuple) -> str:
    """A capacity as a decimal string with at least two decimals: 2 / 2.0 / "2" -> "2.00"."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise doc.error(where, f"must be a decimal capacity like \"2.00\", got {shown(doc, value)}")
    text = doc.raw.get(where, str(value)).strip() if not isinstance(value, str) else value.strip()
    try:
        dec = Decimal(text)
    except InvalidOperation as exc:
        raise doc.error(where, f"must be a decimal capacity like \"2.00\", got {shown(doc, value)}") from exc
    if not dec.is_finite() or dec <= 0 or dec > bounds.MAX_CAPACITY \
            or len(text) > bounds.MAX_CAPACITY_CHARS:
        raise doc.error(where, f"must be a positive capacity of at most {bounds.MAX_CAPACITY} "
                        f"and {bounds.MAX_CAPACITY_CHARS} characters, got {shown(doc, text)}")
    return format_capacity(format(dec, "f"))


def check_model(doc: Doc, spec: ModelSpec, where: tuple) -> None:
    for name in ("layers", "hidden", "experts", "topk", "expert_ffn"):
        if getattr(spec, name) <= 0:
            raise doc.error(where + (name,), "must be positive")
    if spec.topk > spec.experts:
        raise doc.error(where + ("topk",), f"top-k {spec.topk} exceeds experts {spec.experts}")
    if not 0 <= spec.first_dense_layers < spec.layers:
        raise doc.error(where + ("first_dense_layers",), "must be in [0, layers)")


def check_capacities(doc: Doc, runbook: Runbook) -> None:
    """The measurement capacity must be executable for every model's N (docs/spec.md: grid)."""
    cap = runbook.capacity.measure
    pad = runbook.capacity.pad_multiple
    for model in runbook.models:
        n = runbook.shape.uniform_tokens(model.topk)
        if not is_executable(cap, n, pad):
            budget = budget_tokens(cap, n)
            nxt = _next_executable_hint(cap, n, pad)
            raise doc.error(("capacity", "measure"),
                            f"capacity {cap} is not executable for {model.name}: "
                            f"N = {n}, budget int({cap} x {n}) = {budget} is not a multiple "
                            f"of pad_multiple {pad}{nxt}")


def cell_world(runbook: Runbook, backend_kind: str, cluster_kind: str) -> tuple[int, str]:
    """(ranks of one cell, where that number comes from): a cluster backend runs torchrun on
    slurm.nodes x slurm.gpus_per_node GPUs; the CPU backends run `shape.ep` ranks."""
    if backend_kind == cluster_kind:
        return runbook.slurm.nodes * runbook.slurm.gpus_per_node, "slurm.gpus_per_node"
    return runbook.shape.ep, "shape.ep"


def check_shape(doc: Doc, runbook: Runbook, cluster_kind: str) -> None:
    """Shapes the backends would reject at iteration 0, refused at load with file:line.

    Sources (NVIDIA/Megatron-LM): megatron/training/arguments.py @307dcf37 "Number of experts
    should be a multiple of expert model parallel_size"; megatron/core/
    num_microbatches_calculator.py @00caa53a "global batch size ({}) is not divisible by micro
    batch size ({}) times data parallel size ({})" (data parallel = world with TP = PP = 1, the
    cluster adapters' setting); the world must hold whole EP groups (expert-parallel groups
    are carved out of the world); top-k <= experts (the router's topk over the expert axis).
    """
    shape = runbook.shape
    for i, model in enumerate(runbook.models):
        if model.experts % shape.ep:
            raise doc.error(("shape", "ep"), f"ep {shape.ep} does not divide {model.name}'s "
                            f"{model.experts} experts (models[{i}]); every backend places "
                            f"experts/ep experts per rank: use an ep that divides "
                            f"{model.experts}")
        if model.topk > model.experts:
            raise doc.error(("models", i), f"{model.name}: top-k {model.topk} exceeds its "
                            f"{model.experts} experts")
    if shape.global_batch % shape.micro_batch:
        raise doc.error(("shape", "global_batch"), f"global_batch {shape.global_batch} is not "
                        f"a multiple of micro_batch {shape.micro_batch}")
    for i, backend in enumerate(runbook.backends):
        world, source = cell_world(runbook, backend.kind, cluster_kind)
        if world < 1:
            raise doc.error(("slurm", "gpus_per_node"), f"backend {backend.name!r} "
                            f"(backends[{i}], kind {backend.kind}) runs on nodes x "
                            f"gpus_per_node GPUs; got {runbook.slurm.nodes} x "
                            f"{runbook.slurm.gpus_per_node}")
        if world % shape.ep:
            raise doc.error(("shape", "ep"), f"world size {world} ({source}) of backend "
                            f"{backend.name!r} is not a multiple of ep {shape.ep}")
        if shape.global_batch % (shape.micro_batch * world):
            raise doc.error(("shape", "global_batch"), f"global_batch {shape.global_batch} is "
                            f"not a multiple of micro_batch x data parallel = "
                            f"{shape.micro_batch} x {world} ({source}) for backend "
                            f"{backend.name!r}")


def held_out_field(doc: Doc, where: tuple, parse, *args):
    """Run a harness.grid.heldout parser; its BadInput becomes one naming file:line: field."""
    try:
        return parse(*args)
    except BadInput as exc:
        text, prefix = str(exc), f"{exc.field}: "
        message = text[len(prefix):] if exc.field and text.startswith(prefix) else text
        raise doc.error(tuple(exc.field.split(".")) if exc.field else where, message) from None


def _next_executable_hint(cap: str, n: int, pad: int) -> str:
    try:
        return f"; next executable: {next_executable(cap, n, pad)}"
    except BadInput:  # a hint only
        return ""


def check_timing(doc: Doc, runbook: Runbook) -> None:
    """1 <= launches <= max_launches <= MAX_LAUNCHES_LIMIT, 0 < resolution < 1, 0 < max_cv,
    a baseline that is a timed backend, no `~control` names."""
    t = runbook.timing
    if not 1 <= t.launches <= MAX_LAUNCHES_LIMIT:
        raise doc.error(("timing", "launches"), f"must be between 1 and {MAX_LAUNCHES_LIMIT}")
    if not t.max_cv > 0:
        raise doc.error(("timing", "max_cv"), "must be a positive number")
    if t.resolution is not None and not 0 < t.resolution < 1:
        raise doc.error(("timing", "resolution"), "must be a fraction between 0 and 1 "
                        "(0.03: every interval within ±3% of its ratio)")
    if t.max_launches is not None:
        if t.resolution is None:
            raise doc.error(("timing", "max_launches"), "caps the launches a timing.resolution "
                            "adds; without a resolution it would be read by nothing")
        if not t.launches <= t.max_launches <= MAX_LAUNCHES_LIMIT:
            raise doc.error(("timing", "max_launches"), f"must be between timing.launches "
                            f"({t.launches}) and {MAX_LAUNCHES_LIMIT}")
    timed = [b.name for b in runbook.backends if b.time]
    if t.baseline is not None and t.baseline not in timed:
        raise doc.error(("timing", "baseline"), f"{t.baseline!r} is not a timed backend "
                        f"(time: true): {timed}")
    for i, b in enumerate(runbook.backends):
        if b.name.endswith(CONTROL_SUFFIX):
            raise doc.error(("backends", i, "name"), f"names ending in {CONTROL_SUFFIX!r} are "
                            "reserved for the A/A control arm")

"""The worker's command line (torch-free, so bad flags and OOM fail before torch loads)."""

from __future__ import annotations

import argparse
import json
from types import SimpleNamespace

from harness.vocab import DEFAULT_PAD_MULTIPLE

from .personalities import LIBRARIES, planner_of


def _positive(text: str) -> int:
    val = int(text)
    if val <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return val


def _non_negative(text: str) -> int:
    val = int(text)
    if val < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return val


def _capacity(text: str) -> str:
    val = float(text)
    if not val > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return text


def _json_object(text: str) -> dict:
    try:
        val = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(val, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return val


def build_parser() -> argparse.ArgumentParser:
    """All flags of `python -m backends.reference`."""
    ap = argparse.ArgumentParser(prog="python -m backends.reference",
                                 description="epcap reference EP dispatch emulation "
                                             "(torch.distributed; not the real libraries)")
    m = ap.add_argument_group("model")
    m.add_argument("--model", default="MODEL", help="model name (seeds the routing)")
    m.add_argument("--layers", type=_positive, required=True)
    m.add_argument("--first-dense-layers", type=_non_negative, default=0)
    m.add_argument("--hidden", type=_positive, required=True)
    m.add_argument("--experts", type=_positive, required=True)
    m.add_argument("--topk", type=_positive, required=True)
    m.add_argument("--expert-ffn", type=_positive, required=True)
    m.add_argument("--shared-ffn", type=_non_negative, default=0)
    m.add_argument("--router-dtype", choices=("fp32", "bf16", "fp16"), default="fp32")
    m.add_argument("--routing-sigma", type=float, default=1.0)
    s = ap.add_argument_group("shape and run")
    s.add_argument("--seq", type=_positive, required=True)
    s.add_argument("--micro-batch", type=_positive, default=1)
    s.add_argument("--ep", type=_positive, required=True, help="EP size = number of ranks")
    s.add_argument("--capacity", type=_capacity, default="2.00")
    s.add_argument("--personality", choices=tuple(LIBRARIES), default="echo")
    s.add_argument("--planner-options", type=_json_object, default={},
                   help="JSON object of the personality's planner options "
                        "(harness/loadmodel/planners.py OPTION_DEFAULTS)")
    s.add_argument("--memory-options", type=_json_object, default={},
                   help="JSON object of memory-model options (harness/loadmodel/memory.py "
                        "MEMORY_DEFAULTS: precision, optimizer, recompute, moonep pool, ...)")
    s.add_argument("--routing", type=_json_object, default={},
                   help='JSON routing workload, e.g. {"workload": "hot_rank"} '
                        "(harness/loadmodel/workloads.py)")
    s.add_argument("--warmup", type=_non_negative, default=1)
    s.add_argument("--iters", type=_positive, default=4)
    s.add_argument("--trials", type=_positive, default=1)
    s.add_argument("--timed", action="store_true",
                   help="take timing trials: warmup + iters x trials iterations, dispatch and "
                        "combine timed after the warmup, an [EPCAP_TIMING] line at the end")
    s.add_argument("--seed", type=int, default=1234,
                   help="routing seed: the tokens' expert choices (a held-out seed on "
                        "held-out runs)")
    s.add_argument("--model-seed", type=int, default=None,
                   help="seed of the model's expert popularity (default: --seed); the "
                        "campaign passes its seed, so held-out routing keeps one router")
    s.add_argument("--device-memory-bytes", type=_positive, default=None)
    s.add_argument("--pad-multiple", type=_positive, default=DEFAULT_PAD_MULTIPLE)
    s.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    s.add_argument("--trace", default=None,
                   help="replay this routing trace: an epcap JSONL file, or Megatron-LM "
                        "router_trace_rank*.jsonl (a file or their directory)")
    s.add_argument("--record-trace", default=None,
                   help="write the routing used (ids and weights) to this file (epcap) or "
                        "directory (megatron)")
    s.add_argument("--record-trace-format", choices=("epcap", "megatron"), default="epcap",
                   help="megatron: router_trace_rank{R}.jsonl per rank, Megatron-LM's fields")
    s.add_argument("--combine-digest", action="store_true",
                   help="print a sha256 of every combine result ([EPCAP_COMBINE] lines)")
    s.add_argument("--pg-timeout-s", type=_positive, default=300)
    s.add_argument("--extra-dispatch-passes", type=_non_negative, default=0,
                   help="timing tests only: run the dispatch exchange this many extra times "
                        "per timed dispatch (discarded), making it measurably slower; 0 = off")
    s.add_argument("--ranks", type=_positive, default=None,
                   help="standalone: spawn this many local ranks (default: --ep)")
    s.add_argument("--spawn", choices=("auto", "fork", "exec"), default="auto",
                   help="standalone: fork after one torch import (CPU) or exec per rank; "
                        "auto = fork unless a GPU is present")
    s.add_argument("--log-dir", default=None,
                   help="standalone: write rank<R>.log files here instead of stdout")
    return ap


def model_of(args: argparse.Namespace) -> SimpleNamespace:
    """ModelSpec-shaped view of the flags (for the memory model)."""
    return SimpleNamespace(name=args.model, layers=args.layers, hidden=args.hidden,
                           experts=args.experts, topk=args.topk, expert_ffn=args.expert_ffn,
                           shared_ffn=args.shared_ffn, first_dense_layers=args.first_dense_layers)


def memory_of(args: argparse.Namespace) -> dict:
    """Memory-model options of the run: --memory-options, with the replica slots the
    personality's planner options imply (echo: moe_num_echo_experts / ep; ultraep: R)."""
    opts = dict(args.memory_options)
    plan = args.planner_options
    if args.personality == "echo":
        total = plan.get("moe_num_echo_experts")
        opts["echo_slots_per_rank"] = 1 if total is None else int(total) // args.ep
    if args.personality == "ultraep":
        opts["ultraep_redundant_per_rank"] = int(plan["redundant_per_rank"])
    return opts


def shape_of(args: argparse.Namespace) -> SimpleNamespace:
    """Shape-shaped view of the flags."""
    return SimpleNamespace(seq=args.seq, micro_batch=args.micro_batch, ep=args.ep)


def tokens_of(args: argparse.Namespace) -> int:
    """Tokens one rank routes per layer: seq x micro_batch."""
    return args.seq * args.micro_batch


def budget_of(args: argparse.Namespace) -> int:
    """Receive slots per rank: int(capacity x tokens x top-k), as the kernels compute it."""
    return int(float(args.capacity) * (tokens_of(args) * args.topk))


def moe_layers(args: argparse.Namespace) -> list[int]:
    """The MoE layers a run dispatches: every layer after the dense ones."""
    return list(range(args.first_dense_layers, args.layers))


def model_seed_of(args: argparse.Namespace) -> int:
    """The seed of the model's expert popularity: --model-seed, else --seed."""
    seed = getattr(args, "model_seed", None)
    return args.seed if seed is None else seed


def check_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Cross-flag checks; argparse error (exit 2) on violation."""
    if args.experts % args.ep:
        ap.error(f"--experts ({args.experts}) must be divisible by --ep ({args.ep})")
    if args.topk > args.experts:
        ap.error(f"--topk ({args.topk}) must be <= --experts ({args.experts})")
    if args.first_dense_layers >= args.layers:
        ap.error("--first-dense-layers must leave at least one MoE layer")
    if args.ranks is not None and args.ranks != args.ep:
        ap.error(f"--ranks ({args.ranks}) must equal --ep ({args.ep})")
    from harness.loadmodel.planners import planner_options
    from harness.loadmodel.workloads import workload_spec
    try:
        args.planner_options = planner_options(planner_of(args.personality),
                                                args.planner_options)
    except ValueError as exc:
        ap.error(f"argument --planner-options: {exc}")
    echo_total = args.planner_options.get("moe_num_echo_experts")
    if echo_total is not None and echo_total % args.ep:
        ap.error(f"argument --planner-options: moe_num_echo_experts ({echo_total}) must be "
                 f"divisible by --ep ({args.ep})")
    from harness.loadmodel.memory import memory_options
    try:
        args.memory_options = memory_options(args.memory_options)
    except ValueError as exc:
        ap.error(f"argument --memory-options: {exc}")
    try:
        args.routing = workload_spec(args.routing)
    except ValueError as exc:
        ap.error(f"argument --routing: {exc}")


def parse_recorded(argv: list[str]) -> argparse.Namespace:
    """parse_args for a recorded argv (untrusted): ValueError with argparse's message on a
    bad flag, never a print or an exit (`--help` included)."""
    ap = build_parser()

    def refuse(message: str | None = None, *_: object) -> None:
        raise ValueError(message or "not a run's flags")

    ap.error = refuse                                  # type: ignore[method-assign]
    ap.exit = lambda status=0, message=None: refuse(message)   # type: ignore[method-assign]
    ap.print_help = ap.print_usage = lambda file=None: None    # type: ignore[method-assign]
    args = ap.parse_args(argv)
    check_args(ap, args)
    return args


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The checked flags of one worker run (argparse exits 2 on a bad one)."""
    ap = build_parser()
    args = ap.parse_args(argv)
    check_args(ap, args)
    return args

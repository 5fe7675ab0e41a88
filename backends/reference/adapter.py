"""The campaign-side adapter: RunRequest -> LaunchSpec for `python -m backends.reference`."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from harness.api.backend import Backend, LaunchSpec, NoOptions, OptionError, RunRequest
from harness.errors import BadInput
from harness.io import bounds
from harness.loadmodel.memory import memory_options
from harness.loadmodel.planners import PERSONALITIES, planner_options
from harness.loadmodel.trace_io import ROUTING_TRACE
from harness.loadmodel.workloads import workload_spec
from harness.vocab import Impl

from .personalities import LIBRARIES, planner_of

if TYPE_CHECKING:
    from .expected import ReferenceExpected

PREFORK_ENV = "EPCAP_PREFORK"     # = harness.launch.forkserver.PREFORK_ENV (tested equal)
REPO_ROOT = Path(__file__).resolve().parents[2]


LAUNCH_MODES = ("per-rank", "single", "forked")
NESTED_SECTIONS = ("planner", "memory", "routing")     # options holding a mapping of numbers


def nested_number_problem(section: str, values: object) -> tuple[str, str] | None:
    """(field, why) of the first number of `options.<section>` outside its declared range
    (bounds.RANGES["<section>.<key>"], which says why each range), else None: checked at
    load, so `planner: {num_buckets: 10**15}` never reaches a rank's memory."""
    if not isinstance(values, dict):
        return None
    for key, val in values.items():
        if isinstance(val, (int, float)) and not isinstance(val, bool):
            why = bounds.problem(f"{section}.{key}", val)
            if why is not None:
                return f"{section}.{key}", why
        elif val is not None and f"{section}.{key}" in bounds.RANGES:   # a number's key
            hint = ""
            if isinstance(val, str):
                try:
                    float(val)      # YAML 1.1 (PyYAML) reads 1e-3, without a '.', as text
                    hint = " (YAML reads a number written without a '.' before its exponent " \
                           "as text: write it as 1.0e-3)"
                except ValueError:
                    pass
            return f"{section}.{key}", f"must be a number, got {bounds.short_text(val)}{hint}"
    return None


@dataclass(frozen=True)
class ReferenceOptions(NoOptions):
    """Runbook `options:` of a reference backend (docs/reference-backend.md)."""

    PATH_FIELDS: ClassVar[tuple[str, ...]] = ("trace", "record_trace")
    launch: str = "per-rank"            # per-rank: ep tasks; single: one task forks the ranks;
    #                                     forked: single, forked from the launcher's fork server
    device: str = "auto"                # auto | cpu | cuda
    trace: str | None = None            # replay this routing trace
    record_trace: str | None = None     # write the routing used (ids and weights) here
    record_trace_format: str = "epcap"  # epcap (one file) | megatron (a directory)
    record_routing: bool = True         # record CELL/routing_trace.jsonl when the run asks
    pg_timeout_s: int | None = None
    threads: int = 1                    # OMP_NUM_THREADS of each rank
    gpus_per_node: int = 0
    extra_dispatch_passes: int = 0      # timing tests only: a measurably slower arm (0 = off)
    planner: dict | None = None         # the personality's planner options (planners.py)
    memory: dict | None = None          # memory-model options (memory.py)
    routing: dict | None = None         # a named workload (workloads.py); a model's wins

    def __post_init__(self) -> None:
        for section in NESTED_SECTIONS:
            why = nested_number_problem(section, getattr(self, section))
            if why is not None:
                raise OptionError(*why)
        for key, check in (("memory", memory_options), ("routing", workload_spec)):
            try:
                check(getattr(self, key))
            except ValueError as exc:
                raise OptionError(key, f"options.{key}: {exc}") from None
        if self.planner:
            errors = []
            for name in PERSONALITIES:
                try:
                    planner_options(name, self.planner)
                    break
                except ValueError as exc:
                    errors.append(str(exc))
            else:
                raise OptionError("planner", f"options.planner fits no personality: "
                                             f"{'; '.join(errors)}")
        if self.launch not in LAUNCH_MODES:
            raise OptionError("launch", f"options.launch {self.launch!r} is not per-rank, "
                                        "single or forked")
        if self.extra_dispatch_passes < 0:
            raise OptionError("extra_dispatch_passes", "options.extra_dispatch_passes must be "
                                                       ">= 0")
        if self.record_trace_format not in ("epcap", "megatron"):
            raise OptionError("record_trace_format", f"options.record_trace_format "
                              f"{self.record_trace_format!r} is not epcap or megatron")
        if self.device not in ("auto", "cpu", "cuda"):
            raise OptionError("device", f"options.device {self.device!r} is not auto, cpu or "
                                        "cuda")


class ReferenceBackend(Backend):
    """Builds the worker argv.

    Options (runbook `options:`): device (auto|cpu|cuda), trace, record_trace,
    record_trace_format (epcap|megatron), record_routing (default true: a run whose request
    asks for its routing, `req.record_routing`, records it to CELL/routing_trace.jsonl for
    `epcap forecast`), pg_timeout_s,
    threads, gpus_per_node, planner, memory, routing, extra_dispatch_passes (timing tests: a
    slower arm), and launch: `per-rank` (default: the launcher starts ep tasks, one per rank),
    `single` (one task that starts the ep ranks itself; on CPU it forks them after one torch
    import, about 1.5 s of CPU saved per rank) or `forked` (as single, and the local launcher
    forks that task from a server that imported torch once per campaign).
    """

    options_type = ReferenceOptions

    def implementation(self, timing: dict | None = None) -> str:
        """Rows of the emulation are labelled `reference`, never a library's name."""
        return Impl.REFERENCE

    def expected_log_shape(self, req: RunRequest) -> dict[str, int]:
        """The worker logs every rank, MoE layer and iteration (warmup included; a timed run
        logs warmup + iters x trials), so a complete log's size is known."""
        return {"expected_ranks": req.shape.ep, "expected_layers": req.model.moe_layers,
                "expected_iters": req.iterations}

    def modelled_peak_memory(self, req: RunRequest) -> int | None:
        """The memory model's total for the run this request launches (what the worker
        reports as `modelled` peak memory off a GPU: worker.peak_memory)."""
        from harness.loadmodel.memory import estimate_memory_bytes

        from .options import memory_of, model_of, parse_args, shape_of
        args = parse_args([str(a) for a in self.command(req).argv[3:]])
        return int(estimate_memory_bytes(model_of(args), shape_of(args), args.capacity,
                                         args.personality, args.ep, memory_of(args))["total"])

    def expected_dispatch(self, argv: Sequence[str] | None) -> ReferenceExpected:
        """The worker's routing regenerated from a recorded argv (expected.py)."""
        from .expected import expected_dispatch
        return expected_dispatch(argv)

    def command(self, req: RunRequest) -> LaunchSpec:
        if self.config.module not in LIBRARIES:
            raise ValueError(f"reference backend {self.name!r}: personality "
                             f"{self.config.module!r} is not one of {sorted(LIBRARIES)}")
        self.check_planner(req.shape.ep)
        self.check_model_routing(req)
        launch = self.options.launch
        argv = [sys.executable, "-m", "backends.reference", *self.args(req)]
        if launch != "per-rank":
            argv += ["--ranks", str(req.shape.ep)]
        env = {"OMP_NUM_THREADS": str(self.options.threads), "PYTHONUNBUFFERED": "1"}
        if launch == "forked":
            env[PREFORK_ENV] = "backends.reference.worker"
        return LaunchSpec(argv=argv, env=env,
                          ntasks=req.shape.ep if launch == "per-rank" else 1, nodes=1,
                          gpus_per_node=int(self.options.gpus_per_node),
                          cwd=str(REPO_ROOT),
                          ranks_per_task=1 if launch == "per-rank" else req.shape.ep)

    def check_planner(self, ep: int) -> None:
        """The planner options must be this personality's (checked before any launch)."""
        field = f"backends.{self.name}.options.planner"
        try:
            opts = planner_options(planner_of(self.config.module), self.options.planner)
        except ValueError as exc:
            raise BadInput(str(exc), field=field) from None
        echo_total = opts.get("moe_num_echo_experts")
        if echo_total is not None and echo_total % ep:
            raise BadInput(f"moe_num_echo_experts ({echo_total}) must be divisible by ep "
                           f"({ep})", field=field)

    def check_model_routing(self, req: RunRequest) -> None:
        """A model's (or the campaign's) `routing:` names a known workload."""
        routing = getattr(req.model, "routing", None)
        if routing is None:
            return
        try:
            workload_spec(routing)
        except ValueError as exc:
            raise BadInput(str(exc), field=f"models.{req.model.name}.routing") from None

    def args(self, req: RunRequest) -> list[str]:
        """The worker flags for one cell (see docs/reference-backend.md)."""
        m, s, ph, opt = req.model, req.shape, req.phase, self.options
        args = ["--model", m.name, "--layers", m.layers, "--first-dense-layers",
                m.first_dense_layers, "--hidden", m.hidden, "--experts", m.experts,
                "--topk", m.topk, "--expert-ffn", m.expert_ffn, "--shared-ffn", m.shared_ffn,
                "--router-dtype", m.router_dtype, "--routing-sigma", repr(float(m.routing_sigma)),
                "--seq", s.seq, "--micro-batch", s.micro_batch, "--ep", s.ep,
                "--capacity", req.cell.capacity, "--personality", self.config.module,
                "--warmup", ph.warmup, "--iters", ph.iters, "--trials", ph.trials,
                "--seed", req.seed, "--pad-multiple", req.pad_multiple, "--device", opt.device]
        if req.timed:
            args += ["--timed"]
        if req.model_seed is not None:        # held-out routing keeps the model's router
            args += ["--model-seed", req.model_seed]
        if req.record_routing and opt.record_routing and \
                opt.record_trace is None:           # for the report's forecast section
            args += ["--record-trace", str(Path(req.cell_dir).resolve() / ROUTING_TRACE)]
        if req.device_memory_bytes is not None:
            args += ["--device-memory-bytes", req.device_memory_bytes]
        for key, flag in (("trace", "--trace"), ("record_trace", "--record-trace"),
                          ("record_trace_format", "--record-trace-format"),
                          ("pg_timeout_s", "--pg-timeout-s")):
            if getattr(opt, key) is not None:
                args += [flag, getattr(opt, key)]
        routing = getattr(m, "routing", None) or opt.routing
        for value, flag in ((opt.planner, "--planner-options"), (opt.memory, "--memory-options"),
                            (routing, "--routing")):
            if value:
                args += [flag, json.dumps(dict(value), sort_keys=True)]
        if opt.extra_dispatch_passes:
            args += ["--extra-dispatch-passes", opt.extra_dispatch_passes]
        return [str(a) for a in args] + list(self.config.flags)

"""The campaign-side adapter: RunRequest -> LaunchSpec for `python -m backends.reference`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from backends.base import Backend, LaunchSpec, RunRequest
from harness.errors import BadInput

from .memory import memory_options
from .personalities import LIBRARIES
from .planners import planner_options
from .workloads import workload_spec

REPO_ROOT = Path(__file__).resolve().parents[2]


class ReferenceBackend(Backend):
    """Builds the worker argv.

    Options (runbook `options:`): device (auto|cpu|cuda), trace, record_trace, pg_timeout_s,
    threads, gpus_per_node, planner (the personality's planner options), memory (memory-model
    options), routing (a named workload, unless the model sets one), and launch: `per-rank` (default: the launcher starts ep tasks,
    one per rank) or `single` (one task that starts the ep ranks itself; on CPU it forks them
    after one torch import, about 1.5 s of CPU saved per rank).
    """

    def command(self, req: RunRequest) -> LaunchSpec:
        if self.config.module not in LIBRARIES:
            raise ValueError(f"reference backend {self.name!r}: personality "
                             f"{self.config.module!r} is not one of {sorted(LIBRARIES)}")
        self.check_options(req)
        launch = self.config.options.get("launch", "per-rank")
        if launch not in ("per-rank", "single"):
            raise ValueError(f"reference backend {self.name!r}: options.launch {launch!r} "
                             f"is not per-rank or single")
        argv = [sys.executable, "-m", "backends.reference", *self.args(req)]
        if launch == "single":
            argv += ["--ranks", str(req.shape.ep)]
        return LaunchSpec(argv=argv,
                          env={"OMP_NUM_THREADS": str(self.config.options.get("threads", 1)),
                               "PYTHONUNBUFFERED": "1"},
                          ntasks=req.shape.ep if launch == "per-rank" else 1, nodes=1,
                          gpus_per_node=int(self.config.options.get("gpus_per_node", 0)),
                          cwd=str(REPO_ROOT))

    def check_options(self, req: RunRequest) -> None:
        """Planner, memory and routing options are checked here, before any launch."""
        opt = self.config.options
        checks = (("planner", lambda v: planner_options(self.config.module, v)),
                  ("memory", memory_options), ("routing", workload_spec))
        for key, check in checks:
            value = getattr(req.model, "routing", None) if key == "routing" else None
            where = f"models.{req.model.name}.routing" if value else \
                f"backends.{self.name}.options.{key}"
            value = value or opt.get(key)
            if value is None:
                continue
            if not isinstance(value, dict):
                raise BadInput(f"expected a mapping, got {value!r}", field=where)
            try:
                check(value)
            except ValueError as exc:
                raise BadInput(str(exc), field=where) from None

    def args(self, req: RunRequest) -> list[str]:
        """The worker flags for one cell (see docs/reference-backend.md)."""
        m, s, ph, opt = req.model, req.shape, req.phase, self.config.options
        args = ["--model", m.name, "--layers", m.layers, "--first-dense-layers",
                m.first_dense_layers, "--hidden", m.hidden, "--experts", m.experts,
                "--topk", m.topk, "--expert-ffn", m.expert_ffn, "--shared-ffn", m.shared_ffn,
                "--router-dtype", m.router_dtype, "--routing-sigma", repr(float(m.routing_sigma)),
                "--seq", s.seq, "--micro-batch", s.micro_batch, "--ep", s.ep,
                "--capacity", req.cell.capacity, "--personality", self.config.module,
                "--warmup", ph.warmup, "--iters", ph.iters, "--trials", ph.trials,
                "--purpose", req.cell.purpose, "--seed", req.seed,
                "--pad-multiple", req.pad_multiple, "--device", opt.get("device", "auto")]
        if req.device_memory_bytes is not None:
            args += ["--device-memory-bytes", req.device_memory_bytes]
        for key, flag in (("trace", "--trace"), ("record_trace", "--record-trace"),
                          ("pg_timeout_s", "--pg-timeout-s")):
            if opt.get(key) is not None:
                args += [flag, opt[key]]
        routing = getattr(m, "routing", None) or opt.get("routing")
        for value, flag in ((opt.get("planner"), "--planner-options"),
                            (opt.get("memory"), "--memory-options"), (routing, "--routing")):
            if value:
                args += [flag, json.dumps(dict(value), sort_keys=True)]
        return [str(a) for a in args] + list(self.config.flags)

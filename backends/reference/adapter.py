"""The campaign-side adapter: RunRequest -> LaunchSpec for `python -m backends.reference`."""

from __future__ import annotations

import sys
from pathlib import Path

from backends.base import Backend, LaunchSpec, RunRequest

from .personalities import LIBRARIES
from .trace_io import ROUTING_TRACE

REPO_ROOT = Path(__file__).resolve().parents[2]


class ReferenceBackend(Backend):
    """Builds the worker argv.

    Options (runbook `options:`): device (auto|cpu|cuda), trace, record_trace,
    record_trace_format (epcap|megatron), record_routing (default true: a measure cell
    records its routing to CELL/routing_trace.jsonl for `epcap forecast`), pg_timeout_s,
    threads, gpus_per_node, and launch: `per-rank` (default: the launcher starts ep tasks,
    one per rank) or `single` (one task that starts the ep ranks itself; on CPU it forks them
    after one torch import, about 1.5 s of CPU saved per rank).
    """

    def command(self, req: RunRequest) -> LaunchSpec:
        if self.config.module not in LIBRARIES:
            raise ValueError(f"reference backend {self.name!r}: personality "
                             f"{self.config.module!r} is not one of {sorted(LIBRARIES)}")
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
        if req.cell.purpose == "measure" and opt.get("record_routing", True) and \
                opt.get("record_trace") is None:        # for the report's forecast section
            args += ["--record-trace", str(Path(req.cell_dir).resolve() / ROUTING_TRACE)]
        if req.device_memory_bytes is not None:
            args += ["--device-memory-bytes", req.device_memory_bytes]
        for key, flag in (("trace", "--trace"), ("record_trace", "--record-trace"),
                          ("record_trace_format", "--record-trace-format"),
                          ("pg_timeout_s", "--pg-timeout-s")):
            if opt.get(key) is not None:
                args += [flag, opt[key]]
        return [str(a) for a in args] + list(self.config.flags)

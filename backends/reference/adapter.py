"""The campaign-side adapter: RunRequest -> LaunchSpec for `python -m backends.reference`."""

from __future__ import annotations

import sys
from pathlib import Path

from backends.base import Backend, LaunchSpec, RunRequest

from .personalities import LIBRARIES

REPO_ROOT = Path(__file__).resolve().parents[2]


class ReferenceBackend(Backend):
    """Builds the worker argv; options: device, trace, record_trace, pg_timeout_s, threads."""

    def command(self, req: RunRequest) -> LaunchSpec:
        if self.config.module not in LIBRARIES:
            raise ValueError(f"reference backend {self.name!r}: personality "
                             f"{self.config.module!r} is not one of {sorted(LIBRARIES)}")
        return LaunchSpec(argv=[sys.executable, "-m", "backends.reference", *self.args(req)],
                          env={"OMP_NUM_THREADS": str(self.config.options.get("threads", 1)),
                               "PYTHONUNBUFFERED": "1"},
                          ntasks=req.shape.ep, nodes=1,
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
        if req.device_memory_bytes is not None:
            args += ["--device-memory-bytes", req.device_memory_bytes]
        for key, flag in (("trace", "--trace"), ("record_trace", "--record-trace"),
                          ("pg_timeout_s", "--pg-timeout-s")):
            if opt.get(key) is not None:
                args += [flag, opt[key]]
        return [str(a) for a in args] + list(self.config.flags)

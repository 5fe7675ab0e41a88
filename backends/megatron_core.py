"""The `megatron-core` backend: megatron-core's TopKRouter and MoEAlltoAllTokenDispatcher
under torch.distributed, on the reference backend's routing (an independent implementation
of the dispatch count that checks ours; docs/megatron-core.md).

`make_backend(config)` builds the argv of `python -m backends.megatron_core_worker`, which
takes the reference worker's flags (same model, shape, seed, routing and trace options), so a
runbook can run the reference and megatron-core on exactly the same routing. Rows carry
`backend_impl=megatron-core`; megatron-core itself is the `[megatron]` extra (pyproject.toml).
"""

from __future__ import annotations

import sys
from pathlib import Path

from backends.base import Backend, LaunchSpec, RunRequest
from backends.reference.adapter import ReferenceBackend
from harness.errors import BadInput
from harness.runbook import BackendConfig

REPO_ROOT = Path(__file__).resolve().parents[1]
WORKER = "backends.megatron_core_worker"
UNSUPPORTED = ("record_trace",)


class MegatronCoreBackend(Backend):
    """Options: device (auto|cpu|cuda), trace, pg_timeout_s, threads, gpus_per_node and
    launch (`per-rank`, default, or `single`: one task forks the ranks after one import)."""

    def command(self, req: RunRequest) -> LaunchSpec:
        opts = self.config.options
        for key in UNSUPPORTED:
            if opts.get(key) is not None:
                raise BadInput(f"backend {self.name!r}: options.{key} is not supported by "
                               f"megatron-core (record with the reference backend)",
                               field=f"backends.{self.name}.options.{key}")
        launch = opts.get("launch", "per-rank")
        if launch not in ("per-rank", "single"):
            raise BadInput(f"backend {self.name!r}: options.launch {launch!r} is not "
                           f"per-rank or single", field=f"backends.{self.name}.options.launch")
        args = ReferenceBackend.args(self, req)
        cut = args.index("--personality")
        args = args[:cut] + args[cut + 2:]
        argv = [sys.executable, "-m", WORKER, *args]
        if launch == "single":
            argv += ["--ranks", str(req.shape.ep)]
        return LaunchSpec(argv=argv, env={"OMP_NUM_THREADS": str(opts.get("threads", 1)),
                                          "PYTHONUNBUFFERED": "1"},
                          ntasks=req.shape.ep if launch == "per-rank" else 1, nodes=1,
                          gpus_per_node=int(opts.get("gpus_per_node", 0)), cwd=str(REPO_ROOT))


def make_backend(config: BackendConfig) -> MegatronCoreBackend:
    """Entry point used by backends.load_backend."""
    return MegatronCoreBackend(config)

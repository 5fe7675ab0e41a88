"""The `megatron-core` backend: megatron-core's TopKRouter and MoEAlltoAllTokenDispatcher
under torch.distributed, on the reference backend's routing (an independent implementation
of the dispatch count that checks ours; docs/megatron-core.md).

`make_backend(config)` builds the argv of `python -m backends.megatron_core.worker`, which
takes the reference worker's flags (same model, shape, seed, routing and trace options), so a
runbook can run the reference and megatron-core on exactly the same routing. Rows carry
`backend_impl=megatron-core`; megatron-core itself is the `[megatron]` extra (pyproject.toml).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from backends.reference.adapter import PREFORK_ENV, REPO_ROOT, ReferenceBackend, ReferenceOptions
from backends.reference.personalities import LIBRARIES
from harness.api.backend import BackendConfig, LaunchSpec, OptionError, RunRequest
from harness.vocab import Impl

WORKER = "backends.megatron_core.worker"
# `launch: forked`: the fork server imports these once (torch, the reference worker and
# megatron-core's dispatcher, about 4 s of CPU on the shared 2-core machine), then forks each run
PRELOAD = "backends.reference.worker,backends.megatron_core.worker," \
    "megatron.core.transformer.moe.token_dispatcher"
# The reference personality without any rebalancing: `raw` where the reference has it, else
# `echo` (which did not rebalance before `raw` existed).
NO_REBALANCING = "raw" if "raw" in LIBRARIES else "echo"


@dataclass(frozen=True)
class MegatronCoreOptions(ReferenceOptions):
    """The reference backend's options (docs/reference-backend.md) but record_trace: record
    with the reference backend, replay here with `trace`."""

    record_routing: bool = False        # off: record routing with the reference backend

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.record_trace is not None:
            raise OptionError("record_trace", "megatron-core does not record traces; record "
                                              "with the reference backend, replay with trace")


OPTIONS = MegatronCoreOptions


class MegatronCoreBackend(ReferenceBackend):
    """Same worker flags and log shape as the reference; another worker and label. The
    worker runs megatron-core's dispatch on the routing a `NO_REBALANCING` reference rank
    would route (its RankRun.routing), so the two can be compared row for row."""

    options_type = MegatronCoreOptions

    def implementation(self, timing: dict | None = None) -> str:
        """Rows of this backend are labelled `megatron-core`."""
        return Impl.MEGATRON_CORE

    def expected_dispatch(self, argv: Sequence[str] | None) -> None:
        """None: its rows are megatron-core's own dispatch count, not the reference's."""
        return None

    def command(self, req: RunRequest) -> LaunchSpec:
        args = self.args(req)
        at = args.index("--personality") + 1   # the reference rank the worker borrows routing
        args[at] = NO_REBALANCING              # and setup from: no rebalancing, ever
        argv = [sys.executable, "-m", WORKER, *args]
        single = self.options.launch in ("single", "forked")
        if single:
            argv += ["--ranks", str(req.shape.ep)]
        env = {"OMP_NUM_THREADS": str(self.options.threads), "PYTHONUNBUFFERED": "1"}
        if self.options.launch == "forked":
            env[PREFORK_ENV] = PRELOAD
        return LaunchSpec(argv=argv, env=env,
                          ntasks=1 if single else req.shape.ep, nodes=1,
                          gpus_per_node=int(self.options.gpus_per_node), cwd=str(REPO_ROOT),
                          ranks_per_task=req.shape.ep if single else 1)


def make_backend(config: BackendConfig) -> MegatronCoreBackend:
    """Entry point used by harness.api.registry."""
    return MegatronCoreBackend(config)

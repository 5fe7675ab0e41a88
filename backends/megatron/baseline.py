"""Public baselines: Megatron-core's own token dispatchers, no fork, as timed arms.

Pinned source: NVIDIA/Megatron-LM main at d98e8a64ddf34856e74b24714e3bedb2f5a39553, whose
megatron/core/transformer/transformer_config.py defines (argument data
backends/megatron/args/data/d98e8a64ddf34856e74b24714e3bedb2f5a39553.json):
`--moe-token-dispatcher-type` with choices allgather | alltoall | flex (line 891) and
`--moe-flex-dispatcher-backend` with choices deepep | hybridep | ncclep (line 898); its
`--moe-enable-deepep` (line 895) is the deprecated spelling of the deepep backend
(`TransformerConfig.__post_init__`: "moe_enable_deepep is deprecated"), so it is not used.

`options.dispatcher` picks the arm: `alltoall` (MoEAlltoAllTokenDispatcher: one copy per
(token, expert)), `deepep` or `hybridep` (flex: one copy per (token, destination rank)).
Without `--moe-expert-capacity-factor` every one of them is dropless; the timing capacity
reaches the telemetry hook through the env, as for MoonEP. The reference backend emulates
the same contracts on CPU (`module: alltoall | deepep | hybridep`,
docs/reference-backend.md#public-baselines).
"""

from __future__ import annotations

from dataclasses import dataclass

from backends.megatron.args import MegatronSource
from backends.megatron.base import MegatronBackend, MegatronOptions
from harness.api.backend import BackendConfig, OptionError, RunRequest

MAIN_SOURCE = MegatronSource("NVIDIA/Megatron-LM", "d98e8a64ddf34856e74b24714e3bedb2f5a39553",
                             "refs/heads/main")
DISPATCHER_FLAG = "--moe-token-dispatcher-type"
FLEX_BACKEND_FLAG = "--moe-flex-dispatcher-backend"
DISPATCHERS = {"alltoall": [DISPATCHER_FLAG, "alltoall"],
               "deepep": [DISPATCHER_FLAG, "flex", FLEX_BACKEND_FLAG, "deepep"],
               "hybridep": [DISPATCHER_FLAG, "flex", FLEX_BACKEND_FLAG, "hybridep"]}


@dataclass(frozen=True)
class BaselineOptions(MegatronOptions):
    """A baseline's runbook options: which of Megatron-core's dispatchers it times."""

    dispatcher: str = "alltoall"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dispatcher not in DISPATCHERS:
            raise OptionError("dispatcher", f"options.dispatcher {self.dispatcher!r} is not one "
                                            f"of {sorted(DISPATCHERS)}")


OPTIONS = BaselineOptions


class BaselineBackend(MegatronBackend):
    """Megatron-core's alltoall, or flex with DeepEP or HybridEP, on Megatron-LM main."""

    options_type = BaselineOptions
    default_source = MAIN_SOURCE

    @property
    def library(self) -> str:  # type: ignore[override]
        """The dispatcher timed (alltoall | deepep | hybridep)."""
        return self.options.dispatcher

    def library_args(self, req: RunRequest, values: dict[str, str]) -> list[str]:
        """The dispatcher's own flags as main defines them; no capacity flag (dropless)."""
        return list(DISPATCHERS[self.options.dispatcher])


def make_backend(config: BackendConfig) -> BaselineBackend:
    """Entry point used by backends.load_backend."""
    return BaselineBackend(config)
